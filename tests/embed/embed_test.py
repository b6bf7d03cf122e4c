#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Installs the built minitensor, checks the installed tree, builds examples/embed against
it, runs the app and checks what it prints.

  embed_test.py --builddir B --source examples/embed --workdir W [--sanitize address,undefined]
                [--consumer meson|cmake] [--prefix-install]

Where it installs: into a temporary DESTDIR (the build's prefix, /usr/local say, inside
it), or with --prefix-install for real into the build's own prefix, which must then lie
inside the build directory (tests/embed/meson.build passes it for such a build: CI's
sanitizer build, configured by tools/dev.sh with --prefix=BUILDDIR/prefix).

The installed tree: only the public headers (tools/build/public_headers.py --list), under
include/minitensor/; no OpenBLAS in pkg-config --cflags; bin/minitensor runs without
LD_LIBRARY_PATH (its $ORIGIN rpath); the CMake package files. The consumer: Meson through
pkg-config (PKG_CONFIG_SYSROOT_DIR into a DESTDIR), or CMake through find_package(minitensor)
(CMAKE_PREFIX_PATH at the installed prefix, inside the DESTDIR or not: the package finds
its paths from its own location). Either compiles against the installed headers only.

The app is configured with the same compiler and sanitizers as the library (an ASan
library needs an ASan executable), with --wrap-mode=nofallback so that it cannot fall
back to building minitensor as a subproject. Exit 77 (skipped) without pkg-config."""
import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

EXPECTED = "embed: embed::square_plus_one(x) sums to 17, grad [2, 4, 6]: OK"


def run(cmd, env=None, what=""):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(f"[embed] {what or cmd[0]}: {time.monotonic() - t0:.1f} s: {shlex.join(cmd)}")
    if p.returncode != 0:
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
        sys.exit(f"[embed] FAILED ({what}): exit {p.returncode}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--meson", default="meson")
    ap.add_argument("--cxx", default="")
    ap.add_argument("--sanitize", default="none")
    ap.add_argument("--buildtype", default="debugoptimized")
    ap.add_argument("--werror", default="false")
    ap.add_argument("--consumer", choices=["meson", "cmake"], default="meson")
    ap.add_argument("--srcroot", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--prefix-install", action="store_true")
    a = ap.parse_args()

    if shutil.which("pkg-config") is None and shutil.which("pkgconf") is None:
        print("[embed] skipped: no pkg-config")
        return 77
    if a.consumer == "cmake" and shutil.which("cmake") is None:
        print("[embed] skipped: no cmake (apt install cmake)")
        return 77
    srcroot = os.path.abspath(a.srcroot)

    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    appbuild = os.path.join(work, "app")
    os.makedirs(work)

    # 1. meson install of the existing build: into a DESTDIR, or into the build's own prefix.
    #    `root` is where everything installed must be (and the app's headers come from).
    install = [a.meson, "install", "-C", a.builddir, "--no-rebuild", "--quiet"]
    if a.prefix_install:
        builddir = os.path.realpath(a.builddir)
        options = json.loads(subprocess.run([a.meson, "introspect", "--buildoptions", builddir],
                                            stdout=subprocess.PIPE, text=True, check=True).stdout)
        root = next(o["value"] for o in options if o["name"] == "prefix")
        if not os.path.realpath(root).startswith(os.path.join(builddir, "")):
            sys.exit(f"[embed] FAILED: --prefix-install, but the prefix {root} is not inside "
                     f"the build directory {builddir}")
        shutil.rmtree(root, ignore_errors=True)  # what is there afterwards, this install put
        destdir = None
        run(install, what="install (prefix)")
    else:
        root = destdir = os.path.join(work, "destdir")
        run(install + ["--destdir", destdir], what="install (DESTDIR)")
    print(f"[embed] installed into {'the prefix ' + root if a.prefix_install else 'a DESTDIR'}")
    pcs = glob.glob(os.path.join(root, "**", "pkgconfig", "minitensor.pc"), recursive=True)
    if len(pcs) != 1:
        sys.exit(f"[embed] FAILED: expected one minitensor.pc under {root}, found {pcs}")
    pcdir = os.path.dirname(pcs[0])
    libdir = os.path.dirname(pcdir)
    if not glob.glob(os.path.join(libdir, "libminitensor.so*")):
        sys.exit(f"[embed] FAILED: no libminitensor.so beside {pcs[0]}")
    incs = glob.glob(os.path.join(root, "**", "include"), recursive=True)
    if len(incs) != 1:
        sys.exit(f"[embed] FAILED: expected one include directory under {root}, found {incs}")
    incdir = incs[0]
    prefix = os.path.dirname(incdir)
    # Only the public headers, and only under include/minitensor/.
    installed = sorted(os.path.relpath(os.path.join(d, f), incdir).replace(os.sep, "/")
                       for d, _, fs in os.walk(incdir) for f in fs)
    public = subprocess.run([sys.executable, os.path.join(srcroot, "tools", "build", "public_headers.py"),
                             "--list", srcroot], stdout=subprocess.PIPE, text=True,
                            check=True).stdout.split()
    want = sorted("minitensor/" + h for h in public)
    if installed != want:
        sys.exit(f"[embed] FAILED: installed headers {installed} are not the public ones {want}")
    print(f"[embed] {len(installed)} public headers under include/minitensor/")
    # bin/minitensor finds the library by its rpath: no LD_LIBRARY_PATH.
    exe = os.path.join(prefix, "bin", "minitensor")
    if os.path.exists(exe):
        env0 = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        p = run([exe, "--version"], env=env0, what="installed bin/minitensor")
        if not p.stdout.startswith("minitensor "):
            sys.exit(f"[embed] FAILED: bin/minitensor --version printed {p.stdout!r}")
    # The CMake package.
    cmake_cfg = glob.glob(os.path.join(libdir, "cmake", "minitensor", "minitensorConfig*.cmake"))
    if sorted(os.path.basename(c) for c in cmake_cfg) != ["minitensorConfig.cmake",
                                                            "minitensorConfigVersion.cmake"]:
        sys.exit(f"[embed] FAILED: the CMake package files are {cmake_cfg}")

    # 2. configure and build the app against it, through pkg-config.
    env = dict(os.environ)
    for k in ("MT_TRACE", "MT_LOG"):  # the contract under test is the default: silent
        env.pop(k, None)
    env["PKG_CONFIG_PATH"] = pcdir + (os.pathsep + env["PKG_CONFIG_PATH"]
                                      if env.get("PKG_CONFIG_PATH") else "")
    if destdir:
        env["PKG_CONFIG_SYSROOT_DIR"] = destdir
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    cflags = run([pkg_config, "--cflags", "minitensor"], env=env, what="pkg-config --cflags").stdout
    if "openblas" in cflags or f"-I{incdir}" not in cflags.split():
        sys.exit(f"[embed] FAILED: pkg-config --cflags minitensor is {cflags.strip()!r} (want "
                 f"-I{incdir} and no private dependency's flags)")
    if a.cxx:
        env["CXX"] = a.cxx
    if a.consumer == "meson":
        opts = [f"-Dbuildtype={a.buildtype}", f"-Dwerror={a.werror}", "--wrap-mode=nofallback"]
        if a.sanitize not in ("", "none"):
            opts += [f"-Db_sanitize={a.sanitize}", "-Db_lundef=false"]
        p = run([a.meson, "setup", appbuild, os.path.abspath(a.source)] + opts, env=env,
                what="configure")
        found = [l for l in p.stdout.splitlines() if "dependency minitensor found: YES" in l]
        if not found:
            print(p.stdout)
            sys.exit("[embed] FAILED: meson did not find minitensor through pkg-config")
        print("[embed] " + found[0].strip())
        run([a.meson, "compile", "-C", appbuild], env=env, what="build")
    else:
        flags = "-Werror -Wall -Wextra" if a.werror == "true" else "-Wall -Wextra"
        if a.sanitize not in ("", "none"):
            flags += f" -fsanitize={a.sanitize}"
        cxx = shlex.split(a.cxx) if a.cxx else []
        launcher = [f"-DCMAKE_CXX_COMPILER_LAUNCHER={cxx[0]}"] if len(cxx) > 1 else []
        compiler = [f"-DCMAKE_CXX_COMPILER={cxx[-1]}"] if cxx else []
        p = run(["cmake", "-S", os.path.abspath(a.source), "-B", appbuild, f"-DCMAKE_PREFIX_PATH={prefix}",
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCMAKE_CXX_FLAGS={flags}"] + compiler + launcher,
                env=env, what="cmake configure")
        run(["cmake", "--build", appbuild], env=env, what="cmake build")

    # The compile lines must read minitensor's headers from the installed tree, not the
    # source tree.
    cmds = open(os.path.join(appbuild, "compile_commands.json")).read()
    if os.path.join(root, "") not in cmds:
        sys.exit("[embed] FAILED: the app was not compiled against the installed headers")
    # and no include directory outside it holds minitensor's headers (the source tree).
    for entry in json.loads(cmds):
        words = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        for i, w in enumerate(words):
            d = w[2:] if w.startswith("-I") and len(w) > 2 else \
                words[i + 1] if w in ("-I", "-isystem") and i + 1 < len(words) else None
            if d is None:
                continue
            d = os.path.normpath(os.path.join(entry["directory"], d))
            if d.startswith(os.path.join(root, "")):
                continue
            if any(os.path.exists(os.path.join(d, f)) for f in
                   ("minitensor.h", "runtime/tensor.h", "minitensor/minitensor.h")):
                sys.exit(f"[embed] FAILED: the app's compile line reads minitensor's headers "
                         f"from {d}, not from the installed tree")

    # 3. run it: exactly one line on stdout, nothing on stderr.
    env["LD_LIBRARY_PATH"] = libdir + (os.pathsep + env["LD_LIBRARY_PATH"]
                                       if env.get("LD_LIBRARY_PATH") else "")
    p = run([os.path.join(appbuild, "embed_app")], env=env, what="run")
    ok = True
    if p.stdout != EXPECTED + "\n":
        print(f"[embed] FAILED: stdout was {p.stdout!r}, expected {EXPECTED!r}")
        ok = False
    if p.stderr:
        print(f"[embed] FAILED: the library wrote to stderr: {p.stderr!r}")
        ok = False
    # ldd: the libminitensor the app loads is the installed one.
    if shutil.which("ldd"):
        l = subprocess.run(["ldd", os.path.join(appbuild, "embed_app")], env=env,
                           stdout=subprocess.PIPE, text=True).stdout
        line = next((x for x in l.splitlines() if "libminitensor" in x), "")
        print("[embed] ldd: " + line.strip())
        if root not in line:
            print("[embed] FAILED: the app does not load the installed libminitensor")
            ok = False
    if not ok:
        return 1
    print("[embed] " + p.stdout.strip())
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
