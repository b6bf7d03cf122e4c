#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SASS instruction counts of the SiLU vector kernels (kernels/ops/silu/silu.cu), per dtype.

  tools/bench/sass_count.py [--arch sm_90]

Compiles silu.cu with nvcc to a CUBIN for the arch (no GPU needed) and counts, in each
kernel's SASS (cuobjdump -sass), all instructions, the SFU ones (MUFU) and the float32
arithmetic (FFMA, FMUL, FADD). Note [16-bit SiLU] quotes these counts. cuobjdump comes with
the CUDA toolkit; where it is missing, `pip download nvidia-cuda-cuobjdump` has it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

KERNELS = [
    ("silu_fwd_vec<float, 2>", "const float*, float*, long long"),
    ("silu_fwd_vec<mt::BFloat16, 2>", "const mt::BFloat16*, mt::BFloat16*, long long"),
    ("silu_fwd_vec<mt::Half, 2>", "const mt::Half*, mt::Half*, long long"),
    ("silu_bwd_vec<float, 2>", "const float*, const float*, float*, long long"),
    ("silu_bwd_vec<mt::BFloat16, 2>",
     "const mt::BFloat16*, const mt::BFloat16*, mt::BFloat16*, long long"),
]


def tool(name):
    path = shutil.which(name) or f"/usr/local/cuda/bin/{name}"
    if not os.path.exists(path):
        sys.exit(f"sass_count.py: {name} not found on PATH or in /usr/local/cuda/bin")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "inst.cu")
        with open(src, "w") as f:
            f.write('#include "silu.cu"\n')
            for name, params in KERNELS:
                f.write(f"template __global__ void {name}({params});\n")
        cubin = os.path.join(tmp, "inst.cubin")
        subprocess.run([tool("nvcc"), f"-arch={args.arch}", "-cubin", "-O3",
                        "-I", os.path.join(root, "kernels", "ops", "silu"),
                        "-I", os.path.join(root, "kernels", "cuda"), "-o", cubin, src],
                       check=True)
        sass = subprocess.run([tool("cuobjdump"), "-sass", cubin], check=True,
                              capture_output=True, text=True).stdout
    counts, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            counts[cur] = [0, 0, 0]
        elif cur and re.search(r"/\*[0-9a-f]{4}\*/", line):
            counts[cur][0] += 1
            counts[cur][1] += "MUFU" in line
            counts[cur][2] += bool(re.search(r"\b(FFMA|FMUL|FADD)\b", line))
    demangled = subprocess.run(["c++filt"], input="\n".join(counts), capture_output=True,
                               text=True).stdout.splitlines()
    print(f"| kernel ({args.arch}) | instructions | MUFU | FFMA/FMUL/FADD |")
    print("|---|---|---|---|")
    for (mangled, c), name in zip(counts.items(), demangled):
        print(f"| {name.split('(')[0]} | {c[0]} | {c[1]} | {c[2]} |")


if __name__ == "__main__":
    main()
