#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the layers of the library, lowest first: runtime < dispatcher < autograd < kernels,
and inside kernels/ its sub-layers (SUBLAYERS), lowest first: cuda_device < cpu < jit < cuda_host <
ops < compile < builtins.

Includes: every #include "..." line against DESIGN's "may include" table. A file may
include headers of its own layer and of the layers below it, never of one above (the one
hook that runs the top of the library from below is a declaration, Note [Library
initialization] in runtime/init.h). Inside kernels/ the same holds between sub-layers: a file
of kernels/cpu may include kernels/cpu and the layers below, not kernels/jit. tools/ and
tests/ may include everything; examples/ only the public API (minitensor.h) and their own
headers. An op folder, kernels/ops/NAME/ (Note [One folder an op] in kernels/ops/folders.cpp),
is the op's alone: no library file outside it includes one of its files (the library reaches
it through kernels/ops/folders.def), and every folder of kernels/ops/ is listed in folders.def
(the build compiles only the listed ones, so an unlisted folder would be left out without a
word). A folder of kernels/ that is not a sub-layer, or a top-level file of kernels/ without
one (TOP_LEVEL), is reported too: every file has a rank.

The sub-layers, the order being what the code needs (Note [Sub-layers of kernels] in
kernels/meson.build):
  cuda_device  the CUDA device code (.cu, .cuh; layout.h, shared with the host) and its
            embedding (jit::embedded_source): needs nothing of kernels/;
  cpu       the CPU loops, thread pool and scalar math (math.h, vec_exp), with the
            elementwise table (below): needs nothing else of kernels/ (nor does cuda_device of it:
            the device code goes lowest as text that host code of any sub-layer may read);
  jit       NVRTC, the kernel cache, module loading, the built-in kernels' launch shapes
            (builtin.h), the expression language and its tile evaluator, the autotuner: it
            compiles cuda_device's code (embedded_source, layout.h) and evaluates expressions on
            the CPU with cpu's loops and exp;
  cuda_host  the host code that launches the built-in CUDA kernels (and cuBLAS): kernels from jit (builtin.h,
            get_kernel), the rows of the table;
  ops       the built-in ops and the op folders: the CPU and GPU kernels, the JIT
            (pointwise_op, reduction_op), a folder's .cu including cuda_device's common.cuh;
  compile   mt::compile: captures and calls ops, fuses through the JIT;
  builtins  register_builtins.cpp alone: the library's initialization, which runs every
            sub-layer's registration (ops, compile's opcheck test, cuda_host's device hooks); the
            one hook calls it from the runtime.
The top-level files of kernels/ rank with a sub-layer (TOP_LEVEL), each with the one that
holds what it needs and defines what it declares: elementwise_table.h and elementwise_rows.h
with cpu (the rows' CPU functors are cpu/math.h's functions, which elementwise_rows.h expands,
and the CPU loops of cpu/elementwise.cpp run them; the table includes nothing else), ops.h with
ops (the public declarations of the ops and settings it defines), register_builtins.cpp as
builtins.

