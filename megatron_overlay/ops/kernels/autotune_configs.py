"""Kernel configurations and budgets, in one place.

The defaults were picked by ``tools/bench_fused_logprob.py --sweep`` on one H200 (Triton
3.6, 2026-11-29; docs/BENCHMARKS.md has the numbers). ``CANDIDATES`` lists what that sweep
tries. Nothing here autotunes at run time: a sweep costs minutes of compilation, and a
training step should not pay it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

# The forward writes one [N, 4] fp32 slab of per-token statistics per vocab split; the
# splits are merged on the host. 32 MiB holds 64 splits at N = 32768 and keeps the forward's
# extra memory O(N) (the target: <= 64 MiB at N = 32768).
PARTIAL_STATS_BUDGET_BYTES = 32 << 20

# Batch invariance (ops/batch_invariance.py): the forward's vocab splits are chosen as if
# there were this many tokens, whatever N is; larger N is run in row blocks that keep the
# partial statistics within PARTIAL_STATS_BUDGET_BYTES. Small, so that small calls fill the
# GPU too (rollout-side scoring, small microbatches): on an H200 at V ~ 152k, 66 splits of
# 9 tiles, one full wave at N = 256. Chosen for 16384 tokens (33 splits of 18 tiles) the
# forward at N = 256 ran 66 programs on 132 multiprocessors; with the host-side changes
# beside this it went from 1.78x to 1.04x the GEMM there, and at N = 8192-32768 the
# 66 splits time 0.99-1.00x the 33 (docs/BENCHMARKS.md, "The host side and small N").
INVARIANT_SPLIT_TOKENS = 256

# The backward materializes d(logits) for one block of tokens and one vocab chunk at a
# time, [BACKWARD_BLOCK_TOKENS, V_chunk] in the input dtype, for cuBLAS's two gradient
# GEMMs, next to the block's fp32 d_hidden accumulator [BACKWARD_BLOCK_TOKENS, H]. The two
# together stay within BACKWARD_EXTRA_BUDGET_BYTES (the target: <= 512 MiB of
# extra peak at the benchmark shapes; the rest of the margin is the op's small [N]
# vectors and cuBLAS's workspace). Each extra vocab chunk costs one read+write of the
# block's fp32 d_hidden; each extra token block one read+write of d_weight ([V, H]).
BACKWARD_EXTRA_BUDGET_BYTES = 416 << 20
BACKWARD_BLOCK_TOKENS = 8192
BACKWARD_MIN_CHUNK_BYTES = 64 << 20   # the chunk's floor when H is large
# A 16-bit d_hidden whose token block's d(logits) fits one vocab chunk (N up to ~1400 at
# V ~ 152k): written by one cuBLAS product in its dtype, without the fp32 accumulator and
# its copy (one allocation and one launch fewer at small N); 0: through the accumulator.
BACKWARD_DIRECT_D_HIDDEN = 1

# Mixed operands (one fp32, one 16-bit), backward: the GEMM whose result is the 16-bit
# operand's gradient (d_hidden under an fp32 weight, d_weight under fp32 hidden states)
# takes the fp32 operand's hi half only, as mixed-precision training computes the input
# gradient from the 16-bit copy of an fp32 master weight: the lo half moves that gradient
# by less than its own 16-bit rounding, and dropping it takes one GEMM of the step's seven
# (docs/BENCHMARKS.md, "Precision modes"). 1 adds the lo half back (tools, tests).
MIXED_GRAD16_WITH_LO = 0

# Multiprocessors assumed under TRITON_INTERPRET=1 (there are none): small, so that the
# interpreter tests exercise several vocab splits and their merge.
INTERPRETER_NUM_SMS = 4


@dataclass(frozen=True)
class KernelConfig:
    block_m: int
    block_v: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 16       # token tiles walked before moving along vocab (L2 reuse)
    loop: int = 0           # forward: 0 nested, 1 flatten=True, 2 hand-flattened
    #                         backward: 0 plain loops, 1 flatten=True (persistent grid)
    warp_specialize: bool = False
    persistent: bool = True  # backward only: NUM_SMS programs striding over the tiles
    epilogue_subtile: bool = False  # backward only: the epilogue in two [BM, BV/2] halves

    def name(self) -> str:
        ws = "ws" if self.warp_specialize else "nows"
        return (f"{self.block_m}x{self.block_v}x{self.block_k}-w{self.num_warps}"
                f"-s{self.num_stages}-g{self.group_m}-l{self.loop}-{ws}"
                f"{'' if self.persistent else '-np'}{'-sub' if self.epilogue_subtile else ''}")


# Hopper, 16-bit inputs, TMA loads: a 128 x 256 fp32 accumulator over 2 warpgroups (128
# registers a thread), 3 stages of 48 KiB in shared memory.
# Sweep at N=8192, H=4096, V=151936: 13.40 ms (group_m 8) / 13.98 (16) vs cuBLAS 13.78;
# flatten=True 16.3, hand-flattened 15.3 (it spills), 4 stages 14.4, 128x128 w4 15.1.
FORWARD_16BIT = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8, loop=0)
# Backward: the flattened persistent loop (the next tile's loads overlap this tile's
# epilogue) with the epilogue in two 128 x 128 halves, so that it fits the registers
# (whole, flatten=True spilled 232 bytes at this tile and lost to plain loops). Pass 8
# (docs/BENCHMARKS.md, one H200, the recompute kernel's CUDA time, best of 2 rounds, x the
# forward kernel of the same run): at 8192 / 16384 / 32768 tokens 1.199 / 1.135 / 1.040
# against plain loops' 1.217 / 1.155 / 1.073; the gradients the same bits.
BACKWARD_16BIT = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, loop=1,
                              epilogue_subtile=True)
# fp32 inputs (3xTF32 dots): half the columns, half the K step, same shared memory.
FORWARD_FP32 = KernelConfig(128, 128, 32, num_warps=8, num_stages=3, loop=0)
BACKWARD_FP32 = KernelConfig(128, 128, 32, num_warps=8, num_stages=3, loop=0)
# Mixed operands (an fp32 operand as hi + lo halves, split_operand.py): the split operand
# brings two tiles a K step, so a stage takes one tile more shared memory; the doubled
# operand goes on the 128-row side of a 128 x 256 (256 x 128) tile. Sweeps on one H200 at
# N=8192, H=4096, V=151936 (docs/BENCHMARKS.md), forward / backward x the bf16 GEMM:
# fp32 hidden states 128x256x64 s3 1.92 / -, 128x256x32 s4 1.98 / 5.16 (s2 of the first
# 2.24 / 5.21; 128x128 tiles 2.03-2.15 / 5.18-5.22); an fp32 weight 256x128x64 s3 2.17 / -,
# 128x256x32 s4 2.26 / 5.51, 128x128x64 s3 2.39 / 5.41 (2.43 / 5.72 in a first sweep),
# 128x256x64 s2 2.62 / 5.73; the s3 forms of the backward's 256-row tiles do not fit.
FORWARD_MIXED_HIDDEN = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8, loop=0)
FORWARD_MIXED_WEIGHT = KernelConfig(256, 128, 64, num_warps=8, num_stages=3, group_m=8, loop=0)
BACKWARD_MIXED_HIDDEN = KernelConfig(128, 256, 32, num_warps=8, num_stages=4, loop=0)
BACKWARD_MIXED_WEIGHT = KernelConfig(128, 128, 64, num_warps=8, num_stages=3, loop=0)
# Pre-Hopper GPUs and unaligned tensors: pointer loads (cp.async pipelining).
FORWARD_PORTABLE = KernelConfig(128, 128, 32, num_warps=8, num_stages=3, loop=0)
BACKWARD_PORTABLE = KernelConfig(128, 128, 32, num_warps=8, num_stages=3, loop=0)
# Triton's interpreter: small tiles, so tiny test shapes still span several tiles of
# every kind (partial last tiles in N, V and H).
INTERPRETER = KernelConfig(16, 32, 16, num_warps=4, num_stages=1, group_m=2, loop=0)

FORWARD_CANDIDATES = [
    FORWARD_16BIT,
    replace(FORWARD_16BIT, group_m=16),
    replace(FORWARD_16BIT, warp_specialize=True),
    replace(FORWARD_16BIT, loop=1),
    replace(FORWARD_16BIT, loop=2),
    replace(FORWARD_16BIT, num_stages=4),
    KernelConfig(128, 128, 64, num_warps=4, num_stages=4),
    KernelConfig(128, 128, 64, num_warps=8, num_stages=4, loop=2),
    KernelConfig(256, 128, 64, num_warps=8, num_stages=3),
]
BACKWARD_CANDIDATES = [
    BACKWARD_16BIT,
    replace(BACKWARD_16BIT, epilogue_subtile=False, loop=0),
    replace(BACKWARD_16BIT, epilogue_subtile=False),
    replace(BACKWARD_16BIT, epilogue_subtile=False, warp_specialize=True),
    replace(BACKWARD_16BIT, epilogue_subtile=False, persistent=False, loop=0),
    replace(BACKWARD_16BIT, loop=0),
    KernelConfig(128, 128, 64, num_warps=4, num_stages=4, loop=1),
    KernelConfig(256, 128, 64, num_warps=8, num_stages=3, loop=1),
]
# Mixed operands, forward and backward (tools/bench op --sweep --sweep-operands ...); the
# ones whose stages do not fit shared memory for an operand fail and are reported so.
MIXED_CANDIDATES = [
    KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8),
    KernelConfig(128, 256, 64, num_warps=8, num_stages=2, group_m=8),
    KernelConfig(128, 256, 32, num_warps=8, num_stages=4, group_m=8),
    KernelConfig(128, 128, 64, num_warps=8, num_stages=4, group_m=8),
    KernelConfig(128, 128, 64, num_warps=8, num_stages=3, group_m=8),
    # an fp32 weight: the doubled operand on the smaller side, as fp32 hidden states' is
    KernelConfig(256, 128, 64, num_warps=8, num_stages=3, group_m=8),
    KernelConfig(256, 128, 64, num_warps=8, num_stages=2, group_m=8),
]


# Per stage: (fp32 inputs with TMA, 16-bit inputs with TMA, pointer loads, mixed operands
# with TMA by launch.lo_operand: fp32 hidden states, an fp32 weight).
_DEFAULTS = {"forward": (FORWARD_FP32, FORWARD_16BIT, FORWARD_PORTABLE,
                         {1: FORWARD_MIXED_HIDDEN, 2: FORWARD_MIXED_WEIGHT}),
             "backward": (BACKWARD_FP32, BACKWARD_16BIT, BACKWARD_PORTABLE,
                          {1: BACKWARD_MIXED_HIDDEN, 2: BACKWARD_MIXED_WEIGHT})}


def _default(stage: str, dtype: torch.dtype, use_tma: bool, interpret: bool,
             lo: int) -> KernelConfig:
    if interpret:
        return INTERPRETER
    fp32, bit16, portable, mixed = _DEFAULTS[stage]
    if not use_tma:
        return portable
    if lo:
        return mixed[lo]
    return fp32 if dtype == torch.float32 else bit16


def forward_config(dtype: torch.dtype, use_tma: bool, interpret: bool,
                   lo: int = 0) -> KernelConfig:
    """``dtype``: the tensor cores' (launch.mma_dtype); ``lo``: launch.lo_operand."""
    return _default("forward", dtype, use_tma, interpret, lo)


def backward_config(dtype: torch.dtype, use_tma: bool, interpret: bool,
                    lo: int = 0) -> KernelConfig:
    return _default("backward", dtype, use_tma, interpret, lo)
