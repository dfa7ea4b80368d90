import re, sys, subprocess, os, importlib, tempfile, hashlib
sys.path.insert(0, sys.argv[1]); pkg = sys.argv[2]
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
P = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
lf = importlib.import_module(f"{pkg}.ops.kernels.logprob_forward")
kern = lf.forward_stats_kernel
td = "tensordesc<bf16[128, 64]>"; wd = "tensordesc<bf16[256, 64]>"
args = {}
for name in kern.arg_names:
    pass
print(kern.arg_names)
args = dict(h_src=td, h_lo_src=td, w_src=wd, w_lo_src=wd, labels_ptr="*i64", part_ptr="*fp32",
            inv_t_ptr="*fp32", N="i32", V="i32", H="i32", stride_h="i32", stride_w="i32",
            inv_t="fp32", num_splits="i32", tiles_per_split="i32", group_m="i32")
for row in (False, True):
    for ent in (False, True):
        consts = dict(BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, WITH_ENTROPY=ent, USE_TMA=True, LOOP=0,
                      WARP_SPEC=False, DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=row,
                      LOGITS_DTYPE=None, LO=0, HAS_LABELS=True)
        sig, const = {}, {}
        for name in kern.arg_names:
            if name in args: sig[name] = args[name]
            else: sig[name] = "constexpr"; const[name] = consts.get(name)
        src = ASTSource(kern, sig, constexprs={(kern.arg_names.index(k),): v for k, v in const.items()})
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8, num_stages=3))
        d = tempfile.mkdtemp(); open(f"{d}/k.ptx", "w").write(c.asm["ptx"])
        subprocess.run([P + "/ptxas", "--gpu-name", "sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], check=True)
        sass = subprocess.run([P + "/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True, text=True).stdout
        body = "\n".join(l for l in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", l))
        print(f"row={row} ent={ent} sass sha1 {hashlib.sha1(body.encode()).hexdigest()[:12]} lines {body.count(chr(10))+1}")
