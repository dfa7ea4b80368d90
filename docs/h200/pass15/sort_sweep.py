"""The rescan's counting sort (kernels/tile_sort.py) at block sizes and warps (issue 20).

Pass 15 r1 (small_n.py) timed tile_scatter_kernel at 83-97 us a call whatever N (256 or
1024 tokens, k = 8 or 32): its programs each sort SORT_BLOCK = 4096 keys (tl.sort) and
there are few of them (P / 4096: 1 or 2 at 256 tokens). Here sort_tiles at pair counts P
of the top-k's calls, tile ids as the rescan sees them (``real``: the share of pairs on a
real tile; the rest sorted past the tiles: known maxima's codes and unfilled slots) at
V = 151936 (594 tiles), each (block, warps): ms a call (CUDA events, median of 5 bursts
of 20), outputs checked against torch.sort (stable).

    PYTHONPATH=. python docs/h200/pass15/sort_sweep.py OUT.json       (one GPU)
"""
import json
import statistics
import sys

import torch

from megatron_overlay.ops.kernels.tile_sort import sort_tiles

NUM_T = 594
# (pairs, share on a real tile): 256 x 8 / 32 tokens x k, 1024 x 32, 8192 x 8 (dense),
# 8192 x 32, 9984 x 32 (a row block at 32768 tokens)
CASES = [(2048, 0.10), (8192, 0.03), (32768, 0.03), (65536, 1.0), (262144, 0.03),
         (319488, 0.03)]
CONFIGS = [(b, w) for b in (256, 512, 1024, 2048, 4096) for w in (4, 8)]


def tile_ids(pairs, real, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tiles = torch.randint(0, NUM_T, (pairs,), device="cuda", generator=g)
    past = torch.rand(pairs, device="cuda", generator=g) >= real
    return torch.where(past, NUM_T + 1 + tiles, tiles)  # a known maximum's code


def ms(fn, bursts=5, calls=20):
    times = []
    for _ in range(bursts):
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def main(path):
    rows = []
    for pairs, real in CASES:
        ids = tile_ids(pairs, real)
        ref_t, ref_p = torch.sort(ids.clamp(max=NUM_T), stable=True)
        base = None
        for block, warps in CONFIGS:
            got_t, got_p, runs = sort_tiles(ids, NUM_T, 64, block=block, warps=warps)
            same = torch.equal(got_t.long(), ref_t) and torch.equal(got_p.long(), ref_p)
            if base is None:
                base = runs.clone()
            same = same and torch.equal(runs, base)
            t = ms(lambda: sort_tiles(ids, NUM_T, 64, block=block, warps=warps))
            rows.append({"pairs": pairs, "real": real, "block": block, "warps": warps,
                         "ms": t, "equal": same})
            print(f"P={pairs:6d} real={real:.2f} block={block:4d} warps={warps}: {t * 1e3:7.1f} us"
                  f" equal={same}", flush=True)
    json.dump(rows, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
