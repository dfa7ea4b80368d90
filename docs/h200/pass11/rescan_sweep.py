"""Pass 11 probe: the top-k rescan's rows a program (RESCAN_ROWS, the segment's MMA rows),
warps and stages at the benchmark's shapes. The rescan's inputs are captured from one
call of the op (distill_inputs, T = 0.7), then rescan_topk (the counting sort, the rescan,
merge_runs) is timed per variant by CUDA events (median of 5 blocks of 10 calls) and its
outputs compared with the default's, bit for bit. Also: the pairs the rescan recomputes
(tile ids below the tile count), the rest being known maxima or unfilled slots.

    python docs/h200/pass11/rescan_sweep.py
"""
import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import topk_forward, topk_rescan as tr
from tools.bench.inputs import distill_inputs

VARIANTS = [(128, 8, 3), (64, 4, 3), (64, 8, 3), (64, 4, 4), (32, 4, 3)]


def timed(fn, calls=10, blocks=5):
    out = []
    for _ in range(blocks):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / calls)
    return sorted(out)[blocks // 2]


def main():
    captured = {}
    orig = topk_forward.rescan_topk

    def capture(*a, **k):
        captured["call"] = (a, k)
        return orig(*a, **k)

    topk_forward.rescan_topk = capture
    default = (tr.RESCAN_ROWS, tr.RESCAN_WARPS, tr.RESCAN_STAGES)
    for n, hdim, v, k in ((8192, 4096, 151936, 8), (8192, 4096, 151936, 32),
                          (16384, 3584, 152064, 32)):
        h, w, _ = distill_inputs(n, hdim, v, 8, 0)
        with torch.no_grad():
            ops.linear_topk_logprobs(h, w, k, temperature=0.7)
        a, kw = captured.pop("call")
        tile_i, cfg = a[3], a[5]
        num_t = -(-v // cfg.block_v)
        recompute = int((tile_i < num_t).sum())
        tiles_hit = int(torch.unique(tile_i[tile_i < num_t]).numel())
        print(f"== {n}x{hdim}x{v} k={k}: {n * k} pairs, {recompute} recomputed "
              f"({recompute / n:.2f} a row) over {tiles_hit} of {num_t} tiles", flush=True)
        tr.RESCAN_ROWS, tr.RESCAN_WARPS, tr.RESCAN_STAGES = default
        ref = orig(*a, **kw)
        print("rows warps stages  ms      same", flush=True)
        for rows, warps, stages in VARIANTS:
            tr.RESCAN_ROWS, tr.RESCAN_WARPS, tr.RESCAN_STAGES = rows, warps, stages
            try:
                got = orig(*a, **kw)
                same = torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
                ms = timed(lambda: orig(*a, **kw))
                print(f"{rows:4d} {warps:5d} {stages:6d}  {ms:.4f}  {same}", flush=True)
            except Exception as err:  # a config that does not compile (shared memory)
                print(f"{rows:4d} {warps:5d} {stages:6d}  failed: {type(err).__name__}: "
                      f"{str(err)[:160]}", flush=True)
        tr.RESCAN_ROWS, tr.RESCAN_WARPS, tr.RESCAN_STAGES = default
        del h, w, a, kw, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
