"""Temperature: a float, or a tensor of per-sample / per-token temperatures.

The ops take a float, a 0-d tensor (on the hidden states' device, or on the CPU as torch's
scalars) or an [N] tensor (one per token row, on the hidden states' device); the processors
also take [b] (per sample) and [b, s] (per token), flattened here to the ops' s-major rows.
The stages receive ``inv_temperature``: a Python float, or an fp32 [N] tensor on the
hidden states' device.

Host syncs: a float is checked on the host (no device work at all). A tensor's shape and
dtype are checked on the host (metadata, no sync). Its values: on CPU, checked at once
(ValueError); on CUDA, reading them would stop the host until the GPU catches up, so
instead a non-finite or non-positive entry turns that row's inverse temperature into NaN
on the device: every output of that row is NaN, never a plausible wrong number. "Bad"
includes a positive temperature below fp32's smallest normal number (MIN_TEMPERATURE),
whose fp32 inverse overflows, and one above MAX_TEMPERATURE. Call
:func:`check_temperature_values` yourself where one sync is acceptable to get the
ValueError on CUDA too. No gradient flows to the temperature: a tensor that requires grad
is refused while autograd is on.
"""

from __future__ import annotations

import math
import numbers

import torch

_FIX = "use 1.0 for the unscaled distribution"
# The smallest temperature taken: fp32's smallest normal number, 2^-126 ~ 1.2e-38. Below it
# the fp32 inverse the kernels scale by overflows (1 / 3e-39 = inf) and the row is NaN.
# (A temperature this small still overflows logit / T for |logit| >= ~4; that depends on
# the data and is not checked.)
MIN_TEMPERATURE = torch.finfo(torch.float32).tiny
# The largest, 2^66 ~ 7.4e19 (exact in fp32 and fp64: a float is held to it as given, a
# tensor's entry as the ops take it, in fp32): far above any sampling temperature (there,
# logits a billion in size differ by 1e-11 in z: a uniform distribution). The Triton
# kernels fill the last vocab tile's padded columns with a raw logit of -1e30
# (ops/kernels/_online_stats.py), which must stay far below every real z = logit / T: at
# 2^66 it is z ~ -1.4e10, nothing in the softmax; from T ~ 1e29 it came near 0 and the
# padded columns counted as vocab entries (Triton's interpreter: log p = -ln 32 against
# -ln 16 at V = 16, T = 1e33).
MAX_TEMPERATURE = 2.0 ** 66


def validate_temperature(temperature) -> None:
    """Type (float or floating tensor) and, for a Python number, value; no device sync."""
    if isinstance(temperature, torch.Tensor):
        if not temperature.is_floating_point():
            raise TypeError(f"temperature must be a float or a floating-point tensor, got a "
                            f"{temperature.dtype} tensor; pass e.g. temps.float()")
        if temperature.requires_grad and torch.is_grad_enabled():
            # the ops take the temperature as an option: no gradient would reach it (under
            # no_grad / inference_mode none is asked for: a Parameter's value is taken)
            raise ValueError("temperature requires grad, but the fused ops give no gradient "
                             "w.r.t. the temperature (it is taken as a constant); pass "
                             "temperature.detach()")
        if temperature.device.type == "cpu":
            check_temperature_values(temperature)
        return
    # numbers.Real: numpy's scalars too (np.float32(0.7) from a config)
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a float (or a tensor of them), got "
                        f"{type(temperature).__name__}; pass e.g. temperature=0.7")
    overflow = False
    try:
        value = float(temperature)
    except OverflowError:  # an int or Fraction beyond any float: above the range (below)
        value, overflow = (math.inf if temperature > 0 else -math.inf), True
    if (not overflow and not math.isfinite(value)) or value <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r:.40}; {_FIX}")
    if value < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be >= {MIN_TEMPERATURE:.4g} (fp32's smallest normal "
                         f"number: its inverse must be finite in fp32), got {temperature!r:.40}; "
                         f"{_FIX}")
    if value > MAX_TEMPERATURE:
        raise ValueError(f"temperature must be <= 2^66 ~ {MAX_TEMPERATURE:.3g} (the fused "
                         f"kernels' range), got {temperature!r:.40}; {_FIX}")


