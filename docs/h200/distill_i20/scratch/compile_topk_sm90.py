"""Compile the top-k kernel for sm_90a on the CPU machine; print regs/spills and the
convert_layout / barrier counts."""
import re, sys
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import importlib
modname = sys.argv[1] if len(sys.argv) > 1 else "megatron_overlay.ops.kernels.topk_forward"
mod = importlib.import_module(modname)
kern = mod.topk_stats_kernel
KP = int(sys.argv[2]) if len(sys.argv) > 2 else 8
extra = dict(a.split("=") for a in sys.argv[3:])
sig = {}
const = {}
for name in kern.arg_names:
    pass
TMA = "USE_TMA=True" in " ".join(sys.argv)
import os
BV=int(os.environ.get("BV","256")); NW=int(os.environ.get("NW","8")); NS=int(os.environ.get("NS","3")); MAXR=int(os.environ.get("MAXR","0"))
hd = "tensordesc<bf16[128, 64]>" if TMA else "*bf16"
wd = f"tensordesc<bf16[{BV}, 64]>" if TMA else "*bf16"
args = dict(h_src=hd, h_lo_src=hd, w_src=wd, w_lo_src=wd,
            labels_ptr="*i64", part_ptr="*fp32", part_v_ptr="*fp32", part_i_ptr="*i32",
            inv_t_ptr="*fp32", N="i32", V="i32", H="i32", K="i32", stride_h="i32",
            stride_w="i32", inv_t="fp32", num_splits="i32", tiles_per_split="i32", chunk_tiles="i32",
            group_m="i32")
consts = dict(BLOCK_M=128, BLOCK_V=BV, BLOCK_K=64, KP=KP, WITH_ENTROPY=False, USE_TMA=False,
              DOT_PRECISION="ieee", UPCAST_DOT=False, ROW_INV_T=False, OPAQUE_COLUMNS=True,
              LOGITS_DTYPE=None, LO=0)
for k, v in extra.items():
    consts[k] = eval(v)
for name in kern.arg_names:
    if name in args:
        sig[name] = args[name]
    elif name in consts:
        sig[name] = "constexpr"; const[name] = consts[name]
    else:
        sig[name] = "constexpr"; const[name] = extra.get(name)
src = ASTSource(kern, sig, constexprs={(kern.arg_names.index(k),): v for k, v in const.items()})
c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=NW, num_stages=NS, **({'maxnreg': MAXR} if MAXR else {})))
ttgir = c.asm["ttgir"]
print("shared", c.metadata.shared)
print("convert_layout", ttgir.count("ttg.convert_layout"), "local_alloc", ttgir.count("local_alloc"))
sass = c.asm.get("sass") or ""
ptx = c.asm["ptx"]
print("ptx bar.sync", ptx.count("bar.sync"), "shfl", ptx.count("shfl.sync"), "ld.shared", ptx.count("ld.shared"), "st.shared", ptx.count("st.shared"))
open(f".scratch/topk_k{KP}.ttgir", "w").write(ttgir)
open(f".scratch/topk_k{KP}.ptx", "w").write(ptx)
import subprocess
P=".venv/core-0.19.2/lib/python3.12/site-packages/triton/backends/nvidia/bin"
print(subprocess.run([P+"/ptxas","-v","--gpu-name","sm_90a",f".scratch/topk_k{KP}.ptx","-o",f".scratch/topk_k{KP}.cubin"],capture_output=True,text=True).stderr.strip().splitlines()[-3:])
subprocess.run(f"{P}/cuobjdump -sass .scratch/topk_k{KP}.cubin > .scratch/topk_k{KP}.sass",shell=True)
