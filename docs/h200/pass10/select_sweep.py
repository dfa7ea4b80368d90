"""Pass 10 probe: select_tiles_kernel's rows a program and warps at the benchmark's shape
(8192 rows, 594 tiles' maxima, k = 32, with the second maxima's codes): kernel time by CUDA
events (median of 5 blocks of 20 launches) and the outputs against the extractions, bit
for bit, ties at the k-th place included.

    python docs/h200/pass10/select_sweep.py

Ran (r4) on ba0b01b's merge_topk.py, whose launcher took SELECT_WARPS as the warps (now the
least of them); r4/machine.txt has its sha1.
"""
import torch

from megatron_overlay.ops.kernels import merge_topk as mt


def main():
    g = torch.Generator(device="cuda").manual_seed(1)
    n, num_t, k = 8192, 594, 32
    maxima = torch.randn(num_t, n, device="cuda", generator=g) * 4
    tied = maxima.bfloat16().float()
    second = maxima - torch.rand(num_t, n, device="cuda", generator=g)
    at = torch.randint(0, 256, (num_t, n), device="cuda", generator=g, dtype=torch.int32)
    packed = (second.view(torch.int32) & -65536) | at
    mt.SELECT_MIN_K = 10 ** 9
    refs = {name: mt.best_tiles(m, k, packed, 256) for name, m in (("distinct", maxima),
                                                                   ("ties", tied))}
    mt.SELECT_MIN_K = 1
    print("rows warps  ms (distinct)  ms (ties)  same")
    for rows, warps in ((1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4), (8, 4), (2, 8), (4, 8),
                        (8, 8), (16, 8)):
        mt.SELECT_ROWS, mt.SELECT_WARPS = rows, warps
        times, same = [], True
        for name, m in (("distinct", maxima), ("ties", tied)):
            got = mt.best_tiles(m, k, packed, 256)
            same &= torch.equal(got[0], refs[name][0]) and torch.equal(got[1], refs[name][1])
            blocks = []
            for _ in range(5):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(20):
                    mt.best_tiles(m, k, packed, 256)
                e.record()
                torch.cuda.synchronize()
                blocks.append(s.elapsed_time(e) / 20)
            times.append(sorted(blocks)[2])
        print(f"{rows:4d} {warps:5d}  {times[0]:12.4f}  {times[1]:9.4f}  {same}", flush=True)


if __name__ == "__main__":
    main()
