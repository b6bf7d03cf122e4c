#!/usr/bin/env python3
"""Installs the built minitensor into a temporary DESTDIR, builds examples/embed against
it through pkg-config, runs the app and checks what it prints.

  embed_test.py --builddir B --source examples/embed --workdir W [--sanitize address,undefined]

The app is configured with the same compiler and sanitizers as the library (an ASan
library needs an ASan executable), with --wrap-mode=nofallback so that it cannot fall
back to building minitensor as a subproject. Exit 77 (skipped) without pkg-config."""
import argparse
import glob
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
    a = ap.parse_args()

    if shutil.which("pkg-config") is None and shutil.which("pkgconf") is None:
        print("[embed] skipped: no pkg-config")
        return 77

    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    destdir = os.path.join(work, "destdir")
    appbuild = os.path.join(work, "app")
    os.makedirs(work)

    # 1. meson install of the existing build, into the DESTDIR only.
    run([a.meson, "install", "-C", a.builddir, "--no-rebuild", "--quiet", "--destdir", destdir],
        what="install")
    pcs = glob.glob(os.path.join(destdir, "**", "pkgconfig", "minitensor.pc"), recursive=True)
    if len(pcs) != 1:
        sys.exit(f"[embed] FAILED: expected one minitensor.pc under {destdir}, found {pcs}")
    pcdir = os.path.dirname(pcs[0])
    libdir = os.path.dirname(pcdir)
    if not glob.glob(os.path.join(libdir, "libminitensor.so*")):
        sys.exit(f"[embed] FAILED: no libminitensor.so beside {pcs[0]}")
    if not glob.glob(os.path.join(destdir, "**", "include", "minitensor", "minitensor.h"),
                     recursive=True):
        sys.exit("[embed] FAILED: minitensor.h was not installed under include/minitensor")

    # 2. configure and build the app against it, through pkg-config.
    env = dict(os.environ)
    for k in ("MT_TRACE", "MT_LOG"):  # the contract under test is the default: silent
        env.pop(k, None)
    env["PKG_CONFIG_PATH"] = pcdir + (os.pathsep + env["PKG_CONFIG_PATH"]
                                      if env.get("PKG_CONFIG_PATH") else "")
    env["PKG_CONFIG_SYSROOT_DIR"] = destdir
    if a.cxx:
        env["CXX"] = a.cxx
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

    # The compile lines must read minitensor's headers from the DESTDIR, not the source tree.
    cmds = open(os.path.join(appbuild, "compile_commands.json")).read()
    if os.path.join(destdir, "") not in cmds:
        sys.exit("[embed] FAILED: the app was not compiled against the installed headers")

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
        if destdir not in line:
            print("[embed] FAILED: the app does not load the installed libminitensor")
            ok = False
    if not ok:
        return 1
    print("[embed] " + p.stdout.strip())
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
