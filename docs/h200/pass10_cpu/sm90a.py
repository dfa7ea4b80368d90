"""compile_sm90a: a Triton kernel compiled for sm_90a without a GPU (Triton's own ptxas and
cuobjdump): its registers, spill stores, SASS instruction count and longest loop body.
Used by compile_merge.py and compile_second.py."""
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")


def compile_sm90a(kernel, args, consts, num_warps, num_stages=1):
    sig = {n: args.get(n, "constexpr") for n in kernel.arg_names}
    src = ASTSource(kernel, sig, constexprs={(kernel.arg_names.index(n),): v
                                             for n, v in consts.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=num_warps, num_stages=num_stages))
    d = tempfile.mkdtemp()
    open(f"{d}/k.ptx", "w").write(c.asm["ptx"])
    err = subprocess.run([f"{BIN}/ptxas", "-v", "--gpu-name", "sm_90a", f"{d}/k.ptx", "-o",
                          f"{d}/k.cubin"], capture_output=True, text=True).stderr
    sass = subprocess.run([f"{BIN}/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True,
                          text=True).stdout
    n = len([ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln)])
    # the longest backward branch: the k-steps loop's body, in instructions (16 bytes each)
    body = max([(int(at, 16) - int(to, 16)) // 16 + 1 for at, to in re.findall(
        r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\d\s+)?BRA\s+(?:`\(\.L_x_\d+\)\s+)?0x([0-9a-f]+)", sass)
        if int(to, 16) < int(at, 16)] or [0])
    return (f"registers {re.search(r'Used (\d+) registers', err).group(1)}, spill stores "
            f"{re.search(r'(\d+) bytes spill stores', err).group(1)} bytes, SASS {n}, "
            f"loop body {body}"), body
