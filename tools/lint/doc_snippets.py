#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns the ```cpp blocks of a markdown file into one C++ program, so the docs' code is
compiled and run by the tests (tests/docs/meson.build) and cannot rot.

  doc_snippets.py extract DOC.md [DOC.md...] OUT.cpp OUT.expected.json [--root DIR]
  doc_snippets.py check EXE EXPECTED.json [--minitensor PATH]
                                              run EXE (and the commands), compare outputs
  doc_snippets.py anchors DOC.md|DIR... --root DIR   check the file:line anchors of the docs

The blocks of one file form one program, in order, like a notebook: a later block may
use what an earlier one declared. Each block is split into top-level items and
statements: #include lines, `using namespace`, namespaces, types, templates,
MT_LIBRARY blocks and function declarations or definitions go to file scope; every
other statement goes, in order, into the generated main(), which catches and reports an
escaping exception. #line directives point compile errors at the markdown file.

Markers (an HTML comment on the line just before a block):
  <!-- snippet: skip (why) -->   the next ```cpp block is not compiled (say why)
  <!-- snippet: output -->       the next ```text block is what the preceding ```cpp
                                 block (or command) prints to stdout; `...` alone on a
                                 line matches any lines, and inside a line matches any text.
  <!-- snippet: command -->      the next ```sh block is a shell command that `check`
                                 runs with the `minitensor` command on PATH (in a scratch
                                 directory, with its own kernel cache), its output compared
                                 like a block's (`check ... --minitensor PATH`).