Links (--link): the same order over the built objects. The library is one static library a
layer, and kernels/ one a sub-layer, linked whole (Note [One static library a layer] in
meson.build): the objects of BUILDDIR/libmt_LAYER.a.p/*.o (libmt_kernels_SUB.a.p/*.o) are
that layer's (sub-layer's), whether each holds one source or, in a unity build, several;
runtime/init.cpp has libmt_runtime_init.a.p to itself. Each undefined symbol of an object
(nm --undefined-only) is looked up among the symbols the objects define (nm
--defined-only); one that only objects of layers or sub-layers above the object's own define
is a violation, except the one hook (HOOK). Symbols no object defines (the C++ library, fmt,
the CUDA headers' inline code) are not the check's concern. Where BUILDDIR/build.ninja is,
only the libraries it builds are read (a directory of a library the build no longer has,
such as libmt_kernels.a.p of a build from before the sub-layers, is stale and skipped).

Usage: tools/lint/check_layers.py [source root]; --link BUILDDIR; --self-test (the include check
on a made-up tree with upward, sideways and downward includes between layers and sub-layers);
--link-self-test (the link check on objects it compiles with $CXX, default c++: upward calls
between layers and between sub-layers, the hook from its own object and from another, a
sideways and a downward call, a generated source, a stale and an unknown library). Prints
each offending include as file:line: text (the rule it breaks), each offending symbol as
object: symbol (defined in LAYER), and exits 1 if there is one, else prints a count and
exits 0.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

LIBRARY = ["runtime", "dispatcher", "autograd", "kernels"]
# kernels/' sub-layers, lowest first (the docstring says why); each is a folder of kernels/
# but builtins, which is register_builtins.cpp. kernels/meson.build builds them in this order.
SUBLAYERS = ["cuda_device", "cpu", "jit", "cuda_host", "ops", "compile", "builtins"]
NOT_FOLDERS = {"builtins"}
# The top-level files of kernels/ and the sub-layer each ranks with.
TOP_LEVEL = {
    "elementwise_table.h": "cpu",
    "elementwise_rows.h": "cpu",
    "ops.h": "ops",
    "register_builtins.cpp": "builtins",
}
# Every file of the library is of one of these, lowest first: a layer, or for kernels/ a
# sub-layer ("kernels/cpu").
ORDER = LIBRARY[:-1] + [f"kernels/{s}" for s in SUBLAYERS]
RANK = {unit: i for i, unit in enumerate(ORDER)}
# The folders outside the library -> what their files may include (None: everything).
MAY_INCLUDE = {"tools": None, "tests": None, "": None, "examples": {"", "examples"}}
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
OP_FOLDER = re.compile(r"^kernels/ops/([^/]+)/")


def layer_of(rel):
    """The layer of a path relative to the root: its first folder ('' for a top-level file)."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else ""


def unit_of(rel):
    """What a path ranks as: its layer, or in kernels/ its sub-layer ('kernels/cpu'); None for
    a file of kernels/ in no sub-layer."""
    layer = layer_of(rel)
    if layer != "kernels":
        return layer
    parts = rel.split("/")
    if len(parts) == 2:
        sub = TOP_LEVEL.get(parts[1])
    else:
        sub = parts[1] if parts[1] in SUBLAYERS and parts[1] not in NOT_FOLDERS else None
    return f"kernels/{sub}" if sub else None


def unranked(rel):
    """The problem of a file of kernels/ in no sub-layer: its folder's, or its own."""
    parts = rel.split("/")
    if len(parts) == 2:
        return (f"{rel}: a top-level file of kernels/ in no sub-layer; give it the rank of the "
                "sub-layer that holds what it needs in TOP_LEVEL (tools/lint/check_layers.py)")
    return (f"kernels/{parts[1]}/: a folder of kernels/ that is no sub-layer; put its files in "
            "one, or add it to SUBLAYERS (tools/lint/check_layers.py) and its library to "
            "kernels/meson.build")


def ranked_top(rel):
    """Whether rel is a top-level file of kernels/ (it ranks with a sub-layer: TOP_LEVEL)."""
    return rel.startswith("kernels/") and rel.count("/") == 1


def may_include(unit):
    """The layers and sub-layers a file of unit may include, lowest first (None: all)."""
    if unit in RANK:
        return ORDER[: RANK[unit] + 1]
    return MAY_INCLUDE[unit]


def sources(root):
    for top in sorted(os.listdir(root)):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            if top.endswith(SOURCE_EXTS):
                yield top
            continue
        if (top not in MAY_INCLUDE and top not in LIBRARY) or top.startswith("."):
            continue  # build directories, subprojects, docs
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("build", ".")))
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def resolve(root, rel, target):
    """The included file relative to root: from the root (-I.), else next to the includer."""
    if os.path.isfile(os.path.join(root, target)):
        return os.path.normpath(target).replace(os.sep, "/")
    beside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if os.path.isfile(os.path.join(root, beside)):
        return beside.replace(os.sep, "/")
    return None  # not in this tree (a system or toolkit header)


OP_FOLDER_LINE = re.compile(r"^\s*MT_OP_FOLDER\(\s*(\w+)\s*\)")


def op_folder_problems(root):
    """The folders of kernels/ops/ against the list in kernels/ops/folders.def."""
    ops = os.path.join(root, "kernels", "ops")
    if not os.path.isdir(ops):
        return []
    listed = []
    deffile = os.path.join(ops, "folders.def")
    if os.path.isfile(deffile):
        with open(deffile, encoding="utf-8") as f:
            listed = [m.group(1) for m in map(OP_FOLDER_LINE.match, f) if m]
    present = sorted(d for d in os.listdir(ops) if os.path.isdir(os.path.join(ops, d)))
    bad = [f"kernels/ops/{d}/: an op folder that kernels/ops/folders.def does not list, so the "
           f"build leaves it out; add the line MT_OP_FOLDER({d}) there" for d in present
           if d not in listed]
    bad += [f"kernels/ops/folders.def: MT_OP_FOLDER({d}) names no folder kernels/ops/{d}/"
            for d in listed if d not in present]
    return bad


def check(root):
    bad = op_folder_problems(root)
    checked = 0
    for rel in sources(root):
        unit = unit_of(rel)
        if unit is None:
            if unranked(rel) not in bad:
                bad.append(unranked(rel))
            allowed = ()
        else:
            allowed = may_include(unit)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                checked += 1
                target = resolve(root, rel, m.group(1))
                if target is None or allowed is None or unit is None:
                    continue
                to = unit_of(target)
                if to is None:
                    continue  # the target's own problem, reported with it
                if to not in allowed:
                    what = "the public API (minitensor.h)" if unit == "examples" else \
                        ", ".join(allowed)
                    who = f"{rel} ranks with {unit}, which" if ranked_top(rel) else \
                        f"{unit or 'top level'}/"
                    whose = f"ranks with {to}" if ranked_top(target) else \
                        f"is in {to or 'the top level'}/"
                    bad.append(f"{rel}:{n}: {line.strip()}  ({who} may include only {what}; "
                               f"{target} {whose})")
                    continue
                folder = OP_FOLDER.match(target)
                if folder and not rel.startswith(folder.group(0)):
                    bad.append(f"{rel}:{n}: {line.strip()}  (an op folder's files are its own: "
                               f"only {folder.group(0)} includes {target}; reach the op through "
                               "the dispatcher, or move the code into the folder)")
    return bad, checked


def self_test():
    files = {
        "runtime/a.h": '#include "kernels/cpu/b.h"\n#include "runtime/c.h"\n',
        "runtime/c.h": "",
        "kernels/cpu/b.h": '#include "runtime/a.h"\n#include "d.cuh"\n',
        "kernels/cpu/d.cuh": "",
        "examples/e.cpp": '#include "minitensor.h"\n#include "runtime/a.h"\n',
        "minitensor.h": '#include "kernels/cpu/b.h"\n',
        # an op folder: its own files and the tests include its header, another file not
        "kernels/ops/f/f.h": "",
        "kernels/ops/f/f.cpp": '#include "kernels/ops/f/f.h"\n',
        "kernels/ops/g.cpp": '#include "kernels/ops/f/f.h"\n#include "kernels/cpu/b.h"\n',
        "tests/t.cpp": '#include "kernels/ops/f/f.h"\n',
        # the list names f and a folder that is gone; folder h is not on it
        "kernels/ops/folders.def": "// MT_OP_FOLDER(NAME) a line\nMT_OP_FOLDER(f)\nMT_OP_FOLDER(gone)\n",
        "kernels/ops/h/h.cpp": "",
        # sub-layers: the JIT includes an op's header (upward), the CPU loops and the rows
        # (below and beside); the rows, of kernels/cpu, include the CPU math and ops.h (of
        # kernels/ops: upward), the CPU loops the rows; device code the JIT (upward)
        "kernels/jit/j.cpp": '#include "kernels/ops/g.h"\n#include "kernels/cpu/b.h"\n'
                             '#include "kernels/elementwise_rows.h"\n',
        "kernels/ops/g.h": "",
        "kernels/elementwise_rows.h": '#include "kernels/cpu/d.cuh"\n#include "kernels/ops.h"\n',
        "kernels/ops.h": "",
        "kernels/cpu/loops.h": '#include "kernels/elementwise_rows.h"\n',
        "kernels/cuda_device/k.cu": '#include "kernels/jit/j.h"\n',
        "kernels/jit/j.h": "",
        # a top-level file and a folder of kernels/ in no sub-layer
        "kernels/new.h": '#include "runtime/c.h"\n',
        "kernels/backend/x.cpp": '#include "kernels/ops/g.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        bad, checked = check(root)
    found = sorted(b.split(": ")[0] for b in bad)
    want = ["examples/e.cpp:2", "kernels/backend/", "kernels/cuda_device/k.cu:1",
            "kernels/elementwise_rows.h:2", "kernels/jit/j.cpp:1", "kernels/new.h",
            "kernels/ops/folders.def", "kernels/ops/g.cpp:1", "kernels/ops/h/", "runtime/a.h:1"]
    if checked != 20 or found != want:
        print(f"check_layers --self-test: flagged {found} of {checked} lines, expected {want} of 20")
        return 1
    print("check_layers --self-test: the upward includes between layers and between kernels/' "
          "sub-layers, the one into an op folder from outside it, a file and a folder of "
          "kernels/ in no sub-layer, an unlisted op folder and a listed one that is gone are "
          "flagged, the others pass")
    return 0


# ---- the link check --------------------------------------------------------------------

# The one call from a layer into one above it (Note [Library initialization] in
# runtime/init.h): the runtime's ensure_initialized() runs the built-in registration, which
# kernels/register_builtins.cpp defines. The objects of this directory, runtime/init.cpp's
# alone, may call it; nothing else may call upward.
HOOK_DIR = "libmt_runtime_init.a.p"
HOOK = "mt::detail::initialize_library()"
# Symbols an object can satisfy another's reference with: global (uppercase, but not U),
# unique global (u), weak (v, w: inline functions, template instances, vtables), indirect (i).
DEFINED_TYPES = set("ABCDGIRSTVW") | set("uvwi")


# A library's object directory -> its layer or sub-layer: libmt_LAYER.a.p,
# libmt_kernels_SUB.a.p (kernels/meson.build), the hook's (runtime).
LIBRARY_DIRS = {f"libmt_{unit.replace('/', '_')}.a.p": unit for unit in ORDER}
LIBRARY_DIRS[HOOK_DIR] = "runtime"


def dir_layer(d):
    """The layer or sub-layer of a library's object directory (None: not a known one)."""
    return LIBRARY_DIRS.get(os.path.basename(d))


def built_libraries(build):
    """The libraries build.ninja builds (libmt_runtime.a, ...), or None without one."""
    path = os.path.join(build, "build.ninja")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return set(re.findall(r"^build (libmt_\w+\.a):", f.read(), re.M))


def nm(args, objects):
    """(object path, type, symbol) for each line of nm -A ARGS OBJECTS."""
    out = subprocess.run(["nm", "-A", *args, *objects], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"nm {' '.join(args)} failed: {out.stderr.strip()}")
    rows = []
    for line in out.stdout.splitlines():
        path, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) >= 2:
            rows.append((path, parts[-2], parts[-1]))
    return rows


def short(o):
    """An object as the report names it: DIR/OBJECT."""
    return os.path.join(os.path.basename(os.path.dirname(o)), os.path.basename(o))


def demangle(symbols):
    out = subprocess.run(["c++filt"], input="\n".join(symbols), capture_output=True, text=True,
                         check=True)
    return dict(zip(symbols, out.stdout.splitlines()))


def link_check(build):
    """(violations, objects, undefined references, stale directories skipped) of the library
    objects under build."""
    dirs = sorted(d for d in glob.glob(os.path.join(build, "libmt_*.a.p")) if os.path.isdir(d))
    built = built_libraries(build)
    stale = [d for d in dirs if built is not None and os.path.basename(d)[:-2] not in built]
    dirs = [d for d in dirs if d not in stale]
    objects = sorted(o for d in dirs for o in glob.glob(os.path.join(d, "*.o")))
    stale = [os.path.basename(d) for d in stale]
    if not objects:
        return [f"{build}: no library objects (libmt_LAYER.a.p/*.o); build the library "
                "first"], 0, 0, stale
    bad = []
    layer_of_object = {}
    for o in objects:
        layer_of_object[o] = dir_layer(os.path.dirname(o))
        if layer_of_object[o] is None:
            bad.append(f"{short(o)}: not in a library of a layer or sub-layer "
                       f"({', '.join(ORDER)}); cannot tell its rank (a new sub-layer goes into "
                       "SUBLAYERS in tools/lint/check_layers.py)")
    rank = RANK
    defined_in = {}  # symbol -> the lowest layer whose objects define it
    for o, kind, sym in nm(["--defined-only"], objects):
        layer = layer_of_object.get(o)
        if kind in DEFINED_TYPES and layer is not None:
            have = defined_in.get(sym)
            if have is None or rank[layer] < rank[have]:
                defined_in[sym] = layer
    upward = []  # (object, symbol, defining layer)
    references = 0
    for o, kind, sym in nm(["--undefined-only"], objects):
        layer = layer_of_object.get(o)
        if kind not in "Uw" or layer is None:
            continue
        references += 1
        owner = defined_in.get(sym)
        if owner is not None and rank[owner] > rank[layer]:
            upward.append((o, sym, owner))
    names = demangle(sorted({sym for _, sym, _ in upward})) if upward else {}
    for o, sym, owner in upward:
        if not (os.path.basename(os.path.dirname(o)) == HOOK_DIR and names[sym] == HOOK):
            bad.append(f"{short(o)}: {names[sym]} (defined in {owner})")
    return sorted(bad), len(objects), references, stale


def link_self_test():
    # (library directory, source): each compiled to its own object there; the unity files
    # stand for a unity build's objects of several sources of one layer or sub-layer.
    sources = [
        # upward: the runtime calls a kernels function
        ("libmt_runtime.a.p", "a.cpp",
         "int up();\nint same();\nint runtime_a() { return up() + same(); }\n"),
        ("libmt_runtime.a.p", "c.cpp", "int same() { return 1; }\n"),
        # the hook, from its own library (allowed) and from another (refused)
        ("libmt_runtime_init.a.p", "init.cpp",
         "namespace mt::detail { void initialize_library(); "
         "void ensure() { initialize_library(); } }\n"),
        ("libmt_autograd.a.p", "d.cpp",
         "namespace mt::detail { void initialize_library(); }\nint same();\n"
         "int autograd_d() { mt::detail::initialize_library(); return same(); }\n"),
        # a unity object of the dispatcher with one upward call and one downward
        ("libmt_dispatcher.a.p", "meson-generated_mt_dispatcher-unity0.cpp",
         "int gen(int);\nint same();\nint dispatcher_e() { return gen(2) + same(); }\n"),
        # kernels/' sub-layers: the CPU loops call an op (upward) and the device code's
        # embedding (downward); a unity object of the JIT calls the CPU loops (downward); the
        # ops call down into the layers and the sub-layers, and define the upward targets;
        # the initialization, the top, defines the hook and calls the ops
        ("libmt_kernels_cuda_device.a.p", "embedded.cpp", "int embedded() { return 3; }\n"),
        ("libmt_kernels_cpu.a.p", "f.cpp",
         "int op_up();\nint embedded();\nint cpu_f() { return op_up() + embedded(); }\n"),
        ("libmt_kernels_jit.a.p", "meson-generated_mt_kernels_jit-unity0.cpp",
         "int cpu_f();\nint jit_g() { return cpu_f(); }\n"),
        ("libmt_kernels_ops.a.p", "b.cpp",
         "int same();\nint autograd_d();\nint jit_g();\n"
         "int up() { return same() + autograd_d() + jit_g(); }\n"
         "int gen(int x) { return x; }\nint op_up() { return 2; }\n"),
        ("libmt_kernels_builtins.a.p", "i.cpp",
         "int up();\nnamespace mt::detail { void initialize_library() { up(); } }\n"),
        # a library this script does not know, which the build makes: refused
        ("libmt_kernels_backend.a.p", "x.cpp", "int backend_x() { return 4; }\n"),
        # a library the build no longer makes (a stale directory) is not read, nor is an
        # object outside the layers' libraries
        ("libmt_kernels.a.p", "stale.cpp", "int op_up();\nint stale() { return op_up(); }\n"),
        ("libminitensor.so.0.1.0.p", "stale.cpp", "int up();\nint stale() { return up(); }\n"),
    ]
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    with tempfile.TemporaryDirectory() as build:
        for d, name, text in sources:
            objdir = os.path.join(build, d)
            os.makedirs(objdir, exist_ok=True)
            src = os.path.join(build, name)
            with open(src, "w") as f:
                f.write(text)
            subprocess.run([*cxx, "-std=c++17", "-c", src, "-o", os.path.join(objdir, name + ".o")],
                           check=True)
        with open(os.path.join(build, "build.ninja"), "w") as f:
            f.writelines(f"build {d[:-2]}: cpp_STATIC_LINKER {d}/{name}.o\n"
                         for d, name, _ in sources if d.startswith("libmt_") and d != "libmt_kernels.a.p")
        bad, objects, references, stale = link_check(build)
    want = ["libmt_autograd.a.p/d.cpp.o: mt::detail::initialize_library() (defined in "
            "kernels/builtins)",
            "libmt_dispatcher.a.p/meson-generated_mt_dispatcher-unity0.cpp.o: gen(int) "
            "(defined in kernels/ops)",
            "libmt_kernels_backend.a.p/x.cpp.o: not in a library of a layer or sub-layer "
            f"({', '.join(ORDER)}); cannot tell its rank (a new sub-layer goes into SUBLAYERS "
            "in tools/lint/check_layers.py)",
            "libmt_kernels_cpu.a.p/f.cpp.o: op_up() (defined in kernels/ops)",
            "libmt_runtime.a.p/a.cpp.o: up() (defined in kernels/ops)"]
    read = len(sources) - 2
    if bad != want or objects != read or stale != ["libmt_kernels.a.p"]:
        print(f"check_layers --link-self-test: flagged {bad} over {objects} objects, skipped "
              f"{stale}, expected {want} over {read}, skipping libmt_kernels.a.p")
        return 1
    print(f"check_layers --link-self-test: the upward calls between layers and between "
          f"kernels/' sub-layers ({len(want) - 1} of {references} references) and a library of "
          "no layer are flagged, the hook from runtime/init.cpp's library and the others pass, "
          "a stale library's directory is not read")
    return 0


def link_main(build):
    bad, objects, references, stale = link_check(build)
    for b in bad:
        print(b)
    if stale:
        print(f"check_layers --link: skipped {', '.join(stale)}: a library that "
              f"{os.path.join(build, 'build.ninja')} no longer builds (stale objects)")
    if objects == 0:
        return 1
    if bad:
        print(f"check_layers --link: {len(bad)} undefined symbol(s) of an object that only a "
              f"layer or sub-layer above it defines (lowest first: {' < '.join(ORDER)}); move "
              "the definition down, or reach the op through the dispatcher (mt::call, a typed "
              "handle)")
        return 1
    print(f"check_layers --link: {objects} objects, {references} undefined symbols, none "
          f"defined only in a layer or sub-layer above its object but the hook ({HOOK})")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if sys.argv[1:] == ["--link-self-test"]:
        return link_self_test()
    if len(sys.argv) == 3 and sys.argv[1] == "--link":
        return link_main(os.path.abspath(sys.argv[2]))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    bad, checked = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} problem(s): includes of a layer or sub-layer above the "
              f"includer (lowest first: {' < '.join(ORDER)}), files of kernels/ in no sub-layer, "
              "includes of an op "
              "folder from outside it (move the code down or into the folder, or reach the op "
              "through the dispatcher: mt::call, a typed handle), or op folders and "
              "kernels/ops/folders.def that disagree")
        return 1
    print(f"check_layers: {checked} #include lines, none reaches a layer or sub-layer above its "
          "file or an op folder from outside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
