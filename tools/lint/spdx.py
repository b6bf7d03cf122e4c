#!/usr/bin/env python3
"""Adds an SPDX license line (MIT, as meson.build and LICENSE say) to the sources.

  tools/lint/spdx.py [--check] [ROOT]

Every tracked C++ and CUDA source (.h .hpp .cpp .cc .cu .cuh) gets
"// SPDX-License-Identifier: MIT" as its first line; Python, shell and Meson files get
"# SPDX-License-Identifier: MIT" (after a #! line). A file that has an SPDX line already is
left alone, so running it twice changes nothing. --check changes nothing and lists the
files without one (exit 1 if there are any). Left out: generated or third-party files
(none are tracked; SKIP lists path prefixes to leave out, empty now).
"""
import os
import subprocess
import sys

LINE = "SPDX-License-Identifier: MIT"
C_STYLE = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
HASH_STYLE = (".py", ".sh")
HASH_NAMES = ("meson.build", "meson_options.txt", "run")
SKIP = ()


def comment_for(path):
    name = os.path.basename(path)
    if path.endswith(C_STYLE):
        return "// " + LINE + "\n"
    if path.endswith(HASH_STYLE) or name in HASH_NAMES:
        return "# " + LINE + "\n"
    return None


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    listed = subprocess.run(["git", "-C", root, "ls-files"], stdout=subprocess.PIPE, text=True)
    if listed.returncode != 0:  # not a git checkout (a release tarball): nothing to list
        print(f"spdx.py: {root} is not a git checkout; skipped")
        return 77  # meson's exit code for a skipped test
    files = listed.stdout.split("\n")
    missing = []
    for rel in files:
        if not rel or rel.startswith(SKIP):
            continue
        line = comment_for(rel)
        path = os.path.join(root, rel)
        if line is None or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if LINE in text:
            continue
        missing.append(rel)
        if check:
            continue
        if text.startswith("#!"):
            first, _, rest = text.partition("\n")
            text = first + "\n" + line + rest
        else:
            text = line + text
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    if check:
        for rel in missing:
            print(f"{rel}: no SPDX line")
        return 1 if missing else 0
    print(f"spdx.py: added the SPDX line to {len(missing)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