def check_temperature_values(temperature: torch.Tensor) -> None:
    """ValueError unless every entry lies in [MIN_TEMPERATURE, MAX_TEMPERATURE] in fp32 (so
    finite and > 0; one device->host copy on CUDA)."""
    if temperature.numel() == 0:
        return
    # as the ops take it: an fp64 1e-50 is 0 there
    bad = ~_within_range(temperature.detach().float())
    if bool(bad.any()):
        first = bad.reshape(-1).nonzero()[0].item()
        value = temperature.reshape(-1)[first].item()
        if value <= 0 or not math.isfinite(value):
            rule = "finite and > 0 everywhere"
        elif value > 1:  # above the kernels' range, or inf in fp32
            rule = f"at most 2^66 ~ {MAX_TEMPERATURE:.3g} everywhere (the fused kernels' range)"
        else:  # positive: below fp32's smallest normal number as the ops take it
            rule = f"finite and >= {MIN_TEMPERATURE:.4g} everywhere in fp32 (fp32's smallest " \
                   f"normal number: its inverse must be finite)"
        raise ValueError(f"temperature must be {rule}, got {value} at flat index {first} of "
                         f"the {tuple(temperature.shape)} temperature tensor; {_FIX}")


def rows_from_batch_seq(temperature, batch: int, seq: int):
    """A processor's temperature (float, 0-d, [b] or [b, s]) -> the ops' float, 0-d or
    [s * b] in the s-major row order of the flattened [s, b, h] hidden states."""
    if not isinstance(temperature, torch.Tensor) or temperature.dim() == 0:
        return temperature
    if temperature.shape == (batch,):
        return temperature.expand(seq, batch).reshape(seq * batch)
    if temperature.shape == (batch, seq):
        return temperature.transpose(0, 1).reshape(seq * batch)
    raise ValueError(f"temperature must be a float, a 0-d tensor, a [batch] = [{batch}] tensor "
                     f"(per sample) or a [batch, seq] = [{batch}, {seq}] tensor (per token), "
                     f"got shape {tuple(temperature.shape)}")


def inverse_temperature(temperature, n_rows: int, device: torch.device, rows=None):
    """The stages' ``inv_temperature``: a float for a float, else an fp32 [n_rows] tensor
    on ``device`` (a 0-d tensor is broadcast). Bad tensor entries -> NaN rows (see above).
    ``rows``: the stage's ``inverse_temperature_rows`` (ops/stages.py; on CUDA one kernel,
    where the torch form below is four to five launches), default ``inverse_rows``."""
    if not isinstance(temperature, torch.Tensor):
        return 1.0 / float(temperature)
    if temperature.dim() == 0:
        if temperature.device.type == "cpu" and device.type != "cpu":
            # a CPU scalar (as torch's own ops take one on any device): its value was
            # checked on the host (validate_temperature); reading it needs no device sync
            return float(temperature.float().reciprocal())  # fp32's 1 / T, as the [N] path
        temperature = temperature.expand(n_rows)
    if temperature.shape != (n_rows,):
        raise ValueError(f"temperature must be a float, a 0-d tensor or an [N] = [{n_rows}] "
                         f"tensor (one per token row), got shape {tuple(temperature.shape)}")
    if temperature.device != device:
        raise ValueError(f"temperature is on {temperature.device} but the hidden states are on "
                         f"{device}; move it, e.g. temperature.to(hidden.device)")
    # The gradient does not flow to the temperature (it is an option, not an input).
    return (rows or inverse_rows)(temperature.detach())


def inverse_rows(temperature: torch.Tensor) -> torch.Tensor:
    """fp32 [N] 1 / T of [N] temperatures, NaN where T (in fp32) lies outside
    [MIN_TEMPERATURE, MAX_TEMPERATURE] (or is NaN): the torch stage's
    ``inverse_temperature_rows``."""
    t = temperature.to(torch.float32)
    return torch.where(_within_range(t), t.reciprocal(), float("nan"))


def _within_range(t: torch.Tensor) -> torch.Tensor:
    """Bool like the fp32 ``t``: MIN_TEMPERATURE <= t <= MAX_TEMPERATURE (False for NaN).
    Clamping changes nothing exactly there (NaN, +-inf compare unequal): two element-wise
    launches on CUDA, where >=, <= and & took three."""
    return t.clamp(MIN_TEMPERATURE, MAX_TEMPERATURE) == t
