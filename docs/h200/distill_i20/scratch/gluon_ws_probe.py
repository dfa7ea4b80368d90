"""Can Triton 3.6's Gluon build a warp-specialized Hopper kernel on the CPU machine?
A loader partition (1 warp: TMA loads into a smem ring, mbarriers) and a default
partition (4 warps: warpgroup_mma of a [64, BK] x [BK, BV] step, a row max as the
epilogue), compiled for sm_90a; prints registers and the partitions' SASS markers."""
import subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (tma, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait, fence_async_shared)

BM, BV, BK, STAGES = 64, 256, 64, 3


@gluon.jit
def loader(h_desc, w_desc, bufs, bars, m0, K, BK: gl.constexpr):
    h_bufs, w_bufs = bufs
    ready, empty = bars
    n: gl.constexpr = h_bufs.type.shape[0]
    for i in range(gl.cdiv(K, BK)):
        s = i % n
        phase = i // n & 1
        mbarrier.wait(empty.index(s), phase ^ 1)
        mbarrier.expect(ready.index(s), h_desc.block_type.nbytes + w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(h_desc, [m0, i * BK], ready.index(s), h_bufs.index(s))
        tma.async_copy_global_to_shared(w_desc, [0, i * BK], ready.index(s), w_bufs.index(s))


@gluon.jit
def consumer(bufs, bars, out_ptr, m0, K, BM: gl.constexpr, BV: gl.constexpr, BK: gl.constexpr):
    h_bufs, w_bufs = bufs
    ready, empty = bars
    n: gl.constexpr = h_bufs.type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BV, 16])
    acc = gl.zeros([BM, BV], gl.float32, acc_layout)
    for i in range(gl.cdiv(K, BK)):
        s = i % n
        mbarrier.wait(ready.index(s), i // n & 1)
        acc = warpgroup_mma(h_bufs.index(s), w_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index(s), count=1)
    row_max = gl.max(acc, axis=1)
    rows = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    gl.store(out_ptr + rows, row_max)


@gluon.jit
def probe_kernel(h_desc, w_desc, out_ptr, K, BM: gl.constexpr, BV: gl.constexpr,
                 BK: gl.constexpr, STAGES: gl.constexpr):
    m0 = gl.program_id(0) * BM
    h_bufs = gl.allocate_shared_memory(h_desc.dtype, [STAGES, BM, BK], h_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BV, BK], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    bufs = (h_bufs, w_bufs)
    bars = (ready, empty)
    gl.warp_specialize([
        (consumer, (bufs, bars, out_ptr, m0, K, BM, BV, BK)),
        (loader, (h_desc, w_desc, bufs, bars, m0, K, BK)),
    ], [1], [40])


def main():
    from triton.experimental.gluon._runtime import GluonASTSource
    layout_h = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    layout_w = gl.NVMMASharedLayout.get_default_for([BV, BK], gl.bfloat16)
    sig = {"h_desc": f"tensordesc<bf16[{BM}, {BK}],{layout_h}>",
           "w_desc": f"tensordesc<bf16[{BV}, {BK}],{layout_w}>",
           "out_ptr": "*fp32", "K": "i32", "BM": "constexpr", "BV": "constexpr",
           "BK": "constexpr", "STAGES": "constexpr"}
    consts = {("BM",): BM, ("BV",): BV, ("BK",): BK, ("STAGES",): STAGES}
    names = probe_kernel.arg_names
    src = GluonASTSource(probe_kernel, sig, constexprs={(names.index(k[0]),): v
                                                          for k, v in consts.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    print("triton", triton.__version__, "shared", c.metadata.shared, "regs?", getattr(c, "n_regs", None))
    ptx = c.asm["ptx"]
    print("wgmma", ptx.count("wgmma.mma_async"), "setmaxnreg", ptx.count("setmaxnreg"),
          "mbarrier", ptx.count("mbarrier."), "cp.async.bulk.tensor", ptx.count("cp.async.bulk.tensor"))


if __name__ == "__main__":
    main()


def ptxas_report():
    """ptxas -v (Triton 3.6's bundled ptxas) on the probe's PTX: registers, spills."""
    import os, tempfile
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    layout_h = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    layout_w = gl.NVMMASharedLayout.get_default_for([BV, BK], gl.bfloat16)
    from triton.experimental.gluon._runtime import GluonASTSource as Src
    names = probe_kernel.arg_names
    sig = {"h_desc": f"tensordesc<bf16[{BM}, {BK}],{layout_h}>",
           "w_desc": f"tensordesc<bf16[{BV}, {BK}],{layout_w}>",
           "out_ptr": "*fp32", "K": "i32", "BM": "constexpr", "BV": "constexpr",
           "BK": "constexpr", "STAGES": "constexpr"}
    src = Src(probe_kernel, sig, constexprs={(names.index(k),): v for k, v in
                                             dict(BM=BM, BV=BV, BK=BK, STAGES=STAGES).items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    with tempfile.TemporaryDirectory() as d:
        ptx = os.path.join(d, "k.ptx")
        open(ptx, "w").write(c.asm["ptx"])
        out = subprocess.run([os.path.join(bin_dir, "ptxas"), "-v", "--gpu-name", "sm_90a", ptx,
                              "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True)
        print("\n".join(out.stderr.strip().splitlines()[-3:]))


if __name__ == "__main__" and "--ptxas" in sys.argv:
    ptxas_report()
