"""sha1 of the sm_90a PTX of the merge kernels (merge_topk, select_tiles, merge_runs),
compiled on the CPU (no GPU; Triton's own backend), debug line info left out: two trees
that print the same hashes run the same code on the GPU.

    python docs/h200/pass12/merge_ptx.py .                      # this tree
    git worktree add /tmp/base 31b190f && python docs/h200/pass12/merge_ptx.py /tmp/base
"""
import hashlib
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from megatron_overlay.ops.kernels import merge_runs, merge_topk  # noqa: E402

PAD = 2 ** 63 - 1


def ptx_hash(kernel, args, consts, num_warps):
    sig = {n: args.get(n, "constexpr") for n in kernel.arg_names}
    src = ASTSource(kernel, sig, constexprs={(kernel.arg_names.index(n),): v
                                             for n, v in consts.items()})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=num_warps)).asm["ptx"]
    code = ptx.split(".section\t.debug")[0]  # the line tables move with the source lines
    text = "\n".join(line.split("//")[0] for line in code.splitlines()
                     if ".loc" not in line and ".file" not in line)
    return hashlib.sha1(text.encode()).hexdigest()[:12], len(text)


print("triton", triton.__version__, "tree", sys.argv[1] if len(sys.argv) > 1 else ".")
i32 = "i32"
for codes in (False, True):
    print("merge_topk   codes", codes, ptx_hash(merge_topk.merge_topk_kernel, dict(
        part_v_ptr="*fp32", part_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N=i32,
        V=i32, W=i32, K=i32, num_splits=i32, stride_s=i32, stride_r=i32, stride_w=i32,
        block_v=i32), dict(BLOCK_R=8, WIDTH=1024, PAD=PAD, SLOT_IDS=codes, CODES=codes,
                           KP=8 if codes else 1), 4))
    print("select_tiles codes", codes, ptx_hash(merge_topk.select_tiles_kernel, dict(
        tile_max_ptr="*fp32", second_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N=i32,
        num_t=i32, K=i32, block_v=i32), dict(BLOCK_R=2, WIDTH=1024, KP=32, PAD=PAD,
                                             CODES=codes), 2))
print("merge_runs              ", ptx_hash(merge_runs.merge_runs_kernel, dict(
    cand_v_ptr="*fp32", cand_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N=i32, V=i32,
    K=i32), dict(BLOCK_R=32, KP=32, PAD=PAD), 4))
