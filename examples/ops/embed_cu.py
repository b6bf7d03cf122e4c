#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns a .cu file into a header holding its text, so the op's C++ can hand it to
mt::jit::kernel while the kernel stays an ordinary .cu file (editable, and includable as
host C++ by a CPU emulation test).

usage: embed_cu.py IN.cu OUT.h VARIABLE
"""
import sys


def main():
    src, out, var = sys.argv[1:4]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    delim = "cu"
    while f"){delim}\"" in text:
        delim += "_"
    with open(out, "w", encoding="utf-8") as f:
        f.write(f"// Generated from {src.split('/')[-1]} by examples/ops/embed_cu.py.\n")
        f.write("#pragma once\n")
        f.write(f"inline constexpr const char {var}[] = R\"{delim}({text}){delim}\";\n")


if __name__ == "__main__":
    main()
