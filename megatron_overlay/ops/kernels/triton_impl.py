"""The fused log-prob/entropy stages on Triton kernels: launches, grids and buffers only.

Same contract as ``ops/torch_chunked.py`` (its docstring): ``forward_stats`` returns the
[N, 4] fp32 per-token statistics of this vocab shard, ``backward`` returns fp32 d_hidden
(partial over the shard) and fp32 d_weight. Both take keyword-only extras for tools and
tests (``config``, ``use_tma``; backward also ``chunk_budget`` and ``d_weight_dtype``); the
autograd Function passes none of them.

The backward materializes d(logits) one vocab chunk at a time in the input dtype and
hands the two gradient GEMMs to cuBLAS (fp32 outputs); logprob_backward.py says why.

Paths, picked per call: on Hopper (sm_90+) with 16-byte-aligned rows the kernels read
through TMA tensor descriptors; elsewhere, and under ``TRITON_INTERPRET=1`` (whose
descriptor loads are wrong for 16-bit dtypes in Triton 3.7), through plain pointer loads.
The math is the same code either way (``_tiles.load_tile``).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from .. import batch_invariance
from . import autotune_configs
from .autotune_configs import KernelConfig
from .logprob_backward import grad_logits_kernel
from .gather_dot import gather_dot_kernel
from .logprob_forward import forward_stats_kernel
from .sparse_grad import add_sparse_grad_kernel
from .merge_splits import merge_splits_kernel

__all__ = ["forward_stats", "backward", "logits_at", "interpreting", "tma_supported"]


def interpreting() -> bool:
    """True when the kernels were built for Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    return type(forward_stats_kernel).__name__ == "InterpretedFunction"


def _check_device(*tensors: torch.Tensor) -> None:
    if interpreting():
        return
    for t in tensors:
        if not t.is_cuda:
            raise RuntimeError(
                f"the Triton kernels need CUDA tensors (got one on {t.device}); use "
                f"MEGATRON_OVERLAY_IMPL=torch on CPU, or set TRITON_INTERPRET=1 before "
                f"importing triton to run them in Triton's interpreter")


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _sms(device: torch.device) -> int:
    if device.type != "cuda":
        return autotune_configs.INTERPRETER_NUM_SMS
    return _num_sms(device.index if device.index is not None else torch.cuda.current_device())


def _tma_aligned(t: torch.Tensor) -> bool:
    return (t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.stride(0) * t.element_size()) % 16 == 0)


def tma_supported(*tensors: torch.Tensor) -> bool:
    """Hopper or newer, and every matrix fit for a TMA descriptor."""
    if interpreting() or not all(t.is_cuda for t in tensors):
        return False
    if torch.cuda.get_device_capability(tensors[0].device)[0] < 9:
        return False
    return all(_tma_aligned(t) for t in tensors)


