"""The recompute kernel's forms that must give the same gradient bits as a config.

``grad_logits_kernel`` (megatron_overlay/ops/kernels/logprob_backward.py) can run its
persistent loop nested or flattened (``loop`` 0 / 1), its epilogue whole or in two
halves (``epilogue_subtile``), and its grid persistent or one program a tile; each form
computes every d(logits) entry by the same operations, so each must reproduce the
config's gradients bit for bit. Used by the interpreter's ``forms-`` cases (CPU, CI) and
by the GPU's ``test_backward_configs_change_no_bit``.
"""
from __future__ import annotations

from dataclasses import replace


def backward_forms(config):
    """Every (loop, epilogue) form of ``config`` and its non-persistent plain-loop form,
    less ``config`` itself, in a fixed order."""
    forms = [replace(config, loop=loop, epilogue_subtile=halves, persistent=True)
             for loop in (0, 1) for halves in (False, True)]
    forms.append(replace(config, loop=0, epilogue_subtile=False, persistent=False))
    return [form for form in forms if form != config]
