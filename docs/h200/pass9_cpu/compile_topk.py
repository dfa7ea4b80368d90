"""Compile the top-k kernels for sm_90a on CPU (no GPU): registers, spills, SASS size."""
import re, sys, subprocess, os, importlib, tempfile
sys.path.insert(0, sys.argv[1])
pkg = sys.argv[2]
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
P = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")

def comp(kern, args, consts, nw=8, ns=3):
    sig, const = {}, {}
    for name in kern.arg_names:
        if name in args:
            sig[name] = args[name]
        else:
            sig[name] = "constexpr"; const[name] = consts.get(name)
    src = ASTSource(kern, sig, constexprs={(kern.arg_names.index(k),): v for k, v in const.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw, num_stages=ns))
    d = tempfile.mkdtemp()
    open(f"{d}/k.ptx", "w").write(c.asm["ptx"])
    err = subprocess.run([P + "/ptxas", "-v", "--gpu-name", "sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", err).group(1)
    spill = re.search(r"(\d+) bytes spill stores", err).group(1)
    sass = subprocess.run([P + "/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    n = len([l for l in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", l)])
    return f"regs {regs} spill {spill} sass {n}"

tf = importlib.import_module(f"{pkg}.ops.kernels.topk_forward")
tr = importlib.import_module(f"{pkg}.ops.kernels.topk_rescan")
td = "tensordesc<bf16[128, 64]>"; wd = "tensordesc<bf16[256, 64]>"
args = dict(h_src=td, h_lo_src=td, w_src=wd, w_lo_src=wd, labels_ptr="*i64", part_ptr="*fp32",
            top_v_ptr="*fp32", top_i_ptr="*i32", inv_t_ptr="*fp32", N="i32", V="i32", H="i32",
            stride_h="i32", stride_w="i32", inv_t="fp32", num_splits="i32", tiles_per_split="i32",
            chunk_tiles="i32", group_m="i32")
for mode in ("ARGMAX", "SECOND", "plain"):
    for row in (False, True):
        consts = dict(BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, ARGMAX=mode == "ARGMAX", SECOND=mode == "SECOND",
                      WITH_ENTROPY=True, USE_TMA=True, DOT_PRECISION="tf32", UPCAST_DOT=False,
                      ROW_INV_T=row, LOGITS_DTYPE=None, LO=0, HAS_LABELS=False)
        print(f"topk_stats {mode:6s} row_inv_t={row!s:5s}", comp(tf.topk_stats_kernel, args, consts))
rargs = dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src=wd, w_lo_src=wd, runs_ptr="*i32", pairs_ptr="*i32",
             tile_v_ptr="*fp32", tile_i_ptr="*i64", inv_t_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i32",
             V="i32", H="i32", K="i32", stride_h="i32", stride_w="i32", inv_t="fp32")
for k in (8, 32):
    for row in (False, True):
        consts = dict(BLOCK_R=128, BLOCK_V=256, BLOCK_K=64, KP=k, NB=1024, USE_TMA=True, DOT_PRECISION="tf32",
                      UPCAST_DOT=False, ROW_INV_T=row, LOGITS_DTYPE=None, LO=0, OPAQUE_COLUMNS=True)
        print(f"rescan k={k:2d} row_inv_t={row!s:5s}      ", comp(tr.rescan_kernel, rargs, consts, 8, 3))