def _rowmajor(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _dot_precision(dtype: torch.dtype) -> str:
    # fp32 inputs: 3xTF32 keeps fp32-level accuracy on the tensor cores; "ieee" would run
    # on the FMA units at a tenth of the speed. 16-bit inputs ignore the setting.
    if interpreting():
        return "ieee"
    return "tf32x3" if dtype == torch.float32 else "tf32"


def _upcast_dot(dtype: torch.dtype) -> bool:
    # Triton 3.7's interpreter computes bf16 dots wrongly; fp32 operands give the same
    # products (bf16 -> fp32 is exact) with the same fp32 accumulation.
    return interpreting() and dtype == torch.bfloat16


def _source(t: torch.Tensor, block: list[int], tma: bool):
    return TensorDescriptor.from_tensor(t, block) if tma else t


@functools.lru_cache(maxsize=4096)
def choose_splits(num_m: int, num_v: int, n_rows: int, num_sms: int, group_m: int):
    """(splits, vocab tiles per split) for the forward grid.

    Maximizes the busy fraction of the last wave over split counts whose partial
    statistics fit PARTIAL_STATS_BUDGET_BYTES, with at least num_sms / group_m splits so one
    wave spans about one group of token tiles (its hidden tiles stay in L2).
    """
    cap = max(1, min(num_v, autotune_configs.PARTIAL_STATS_BUDGET_BYTES // (16 * max(n_rows, 1))))
    low = max(1, min(cap, math.ceil(num_sms / group_m)))
    best = (-1.0, 1, num_v)
    for s in range(low, cap + 1):
        per_split = math.ceil(num_v / s)
        splits = math.ceil(num_v / per_split)  # no empty splits
        waves = math.ceil(num_m * splits / num_sms)
        busy = (num_m * num_v) / (waves * num_sms * per_split)
        if busy > best[0] + 1e-3:
            best = (busy, splits, per_split)
    return best[1], best[2]


def forward_splits(n_tokens: int, num_v: int, num_sms: int, cfg: KernelConfig):
    """(splits, vocab tiles per split, tokens per launch).

    Batch invariant (the default, ops/batch_invariance.py): the splits are chosen for a
    fixed token count (autotune_configs.INVARIANT_SPLIT_TOKENS), so they depend on V and
    the GPU only; the partial statistics' budget is kept by launching on row blocks
    instead (rows never interact). Otherwise: chosen for N (one launch).
    """
    if not batch_invariance.enabled():
        splits, per_split = choose_splits(triton.cdiv(n_tokens, cfg.block_m), num_v, n_tokens,
                                          num_sms, cfg.group_m)
        return splits, per_split, n_tokens
    ref = autotune_configs.INVARIANT_SPLIT_TOKENS
    splits, per_split = choose_splits(triton.cdiv(ref, cfg.block_m), num_v, ref, num_sms,
                                      cfg.group_m)
    rows = autotune_configs.PARTIAL_STATS_BUDGET_BYTES // (16 * splits)
    rows = max(cfg.block_m, rows // cfg.block_m * cfg.block_m)
    return splits, per_split, min(rows, n_tokens)


def forward_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor,
                  inv_temperature, with_entropy: bool, *,
                  config: KernelConfig | None = None, use_tma: bool | None = None) -> torch.Tensor:
    _check_device(hidden, weight, local_labels)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    stats = torch.zeros(n_tokens, 4, dtype=torch.float32, device=hidden.device)
    if n_tokens == 0 or vocab == 0:
        stats[:, 0] = float("-inf")
        return stats
    hidden, weight = _rowmajor(hidden), _rowmajor(weight)
    labels = local_labels.contiguous()
    tma = tma_supported(hidden, weight) if use_tma is None else use_tma
    cfg = config or autotune_configs.forward_config(hidden.dtype, tma, interpreting())

    num_v = triton.cdiv(vocab, cfg.block_v)
    splits, per_split, block_rows = forward_splits(n_tokens, num_v, _sms(hidden.device), cfg)
    part = None if splits == 1 else torch.empty(splits, block_rows, 4, dtype=torch.float32,
                                                device=hidden.device)
    inv_t_rows, inv_t = _inv_t_args(inv_temperature)
    for r0 in range(0, n_tokens, block_rows):
        rows = min(block_rows, n_tokens - r0)
        h = hidden[r0:r0 + rows]
        # the kernel writes a contiguous [splits, rows, 4] block
        out = stats[r0:r0 + rows] if part is None else \
            part.view(-1)[:splits * rows * 4].view(splits, rows, 4)
        forward_stats_kernel[(triton.cdiv(rows, cfg.block_m) * splits,)](
            _source(h, [cfg.block_m, cfg.block_k], tma),
            _source(weight, [cfg.block_v, cfg.block_k], tma),
            labels[r0:r0 + rows], out,
            stats if inv_t_rows is None else inv_t_rows[r0:r0 + rows],
            rows, vocab, hidden_size, h.stride(0), weight.stride(0), inv_t,
            splits, per_split, cfg.group_m,
            BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
            WITH_ENTROPY=bool(with_entropy), USE_TMA=tma, LOOP=cfg.loop,
            WARP_SPEC=cfg.warp_specialize, DOT_PRECISION=_dot_precision(hidden.dtype),
            UPCAST_DOT=_upcast_dot(hidden.dtype), ROW_INV_T=inv_t_rows is not None,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
        if part is not None:
            _merge_splits(out, stats[r0:r0 + rows], bool(with_entropy))
    return stats


def _inv_t_args(inv_temperature):
    """(per-row fp32 [N] tensor or None, scalar kernel argument): the contract's
    inv_temperature, a float or an [N] tensor (kernels: ``ROW_INV_T``)."""
    if isinstance(inv_temperature, torch.Tensor):
        return inv_temperature.to(torch.float32).contiguous(), 1.0
    return None, float(inv_temperature)


# logits_at: ids per program and hidden columns per step ([32, 256] fp32 products: 64
# registers a thread at 4 warps).
GATHER_BLOCK_IDS = 32
GATHER_BLOCK_H = 256


def logits_at(hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
              inv_temperature) -> torch.Tensor:
    """ops/logits_at.py's contract on a Triton kernel (kernels/gather_dot.py)."""
    _check_device(hidden, weight, local_ids)
    n, k = local_ids.shape
    out = torch.zeros(n, k, dtype=torch.float32, device=hidden.device)
    if n == 0 or k == 0:
        return out
    hidden, weight = _rowmajor(hidden), _rowmajor(weight)
    ids = local_ids.contiguous()
    inv_t_rows, inv_t = _inv_t_args(inv_temperature)
    block_i = max(2, min(GATHER_BLOCK_IDS, triton.next_power_of_2(k)))
    grid = (n, triton.cdiv(k, block_i))
    gather_dot_kernel[grid](hidden, weight, ids, out if inv_t_rows is None else inv_t_rows, out,
                            hidden.shape[1], k, hidden.stride(0), weight.stride(0), inv_t,
                            ROW_INV_T=inv_t_rows is not None, BLOCK_I=block_i,
                            BLOCK_H=16 if interpreting() else GATHER_BLOCK_H, num_warps=4)
    return out


MERGE_BLOCK = 256


def _merge_splits(part: torch.Tensor, stats: torch.Tensor, with_entropy: bool) -> None:
    """[S, rows, 4] per-split statistics -> [rows, 4] (kernels/merge_splits.py)."""
    n_rows = stats.shape[0]
    merge_splits_kernel[(triton.cdiv(n_rows, MERGE_BLOCK),)](
        part, stats, n_rows, part.shape[0], WITH_ENTROPY=with_entropy, BLOCK=MERGE_BLOCK)


# cuBLAS with fp32 outputs from 16-bit operands (torch.mm(..., out_dtype=float32), CUDA
# only): flags flip to False the first time a form is refused, and a fallback is used.
_MM_OUT_DTYPE = {"mm": True, "addmm": True}


def _matmul_fp32(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
    """out (fp32) = a @ b, or out += a @ b, with fp32 accumulation throughout."""
    if a.is_cuda and a.dtype != torch.float32:
        if accumulate and _MM_OUT_DTYPE["addmm"]:
            try:
                torch.addmm(out, a, b, out_dtype=torch.float32, out=out)
                return
            except (RuntimeError, TypeError):
                _MM_OUT_DTYPE["addmm"] = False
        if _MM_OUT_DTYPE["mm"]:
            try:
                if accumulate:
                    out += torch.mm(a, b, out_dtype=torch.float32)
                else:
                    torch.mm(a, b, out_dtype=torch.float32, out=out)
                return
            except (RuntimeError, TypeError):
                _MM_OUT_DTYPE["mm"] = False
        product = torch.mm(a, b).float()  # one 16-bit rounding of each chunk's product
    elif a.is_cuda:
        product = torch.mm(a, b)
    else:  # the interpreter's CPU tensors
        product = a.float() @ b.float()
    if accumulate:
        out += product
    else:
        out.copy_(product)


def _vocab_chunk(n_tokens: int, vocab: int, elem: int, block_v: int, budget: int) -> int:
    chunks = max(1, math.ceil(n_tokens * vocab * elem / budget))
    width = triton.cdiv(triton.cdiv(vocab, chunks), block_v) * block_v
    return min(width, triton.cdiv(vocab, block_v) * block_v)


def backward(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor,
             inv_temperature, lse: torch.Tensor, mean_z: torch.Tensor | None,
             grad_logprob: torch.Tensor, grad_entropy: torch.Tensor | None, *,
             config: KernelConfig | None = None, use_tma: bool | None = None,
             chunk_budget: int | None = None, d_weight_dtype: torch.dtype | None = None,
             d_hidden_dtype: torch.dtype | None = None, block_tokens: int | None = None,
             sparse_ids: torch.Tensor | None = None, sparse_grads: torch.Tensor | None = None):
    """The contract's backward. Opt-in extras (defaults fp32, as the contract says):
    ``d_weight_dtype`` / ``d_hidden_dtype`` let cuBLAS write the gradients in e.g. the
    inputs' dtype, saving an fp32 copy of each and its cast.

    Memory (autotune_configs.BACKWARD_EXTRA_BUDGET_BYTES): tokens go in blocks of
    ``block_tokens``; each block's d_hidden is accumulated over vocab chunks in fp32 and
    rounded once; d_weight is written by the first block and accumulated by the others
    (in d_weight_dtype: one rounding per token block; a single block, N <= block_tokens,
    is exactly one rounding of an fp32-accumulated product). ``chunk_budget`` caps the
    d(logits) chunk's bytes (tests), default what the budget leaves.

    ``sparse_ids`` / ``sparse_grads``: the contract's sparse indicator terms, added to each
    d(logits) chunk by sparse_grad.py before the GEMMs."""
    _check_device(hidden, weight, local_labels)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    if n_tokens == 0 or vocab == 0:
        return (torch.zeros(n_tokens, hidden_size, dtype=torch.float32, device=dev),
                torch.zeros(vocab, hidden_size, dtype=torch.float32, device=dev))
    dw_dtype = d_weight_dtype or torch.float32
    dh_dtype = d_hidden_dtype or torch.float32
    if not hidden.is_cuda or hidden.dtype == torch.float16:
        # CPU (interpreter) path; fp16's scaled buffer (below) is unscaled in fp32
        dw_dtype = dh_dtype = torch.float32
    # Both are written whole: d_hidden block by block, d_weight by the first token block.
    d_hidden = torch.empty(n_tokens, hidden_size, dtype=dh_dtype, device=dev)
    d_weight = torch.empty(vocab, hidden_size, dtype=dw_dtype, device=dev)
    hidden, weight = _rowmajor(hidden), _rowmajor(weight)
    has_entropy = grad_entropy is not None and mean_z is not None
    f32 = lambda t: t.to(torch.float32).contiguous()  # noqa: E731
    lse, g_lp = f32(lse), f32(grad_logprob)
    mean_z = f32(mean_z) if has_entropy else lse
    g_ent = f32(grad_entropy) if has_entropy else lse

    tma = tma_supported(hidden, weight) if use_tma is None else use_tma
    cfg = config or autotune_configs.backward_config(hidden.dtype, tma, interpreting())

    # fp16 only: d(logits) ~ p * g underflows fp16 for typical loss scales (g ~ 1/N), so
    # the buffer holds it times 1 / max|g| and the GEMM results are scaled back.
    unscale = None
    if hidden.dtype == torch.float16:
        unscale = g_lp.abs().amax()
        if has_entropy:
            unscale = unscale + g_ent.abs().amax()
        unscale = unscale.clamp_min(1e-30).reshape(1)
        scale = (1.0 / unscale).contiguous()
    else:
        scale = lse  # unused (HAS_SCALE=False)

    elem = hidden.element_size()
    block_rows = min(n_tokens, block_tokens or autotune_configs.BACKWARD_BLOCK_TOKENS)
    # the fp32 accumulator of one token block's d_hidden, unless d_hidden is fp32 itself
    acc_bytes = 0 if dh_dtype == torch.float32 else block_rows * hidden_size * 4
    budget = chunk_budget or max(autotune_configs.BACKWARD_EXTRA_BUDGET_BYTES - acc_bytes,
                                 autotune_configs.BACKWARD_MIN_CHUNK_BYTES)
    width_max = _vocab_chunk(block_rows, vocab, elem, cfg.block_v, budget)
    row_pitch = triton.cdiv(width_max, 16 // elem) * (16 // elem)  # 16-byte aligned rows
    grad_buf = torch.empty(block_rows, row_pitch, dtype=hidden.dtype, device=dev)
    dh_acc = None if acc_bytes == 0 else torch.empty(block_rows, hidden_size,
                                                     dtype=torch.float32, device=dev)
    labels = local_labels.contiguous()
    inv_t_rows, inv_t = _inv_t_args(inv_temperature)
    sparse = None
    if sparse_ids is not None:  # d(logits) entries: g * inv_t (and the fp16 buffer's scale)
        vals = sparse_grads.float() * (inv_t if inv_t_rows is None else inv_t_rows[:, None])
        if unscale is not None:
            vals = vals * scale
        sparse = (sparse_ids.to(torch.int32).contiguous(), vals.contiguous())
        sparse_k = sparse_ids.shape[1]

    for r0 in range(0, n_tokens, block_rows):
        rows = min(block_rows, n_tokens - r0)
        blk = slice(r0, r0 + rows)
        h_blk, lab_blk = hidden[blk], labels[blk]
        dh = d_hidden[blk] if dh_acc is None else dh_acc[:rows]
        num_m = triton.cdiv(rows, cfg.block_m)
        for v0 in range(0, vocab, width_max):
            width = min(width_max, vocab - v0)
            w_chunk = weight[v0:v0 + width]
            grad = grad_buf[:rows, :width]
            chunk_tma = tma and _tma_aligned(w_chunk) and _tma_aligned(h_blk)
            num_tiles = num_m * triton.cdiv(width, cfg.block_v)
            progs = min(num_tiles, _sms(dev)) if cfg.persistent else num_tiles
            grad_logits_kernel[(progs,)](
                _source(h_blk, [cfg.block_m, cfg.block_k], chunk_tma),
                _source(w_chunk, [cfg.block_v, cfg.block_k], chunk_tma),
                _source(grad, [cfg.block_m, cfg.block_v], chunk_tma),
                lab_blk - v0 if v0 else lab_blk, lse[blk], mean_z[blk], g_lp[blk], g_ent[blk],
                scale, lse if inv_t_rows is None else inv_t_rows[blk],
                rows, width, hidden_size, h_blk.stride(0), w_chunk.stride(0), grad.stride(0),
                inv_t, cfg.group_m, progs,
                BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
                HAS_ENTROPY=has_entropy, HAS_SCALE=unscale is not None, USE_TMA=chunk_tma,
                FLATTEN=cfg.loop == 1, WARP_SPEC=cfg.warp_specialize,
                DOT_PRECISION=_dot_precision(hidden.dtype), UPCAST_DOT=_upcast_dot(hidden.dtype),
                ROW_INV_T=inv_t_rows is not None,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            )
            if sparse is not None:
                add_sparse_grad_kernel[(rows,)](
                    grad, grad.stride(0), sparse[0][blk], sparse[1][blk], sparse_k, v0, width,
                    KP=triton.next_power_of_2(sparse_k))
            _matmul_fp32(grad, w_chunk, dh, accumulate=v0 > 0)
            dw = d_weight[v0:v0 + width]
            if d_weight.dtype == hidden.dtype and hidden.dtype != torch.float32:
                if r0 == 0:
                    torch.mm(grad.T, h_blk, out=dw)
                else:  # cuBLAS: fp32 accumulation, one rounding of (dw + grad.T @ h)
                    dw.addmm_(grad.T, h_blk)
            else:
                _matmul_fp32(grad.T, h_blk, dw, accumulate=r0 > 0)
        if dh_acc is not None:
            d_hidden[blk].copy_(dh)

    if unscale is not None:
        d_hidden.mul_(unscale)
        d_weight.mul_(unscale)
    return d_hidden, d_weight
