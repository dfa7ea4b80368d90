"""Pass 18 (CPU): how many (row, tile) pairs the top-k's rescan recomputes a row, by what
the forward kernel stores beside each tile's maximum, on the benchmarks' logits.

    .venv/core-0.19.2/bin/python docs/cpu/topk_recomputed_tiles.py

A row's k tiles with the largest maxima are chosen (thr: the k-th largest maximum); a chosen
tile is recomputed unless it is known: with pack_second (the second maximum rounded up to
bfloat16 below thr: one z >= thr), with pack_third (the third maximum rounded up below
thr: at most two, both known), none without either. The same rules as
merge_topk._store_codes, in torch, on tools.bench.inputs.distill_inputs' logits (hidden
~N(0, 1), weight ~N(0, 16 / H): logits ~N(0, 16)) over T = 0.7, drawn directly as i.i.d.
normals (the tile statistics depend only on their distribution), V = 151936, 256-column
tiles; and on make_inputs' "zipf" logits (a unigram skew: -T ln(1 + rank) for a random
ranking, plus ~N(0, 0.25 T^2)).
"""
import math

import torch

V, BLOCK = 151936, 256
T = 0.7


def up_bf16(x):
    bits = x.contiguous().view(torch.int32)
    return (torch.where(bits >= 0, bits + 0xFFFF, bits) & -65536).view(torch.float32)


def recomputed(z, k):
    n = z.shape[0]
    tiles = math.ceil(V / BLOCK)
    zt = torch.full((n, tiles * BLOCK), float("-inf"))
    zt[:, :V] = z
    top3 = zt.view(n, tiles, BLOCK).topk(3, dim=2).values  # [n, tiles, 3]
    best = top3[..., 0].topk(k, dim=1)
    thr = best.values[:, -1:]
    chosen = top3.gather(1, best.indices[..., None].expand(n, k, 3))
    second_known = up_bf16(chosen[..., 1]) < thr
    third_known = up_bf16(chosen[..., 2]) < thr
    return {"none": float(k), "pack_second": (~second_known).sum(1).float().mean().item(),
            "pack_third": (~third_known).sum(1).float().mean().item()}


def main():
    g = torch.Generator().manual_seed(0)
    n = 1024
    iid = torch.randn(n, V, generator=g) * 4 / T
    rank = torch.randperm(V, generator=g).float()
    zipf = -torch.log1p(rank)[None, :] + torch.randn(n, V, generator=g) * 0.5
    print(f"recomputed (row, tile) pairs a row, {n} rows, V = {V}, {BLOCK}-column tiles")
    for name, z in (("iid (distill_inputs)", iid), ("zipf (make_inputs)", zipf)):
        for k in (8, 32):
            r = recomputed(z, k)
            print(f"{name:22s} k = {k:2d}: none {r['none']:.0f}, pack_second "
                  f"{r['pack_second']:.3f}, pack_third {r['pack_third']:.4f}")


if __name__ == "__main__":
    main()
