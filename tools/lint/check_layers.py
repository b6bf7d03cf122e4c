#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the layers of the library, lowest first: runtime < dispatcher < autograd < kernels.

Includes: every #include "..." line against DESIGN's "may include" table. A file may
include headers of its own layer and of the layers below it, never of one above (the one
hook that runs the top of the library from below is a declaration, Note [Library
initialization] in runtime/init.h). tools/ and tests/ may include everything; examples/
only the public API (minitensor.h) and their own headers. An op folder, kernels/ops/NAME/
(Note [One folder an op] in kernels/ops/folders.cpp), is the op's alone: no library file
outside it includes one of its files (the library reaches it through kernels/ops/folders.def),
and every folder of kernels/ops/ is listed in folders.def (the build compiles only the listed
ones, so an unlisted folder would be left out without a word).

Links (--link): the same order over the built objects. The library is one static library a
layer, linked whole (Note [One static library a layer] in meson.build): the objects of
BUILDDIR/libmt_LAYER.a.p/*.o are that layer's, whether each holds one source or, in a unity
build, several; runtime/init.cpp has libmt_runtime_init.a.p to itself. Each undefined
symbol of an object (nm --undefined-only) is looked up among the symbols the objects define
(nm --defined-only); one that only objects of layers above the object's own define is a
violation, except the one hook (HOOK). Symbols no object defines (the C++ library, fmt,
the CUDA headers' inline code) are not the check's concern.

Usage: tools/lint/check_layers.py [source root]; --link BUILDDIR; --self-test (the include check
on a made-up tree with upward, sideways and downward includes); --link-self-test (the link
check on objects it compiles with $CXX, default c++: an upward call, the hook from its own
object and from another, a sideways and a downward call, a generated source). Prints each
offending include as file:line: text (the rule it breaks), each offending symbol as
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
# folder -> the folders its files may include from (None: everything).
MAY_INCLUDE = {layer: set(LIBRARY[: i + 1]) for i, layer in enumerate(LIBRARY)}
MAY_INCLUDE.update({"tools": None, "tests": None, "": None, "examples": {"", "examples"}})
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
OP_FOLDER = re.compile(r"^kernels/ops/([^/]+)/")


def layer_of(rel):
    """The layer of a path relative to the root: its first folder ('' for a top-level file)."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else ""


def sources(root):
    for top in sorted(os.listdir(root)):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            if top.endswith(SOURCE_EXTS):
                yield top
            continue
        if top not in MAY_INCLUDE or top.startswith("."):
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
        allowed = MAY_INCLUDE[layer_of(rel)]
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                checked += 1
                target = resolve(root, rel, m.group(1))
                if target is None or allowed is None:
                    continue
                to = layer_of(target)
                if to not in allowed:
                    what = "the public API (minitensor.h)" if layer_of(rel) == "examples" else \
                        ", ".join(sorted(allowed))
                    bad.append(f"{rel}:{n}: {line.strip()}  ({layer_of(rel) or 'top level'}/ may "
                               f"include only {what}; {target} is in {to or 'the top level'}/)")
                    continue
                folder = OP_FOLDER.match(target)
                if folder and not rel.startswith(folder.group(0)):
                    bad.append(f"{rel}:{n}: {line.strip()}  (an op folder's files are its own: "
                               f"only {folder.group(0)} includes {target}; reach the op through "
                               "the dispatcher, or move the code into the folder)")
    return bad, checked


def self_test():
    files = {
        "runtime/a.h": '#include "kernels/b.h"\n#include "runtime/c.h"\n',
        "runtime/c.h": "",
        "kernels/b.h": '#include "runtime/a.h"\n#include "d.cuh"\n',
        "kernels/d.cuh": "",
        "examples/e.cpp": '#include "minitensor.h"\n#include "runtime/a.h"\n',
        "minitensor.h": '#include "kernels/b.h"\n',
        # an op folder: its own files and the tests include its header, another file not
        "kernels/ops/f/f.h": "",
        "kernels/ops/f/f.cpp": '#include "kernels/ops/f/f.h"\n',
        "kernels/g.cpp": '#include "kernels/ops/f/f.h"\n',
        "tests/t.cpp": '#include "kernels/ops/f/f.h"\n',
        # the list names f and a folder that is gone; folder h is not on it
        "kernels/ops/folders.def": "// MT_OP_FOLDER(NAME) a line\nMT_OP_FOLDER(f)\nMT_OP_FOLDER(gone)\n",
        "kernels/ops/h/h.cpp": "",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        bad, checked = check(root)
    found = sorted(b.split(": ")[0] for b in bad)
    want = ["examples/e.cpp:2", "kernels/g.cpp:1", "kernels/ops/folders.def", "kernels/ops/h/",
            "runtime/a.h:1"]
    if checked != 10 or found != want:
        print(f"check_layers --self-test: flagged {found} of {checked} lines, expected {want} of 10")
        return 1
    print("check_layers --self-test: the upward includes, the one into an op folder from "
          "outside it, an unlisted op folder and a listed one that is gone are flagged, the "
          "others pass")
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


def dir_layer(d):
    """The layer of a library's object directory: libmt_LAYER.a.p (the hook's is runtime)."""
    name = os.path.basename(d)
    if name == HOOK_DIR:
        return "runtime"
    m = re.fullmatch(r"libmt_(\w+)\.a\.p", name)
    return m.group(1) if m and m.group(1) in LIBRARY else None


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
    """(violations, objects, undefined references) of the library objects under build."""
    dirs = sorted(d for d in glob.glob(os.path.join(build, "libmt_*.a.p")) if os.path.isdir(d))
    objects = sorted(o for d in dirs for o in glob.glob(os.path.join(d, "*.o")))
    if not objects:
        return [f"{build}: no library objects (libmt_LAYER.a.p/*.o); build the library "
                "first"], 0, 0
    bad = []
    layer_of_object = {}
    for o in objects:
        layer_of_object[o] = dir_layer(os.path.dirname(o))
        if layer_of_object[o] is None:
            bad.append(f"{short(o)}: not in a layer's library ({', '.join(LIBRARY)}); "
                       "cannot tell its layer")
    rank = {layer: i for i, layer in enumerate(LIBRARY)}
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
    return sorted(bad), len(objects), references


def link_self_test():
    # (library directory, source): each compiled to its own object there; the unity file
    # stands for a unity build's object of several sources of one layer.
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
        # the top layer calls down and defines the upward targets
        ("libmt_kernels.a.p", "b.cpp",
         "namespace mt::detail { void initialize_library() {} }\nint same();\n"
         "int autograd_d();\nint up() { return same() + autograd_d(); }\n"
         "int gen(int x) { return x; }\n"),
        # an object outside the layers' libraries is not read
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
        bad, objects, references = link_check(build)
    want = ["libmt_autograd.a.p/d.cpp.o: mt::detail::initialize_library() (defined in kernels)",
            "libmt_dispatcher.a.p/meson-generated_mt_dispatcher-unity0.cpp.o: gen(int) "
            "(defined in kernels)",
            "libmt_runtime.a.p/a.cpp.o: up() (defined in kernels)"]
    if bad != want or objects != len(sources) - 1:
        print(f"check_layers --link-self-test: flagged {bad} over {objects} objects, expected "
              f"{want} over {len(sources) - 1}")
        return 1
    print(f"check_layers --link-self-test: the upward calls are flagged ({len(want)} of "
          f"{references} references), the hook from runtime/init.cpp's library and the others "
          "pass")
    return 0


def link_main(build):
    bad, objects, references = link_check(build)
    for b in bad:
        print(b)
    if objects == 0:
        return 1
    if bad:
        print(f"check_layers --link: {len(bad)} undefined symbol(s) of an object that only a "
              "layer above it defines (the layers, lowest first: runtime < dispatcher < "
              "autograd < kernels); move the definition down, or reach the op through the "
              "dispatcher (mt::call, a typed handle)")
        return 1
    print(f"check_layers --link: {objects} objects, {references} undefined symbols, none "
          f"defined only in a layer above its object but the hook ({HOOK})")
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
        print(f"check_layers: {len(bad)} problem(s): includes of a layer above the includer (the "
              "layers, lowest first: runtime < dispatcher < autograd < kernels) or of an op "
              "folder from outside it (move the code down or into the folder, or reach the op "
              "through the dispatcher: mt::call, a typed handle), or op folders and "
              "kernels/ops/folders.def that disagree")
        return 1
    print(f"check_layers: {checked} #include lines, none reaches a layer above its file or an op "
          "folder from outside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