Anchors: prose (outside ``` blocks) that points at a line of the source is written
  [runtime/tensor.h:20](../runtime/tensor.h#L20) (`DispatchKey`)
that is a link whose text is PATH:LINE and whose target is that file and line (relative
to the markdown file), followed by the symbol that line holds, in backticks and
parentheses. `anchors` checks that the file exists and that the line contains the symbol
(its last `::` part, as a whole word), so an anchor cannot rot silently; a bare
`dir/file.ext:LINE` in prose, outside that form, is an error too, and so is a link to a
section (`page.md#title`) that the page does not have.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*snippet:\s*(\w[\w-]*)\b.*-->\s*$")
# `Type name(` with no '=' before the '(': a function declaration or definition.
FUNCTION = re.compile(r"^(?:(?:static|inline|constexpr|extern)\s+)*[\w:<>,\s\*&]+?[\s\*&]+[\w:~]+\s*\(")
TOP_LEVEL_START = re.compile(
    r"^(#|using\s+namespace\b|namespace\b|struct\b|class\b|enum\b|template\b|MT_LIBRARY|typedef\b|"
    r"using\s+\w+\s*=)")
STATEMENT_START = re.compile(r"^(return|auto|if|for|while|do|switch|try|throw|else|case|goto)\b")
OUTPUT_MARK = "@@snippet"


def parse_blocks(text, doc):
    """The doc's fenced blocks: dicts with lang, first line number, lines, and markers."""
    blocks, lines = [], text.splitlines()
    i, pending = 0, None
    while i < len(lines):
        m_mark = MARKER.match(lines[i].strip())
        if m_mark:
            pending = m_mark.group(1)
            i += 1
            continue
        m = FENCE.match(lines[i].strip())
        if not m:
            if lines[i].strip():
                pending = None  # a marker applies to the block right after it
            i += 1
            continue
        lang, start, body = m.group(1).lower(), i + 2, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            sys.exit(f"{doc}:{start - 1}: unterminated ``` block")
        blocks.append({"lang": lang, "line": start, "lines": body, "marker": pending})
        pending = None
        i += 1
    return blocks


def strip_comment(line):
    """The line without a trailing // comment (string literals respected)."""
    out, quote, j = [], None, 0
    while j < len(line):
        c = line[j]
        if quote:
            out.append(c)
            if c == "\\" and j + 1 < len(line):
                out.append(line[j + 1])
                j += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif line.startswith("//", j):
            break
        else:
            out.append(c)
        j += 1
    return "".join(out).rstrip()


def depth_change(code):
    code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
    code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
    return sum(code.count(c) for c in "({[") - sum(code.count(c) for c in ")}]")


def split_items(block):
    """Splits a block into (is_top_level, first_line_number, lines) items; comment lines
    before an item belong to it."""
    items, cur, cur_start, depth, comments = [], [], None, 0, []
    for n, line in enumerate(block["lines"], start=block["line"]):
        code = strip_comment(line).strip()
        if not cur and (not code or code.startswith("/*")):
            if line.strip():
                if not comments:
                    cur_start = n
                comments.append(line)
            continue
        if not cur:
            cur_start = cur_start if comments else n
            cur, comments, first = comments, [], code
        cur.append(line)
        depth += depth_change(code)
        if depth <= 0 and (code.endswith(";") or code.endswith("}") or first.startswith("#")):
            items.append((is_top_level(first), cur_start, cur))
            cur, depth = [], 0
    if cur:
        items.append((is_top_level(first), cur_start, cur))
    return items


def is_top_level(first):
    if TOP_LEVEL_START.match(first):
        return True
    if STATEMENT_START.match(first):
        return False
    head = first.split("(", 1)[0]
    return bool(FUNCTION.match(first)) and "=" not in head and "." not in head and "->" not in head


def generate(docs, root, out_cpp, out_json):
    """One program from the C++ blocks of `docs`, in order (several pages may share one
    program, to save a compile in CI: their blocks then share one main())."""
    top, body, expected, commands = [], [], [], []
    n_cpp, names = 0, []
    for doc in docs:
        text = Path(doc).read_text(encoding="utf-8")
        rel = str(Path(doc).resolve().relative_to(Path(root).resolve())) if root else doc
        names.append(rel)
        n_cpp = generate_doc(parse_blocks(text, rel), rel, n_cpp, top, body, expected, commands)
    rel = " + ".join(names)
    if n_cpp == 0:
        sys.exit(f"{rel}: no ```cpp blocks")
    write_program(rel, n_cpp, top, body, expected, commands, out_cpp, out_json)


def generate_doc(blocks, rel, n_cpp, top, body, expected, commands):
    """Appends one doc's blocks to the program's parts; returns the blocks counted so far."""
    last_cpp, last_cmd = None, None
    for b in blocks:
        if b["lang"] in ("sh", "bash", "console") and b["marker"] == "command":
            commands.append({"line": b["line"], "lines": b["lines"], "expected": None,
                             "doc": rel})
            last_cmd, last_cpp = len(commands) - 1, None
        elif b["marker"] == "output" and last_cmd is not None:
            commands[last_cmd]["expected"] = {"line": b["line"], "lines": b["lines"]}
            last_cmd = None
        elif b["lang"] in ("cpp", "c++"):
            last_cmd = None
            if b["marker"] == "skip":
                continue
            n_cpp += 1
            last_cpp = n_cpp
            body.append(f'  std::printf("{OUTPUT_MARK} {n_cpp} {rel}:{b["line"]}\\n");')
            for kind, start, lines in split_items(b):
                dest = top if kind else body
                dest.append(f'#line {start} "{rel}"')
                dest.extend(("" if kind else "  ") + l if l.strip() else l for l in lines)
        elif b["marker"] == "output":
            if last_cpp is None:
                sys.exit(f"{rel}:{b['line']}: an output block needs a ```cpp block before it")
            expected.append({"block": last_cpp, "line": b["line"], "lines": b["lines"],
                             "doc": rel})
            last_cpp = None
    return n_cpp


def write_program(rel, n_cpp, top, body, expected, commands, out_cpp, out_json):
    out = [f"// Generated from {rel} by tools/lint/doc_snippets.py; edit the markdown, not this file.",
           "#include <cstdio>", "#include <exception>", "#include \"minitensor.h\"", ""]
    out += top
    out += ["", '#line 1 "doc_snippets_main"', "int main() {", "  std::setvbuf(stdout, nullptr, _IONBF, 0);",
            "  try {"]
    out += body
    out += ["  } catch (const std::exception& e) {",
            f'    std::printf("{OUTPUT_MARK} uncaught exception: %s\\n", e.what());',
            "    return 1;", "  }", "  return 0;", "}", ""]
    Path(out_cpp).write_text("\n".join(out), encoding="utf-8")
    Path(out_json).write_text(json.dumps({"doc": rel, "blocks": n_cpp, "expected": expected,
                                          "commands": commands},
                                         indent=1), encoding="utf-8")


def line_matches(pattern, line):
    if pattern == line:
        return True
    if "..." not in pattern:
        return False
    parts = [re.escape(p) for p in pattern.split("...")]
    return re.fullmatch(".*".join(parts), line, flags=re.S) is not None


def lines_match(pattern, got):
    """pattern lines against output lines; a line '...' matches any number of lines."""
    if not pattern:
        return not got
    if pattern[0].strip() == "...":
        return any(lines_match(pattern[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and line_matches(pattern[0].rstrip(), got[0].rstrip()) and \
        lines_match(pattern[1:], got[1:])


def run_commands(spec, minitensor):
    """Runs the doc's command blocks; returns whether all printed what the doc says."""
    import os
    import tempfile
    ok = True
    if spec.get("commands") and not minitensor:
        print(f"[doc_snippets] {spec['doc']}: {len(spec['commands'])} commands not run "
              "(no minitensor command was built)")
        return True
    for c in spec.get("commands", []):
        with tempfile.TemporaryDirectory() as scratch:
            env = dict(os.environ)
            env["PATH"] = str(Path(minitensor).resolve().parent) + os.pathsep + env.get("PATH", "")
            env["MT_KERNEL_CACHE"] = str(Path(scratch) / "kernels")
            for var in ("MT_TRACE", "MT_LOG"):
                env.pop(var, None)
            script = "set -o pipefail\n" + "\n".join(c["lines"])
            p = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        got = p.stdout.splitlines()
        where = f"{c.get('doc', spec['doc'])}:{c['line']}"
        print(f"[doc_snippets] $ {' '.join(c['lines'])}\n" + p.stdout + p.stderr, end="")
        if p.returncode != 0:
            ok = False
            print(f"[doc_snippets] {where}: the command exited with {p.returncode}")
        e = c["expected"]
        if e is not None and not lines_match(e["lines"], got):
            ok = False
            print(f"[doc_snippets] {c.get('doc', spec['doc'])}:{e['line']}: the output block does not match "
                  f"what the command printed.\n--- documented\n" + "\n".join(e["lines"]) +
                  "\n--- printed\n" + "\n".join(got))
    return ok


def check(exe, json_path, minitensor=None):
    spec = json.loads(Path(json_path).read_text(encoding="utf-8"))
    p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    outputs, cur = {}, None
    for line in p.stdout.splitlines():
        if line.startswith(OUTPUT_MARK):
            parts = line.split()
            cur = int(parts[1]) if parts[1].isdigit() else None
            outputs[cur] = []
        elif cur is not None:
            outputs[cur].append(line)
    failed = p.returncode != 0
    if failed:
        print(f"[doc_snippets] {spec['doc']}: the program exited with {p.returncode}")
    ran = len([k for k in outputs if k is not None])
    if not failed and ran != spec["blocks"]:
        print(f"[doc_snippets] {spec['doc']}: {ran} of {spec['blocks']} blocks ran")
        failed = True
    for e in spec["expected"]:
        got = outputs.get(e["block"], [])
        if not lines_match(e["lines"], got):
            failed = True
            print(f"[doc_snippets] {e.get('doc', spec['doc'])}:{e['line']}: the output block does not match "
                  f"what block {e['block']} printed.\n--- documented\n" + "\n".join(e["lines"]) +
                  "\n--- printed\n" + "\n".join(got))
    if not run_commands(spec, minitensor):
        failed = True
    print(f"[doc_snippets] {spec['doc']}: {spec['blocks']} blocks, {len(spec.get('commands', []))} "
          f"commands, {len(spec['expected']) + sum(c['expected'] is not None for c in spec.get('commands', []))}"
          f" documented outputs: {'FAIL' if failed else 'OK'}")
    return 1 if failed else 0


ANCHOR = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<href>[^)#\s]+)#L(?P<line>\d+)\)"
                    r"(?:\s*\(`(?P<sym>[^`]+)`\))?")
BARE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:h|hpp|cpp|cu|cuh|py|sh|md|build|txt)):(\d+)")


SECTION_LINK = re.compile(r"\]\((?P<file>[\w./-]*\.md)?#(?P<frag>[\w-]+)\)")


def heading_slugs(path):
    """GitHub's ids of a markdown file's headings (lowercase, punctuation dropped, spaces
    to '-'), outside ``` blocks."""
    slugs, fenced = set(), False
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def check_anchors(docs, root):
    """Every PATH:LINE anchor of the docs' prose: the file exists and the line holds the
    named symbol. Returns the number of problems (each printed)."""
    problems, count = 0, 0
    root = Path(root).resolve()
    for doc in docs:
        doc = Path(doc).resolve()
        rel = doc.relative_to(root)
        fenced = False
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            where = f"{rel}:{n}"

            def bad(msg):
                nonlocal problems
                problems += 1
                print(f"[doc_snippets] {where}: {msg}")

            for m in ANCHOR.finditer(line):
                count += 1
                target = (doc.parent / m["href"]).resolve()
                path = target.relative_to(root) if target.is_relative_to(root) else target
                want = f"{path}:{m['line']}"
                if m["text"].strip("`") != want:
                    bad(f"the anchor's text '{m['text']}' should be '{want}', as its link says")
                if not m["sym"]:
                    bad(f"the anchor {want} names no symbol: follow it with (`symbol`)")
                    continue
                if not target.is_file():
                    bad(f"the anchor {want}: no such file")
                    continue
                lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
                k = int(m["line"])
                word = re.split(r"::|\.", m["sym"].strip())[-1].rstrip("()")
                if k < 1 or k > len(lines):
                    bad(f"the anchor {want}: the file has {len(lines)} lines")
                elif not re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", lines[k - 1]):
                    hits = [i + 1 for i, l in enumerate(lines)
                            if re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", l)]
                    hint = (f"the nearest line holding `{word}` is {min(hits, key=lambda h: abs(h - k))}"
                            f" (of {len(hits)})" if hits else f"`{word}` is not in the file")
                    bad(f"the anchor {want} names `{m['sym']}`, but that line is "
                        f"'{lines[k - 1].strip()}': {hint}")
            for m in SECTION_LINK.finditer(line):
                target = (doc.parent / m["file"]) if m["file"] else doc
                if not target.is_file():
                    bad(f"the link to {m['file']}#{m['frag']}: no such file")
                elif m["frag"] not in heading_slugs(target):
                    bad(f"the link to {m['file'] or ''}#{m['frag']}: no such section in {target.name}")
            for m in BARE.finditer(ANCHOR.sub("", line)):
                bad(f"'{m.group(0)}' points at a line without the anchor form "
                    f"[{m.group(0)}](../{m.group(1)}#L{m.group(2)}) (`symbol`), so no test checks it")
    print(f"[doc_snippets] anchors: {count} in {len(docs)} files, {problems} problems: "
          f"{'FAIL' if problems else 'OK'}")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "anchors":
        args = argv[2:]
        root = "."
        if "--root" in args:
            i = args.index("--root")
            root = args[i + 1]
            del args[i:i + 2]
        docs = [d for a in args for d in (sorted(Path(a).glob("*.md")) if Path(a).is_dir() else [a])]
        return check_anchors(docs, root)
    if len(argv) >= 5 and argv[1] == "extract":
        args, root = argv[2:], None
        if "--root" in args:
            i = args.index("--root")
            root = args[i + 1]
            del args[i:i + 2]
        generate(args[:-2], root, args[-2], args[-1])
        return 0
    if len(argv) in (4, 6) and argv[1] == "check":
        minitensor = argv[5] if len(argv) == 6 and argv[4] == "--minitensor" else None
        return check(argv[2], argv[3], minitensor)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
