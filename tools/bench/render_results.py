#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The project's measured figures as data: one JSON file a run under docs/results/, and
docs/performance.md generated from them (the reference docs state behaviour; the figures
live here).

  render_results.py [--results DIR] [--out FILE]     write docs/performance.md
  render_results.py --check [--results DIR] [--out FILE]
                         exit 1 if a result file lacks a required field, or if the page
                         differs from what this script would write (then say how to fix it)
  render_results.py --self-test
                         plants bad result files in a temporary folder and checks that
                         --check refuses each one (and accepts a good one)
  render_results.py record --area AREA --title TITLE [--out FILE] [--card CARD]
                           [--from JSON --command CMD | -- CMD ARGS...]
                         runs a bench's --json command (or takes a JSON file it wrote,
                         with the command that wrote it) and writes a new result file:
                         the machine, the commit, the date, the command and the figures

A result file (every key required unless marked optional):
  title, area         the table's title; the page's section (one of AREAS, or a new one)
  date                YYYY-MM-DD, or "unknown" where the run's date was not recorded
  commit              the commit measured (hex), or "unknown"
  machine             {card, cpu, cores, cuda, driver, torch}: "unknown" where not known,
                      card "none" for a CPU-only run; optional: triton, note
  command             the command that produced the figures (run from the repository root)
  figures             [{what, unit, value, baselines?, ratios?, other?}, ...]: value a
                      number or a text; baselines {name: value} measured beside it in the
                      same run; ratios {name: number} (printed as 1.23x; a range as the text
                      "1.16x to 1.19x", "3.05x and 4.92x"); other {name: value}
  optional: value_label (the value column's name, "minitensor" by default), statistic (how a value was reduced: "median of 10 rounds"), notes (one
  paragraph), plots (paths under docs/, such as "img/allocator.svg"), source (the doc the
  figures were transcribed from), supersedes.
The newest file of a (area, title) pair is the current table; older ones are listed under
it. Numbers keep the digits written in the file (0.0500 stays 0.0500).
"""
import argparse
import datetime
import decimal
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
OUT = ROOT / "docs" / "performance.md"
COMMAND = "python3 tools/bench/render_results.py"

# The page's sections, in order; a result file's area outside this list goes after them.
AREAS = [
    "GPU checks",
    "GPU SiLU",
    "GPU user kernels",
    "GPU host cost",
    "MLP step",
    "Compile",
    "CUDA graphs",
    "Host cost against libtorch",
    "Host instructions",
    "CPU",
    "Scenarios",
    "Memory",
    "Build and tests",
]
REQUIRED = ["title", "area", "date", "commit", "machine", "command", "figures"]
MACHINE = ["card", "cpu", "cores", "cuda", "driver", "torch"]
OPTIONAL = ["value_label", "statistic", "notes", "plots", "source", "supersedes"]
RATIO_TEXT = re.compile(r"\d[\d.]*x(( to | and )\d[\d.]*x)?( \(.*\))?")
ROW_KEYS = {"what", "unit", "value", "baselines", "ratios", "other"}


class Bad(Exception):
    pass


def load(path):
    """A result file, its numbers as Decimal so that their digits survive."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"), parse_float=decimal.Decimal)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Bad(f"{path}: not JSON: {e}")


def is_value(v):
    return isinstance(v, (int, decimal.Decimal, str)) and not isinstance(v, bool)


def validate(path, d, docs_dir):
    """The problems of one result file, as messages naming the file and the field."""
    p, errs = Path(path).name, []
    if not isinstance(d, dict):
        return [f"{p}: the file must hold one JSON object"]
    for k in REQUIRED:
        if k not in d:
            errs.append(f"{p}: missing required field '{k}' (write \"unknown\" where it was not recorded)")
    for k in d:
        if k not in REQUIRED and k not in OPTIONAL:
            errs.append(f"{p}: unknown field '{k}' (fields: {', '.join(REQUIRED + OPTIONAL)})")
    for k in ("title", "area", "command", "value_label"):
        if k in d and (not isinstance(d[k], str) or not d[k].strip()):
            errs.append(f"{p}: '{k}' must be a non-empty text")
    date = d.get("date")
    if "date" in d:
        if not isinstance(date, str) or not (date == "unknown" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)):
            errs.append(f"{p}: 'date' must be YYYY-MM-DD or \"unknown\", not {date!r}")
        elif date != "unknown" and not p.startswith(date):
            errs.append(f"{p}: the file name must start with its date {date}")
    if "commit" in d and not (isinstance(d["commit"], str)
                              and re.fullmatch(r"unknown|[0-9a-f]{7,40}(-dirty)?", d["commit"])):
        errs.append(f"{p}: 'commit' must be a commit hash or \"unknown\", not {d['commit']!r}")
    m = d.get("machine")
    if "machine" in d:
        if not isinstance(m, dict):
            errs.append(f"{p}: 'machine' must be an object with {', '.join(MACHINE)}")
        else:
            for k in MACHINE:
                if k not in m:
                    errs.append(f"{p}: machine lacks '{k}' (\"unknown\" where not known)")
                elif not is_value(m[k]) or m[k] == "":
                    errs.append(f"{p}: machine '{k}' must be a number or a non-empty text")
    figs = d.get("figures")
    if "figures" in d:
        if not isinstance(figs, list) or not figs:
            errs.append(f"{p}: 'figures' must be a non-empty list of rows")
        else:
            for i, r in enumerate(figs):
                where = f"{p}: figures[{i}]"
                if not isinstance(r, dict):
                    errs.append(f"{where} must be an object")
                    continue
                for k in ("what", "unit", "value"):
                    if k not in r:
                        errs.append(f"{where} lacks '{k}'")
                for k in r:
                    if k not in ROW_KEYS:
                        errs.append(f"{where}: unknown key '{k}' (keys: {', '.join(sorted(ROW_KEYS))})")
                if "what" in r and (not isinstance(r["what"], str) or not r["what"]):
                    errs.append(f"{where}: 'what' must be a non-empty text")
                if "unit" in r and not isinstance(r["unit"], str):
                    errs.append(f"{where}: 'unit' must be a text (\"\" for none)")
                if "value" in r and not is_value(r["value"]):
                    errs.append(f"{where}: 'value' must be a number or a text")
                for k in ("baselines", "ratios", "other"):
                    if k in r:
                        if not isinstance(r[k], dict) or not all(is_value(v) for v in r[k].values()):
                            errs.append(f"{where}: '{k}' must map names to numbers or texts")
                        elif k == "ratios" and not all(
                                isinstance(v, (int, decimal.Decimal)) or RATIO_TEXT.fullmatch(v)
                                for v in r[k].values()):
                            errs.append(f"{where}: a ratio must be a number, or a text of ratios "
                                        "written as 1.23x (\"1.16x to 1.19x\")")
    for plot in d.get("plots", []) if isinstance(d.get("plots", []), list) else [None]:
        if not isinstance(plot, str) or not (docs_dir / plot).is_file():
            errs.append(f"{p}: plot {plot!r} is not a file under docs/")
    return errs


def fmt(v, ratio=False):
    if isinstance(v, decimal.Decimal) or isinstance(v, int):
        s = str(v)
        return s + "x" if ratio else s
    return str(v).replace("|", "\\|")


def slug(title):
    """GitHub's id of a heading (as tools/doc_snippets.py computes it)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def machine_line(m):
    parts = [f"card {m['card']}" if m["card"] not in ("none",) else "no GPU",
             f"CPU {m['cpu']}", f"{m['cores']} cores"]
    for k, label in (("cuda", "CUDA"), ("driver", "driver"), ("torch", "torch"), ("triton", "Triton")):
        if k in m and m[k] != "unknown":
            parts.append(f"{label} {m[k]}")
    if m.get("note"):
        parts.append(str(m["note"]))
    return "; ".join(parts)


def table(figs, label="minitensor"):
    cols = {"baselines": [], "ratios": [], "other": []}
    for r in figs:
        for k in cols:
            for name in r.get(k, {}):
                if name not in cols[k]:
                    cols[k].append(name)
    units = {r["unit"] for r in figs}
    one_unit = len(units) == 1
    head = ["what", f"{label} ({figs[0]['unit']})" if one_unit and figs[0]["unit"] else label]
    if not one_unit:
        head.append("unit")
    head += cols["baselines"] + cols["ratios"] + cols["other"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in figs:
        cells = [fmt(r["what"]), fmt(r["value"])]
        if not one_unit:
            cells.append(r["unit"])
        cells += [fmt(r.get("baselines", {}).get(c, "")) for c in cols["baselines"]]
        cells += [fmt(r["ratios"][c], ratio=not isinstance(r["ratios"][c], str)) if c in r.get("ratios", {}) else ""
                  for c in cols["ratios"]]
        cells += [fmt(r.get("other", {}).get(c, "")) for c in cols["other"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(results):
    """The page for a list of (name, data) pairs."""
    by_area = {}
    for name, d in results:
        by_area.setdefault(d["area"], {}).setdefault(d["title"], []).append((name, d))
    areas = [a for a in AREAS if a in by_area] + sorted(a for a in by_area if a not in AREAS)
    out = [
        "<!-- Generated by `" + COMMAND + "` from docs/results/*.json: do not edit. -->",
        "# Performance: the measured figures",
        "",
        "Generated by `" + COMMAND + "` from the result files in",
        "[docs/results/](results/) (one JSON file a run: the machine, the commit, the date, the",
        "command and the figures); `" + COMMAND + " --check` (a test of the `extra` suite)",
        "fails when this page and the files disagree. To add figures, run a bench with",
        "`record` (`" + COMMAND + " record --help`) and regenerate; do not edit this page.",
        "",
        "Each table is the newest run of its kind; a ratio is the baseline's time over",
        "minitensor's unless its column says otherwise (above 1.00x minitensor is faster).",
        "\"unknown\" marks what the run's notes did not record.",
        "",
    ]
    out += [f"- [{a}](#{slug(a)})" for a in areas] + [""]
    for a in areas:
        out += [f"## {a}", ""]
        titles = by_area[a]

        def newest(title):  # the area's tables: newest run first, then by title
            date = max(d["date"] for _, d in titles[title] if d["date"] != "unknown") \
                if any(d["date"] != "unknown" for _, d in titles[title]) else "0"
            return (-int(date.replace("-", "")), title)
        for title in sorted(titles, key=newest):
            runs = sorted(titles[title], key=lambda nd: (nd[1]["date"], nd[0]), reverse=True)
            name, d = runs[0]
            out += [f"### {title}", ""]
            out.append(f"- command: `{d['command']}`")
            out.append(f"- machine: {machine_line(d['machine'])}")
            out.append(f"- commit: {d['commit']}; date: {d['date']}; file: "
                       f"[results/{name}](results/{name})")
            if d.get("statistic"):
                out.append(f"- statistic: {d['statistic']}")
            out.append("")
            out += table(d["figures"], d.get("value_label", "minitensor")) + [""]
            if d.get("notes"):
                out += [d["notes"], ""]
            for plot in d.get("plots", []):
                out += [f"![{Path(plot).stem}]({plot})", ""]
            if len(runs) > 1:
                out.append("Earlier runs: " + ", ".join(
                    f"[{n}](results/{n}) ({o['date']}, {o['commit']})" for n, o in runs[1:]) + ".")
                out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def collect(results_dir):
    """(results, problems) of a folder of result files."""
    results, problems = [], []
    files = sorted(Path(results_dir).glob("*.json"))
    if not files:
        problems.append(f"{results_dir}: no result files (*.json)")
    titles = {}
    for f in files:
        try:
            d = load(f)
        except Bad as e:
            problems.append(str(e))
            continue
        errs = validate(f, d, Path(results_dir).parent)
        problems += errs
        if not errs:
            key = (d["area"], d["title"], d["date"])
            if key in titles:
                problems.append(f"{f.name}: same area, title and date as {titles[key]}: "
                                "give one of them another title, or merge them")
            titles[key] = f.name
            results.append((f.name, d))
    return results, problems


def check(results_dir, out):
    results, problems = collect(results_dir)
    for p in problems:
        print(f"[render_results] {p}")
    if problems:
        print(f"[render_results] {len(problems)} problems in {results_dir}: FAIL")
        return 1
    want = render(results)
    have = Path(out).read_text(encoding="utf-8") if Path(out).is_file() else None
    if have != want:
        why = "does not exist" if have is None else "differs from the result files"
        print(f"[render_results] {out} {why}: run `{COMMAND}` and commit the page")
        if have is not None:
            import difflib
            diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(),
                                             "committed", "generated", lineterm="", n=1))
            print("\n".join(diff[:40]))
        return 1
    print(f"[render_results] {len(results)} result files, {out}: OK")
    return 0


def write(results_dir, out):
    results, problems = collect(results_dir)
    if problems:
        for p in problems:
            print(f"[render_results] {p}")
        return 1
    Path(out).write_text(render(results), encoding="utf-8")
    print(f"[render_results] wrote {out} from {len(results)} result files")
    return 0


# ---- record: a bench's --json output as a new result file ----

def run_text(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def this_machine(card=None):
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    m = {"card": "none", "cpu": cpu, "cores": os.cpu_count() or "unknown",
         "cuda": "unknown", "driver": "unknown", "torch": "unknown"}
    if shutil.which("nvidia-smi"):
        q = run_text(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        if q:
            name, _, driver = q.splitlines()[0].partition(",")
            m["card"], m["driver"] = name.strip(), driver.strip() or "unknown"
        v = re.search(r"CUDA Version:\s*([\d.]+)", run_text(["nvidia-smi"]))
        if v:
            m["cuda"] = v.group(1)
    t = run_text([sys.executable, "-c", "import torch; print(torch.__version__)"])
    if t:
        m["torch"] = t.splitlines()[-1]
    if card:
        m["card"] = card
    return m


UNITS = {"ms": "ms", "us": "µs", "ns": "ns", "s": "s", "gbps": "GB/s", "gflops": "GFLOP/s",
         "tflops": "TFLOP/s", "bytes": "B", "mib": "MiB", "pct": "%"}


def unit_of(key):
    """The unit a key names as its whole name, first word or last word (`ms`, `copy_us`,
    `gbps`), or None."""
    k = key.lower()
    for suffix, unit in UNITS.items():
        if k == suffix or k.endswith("_" + suffix) or k.startswith(suffix + "_"):
            return unit
    return None


def flatten(x, path=""):
    """Rows of a bench's JSON. In an object, the texts and the whole numbers whose key names
    no unit (threads, n, log2n) label the row; the key with a unit that names minitensor
    (`ms`, `us`, `mt_ms`, `minitensor_us`), or else the first key with a unit, is the value;
    the other keys with a unit of the same kind are baselines beside it; a key holding
    "ratio", "speedup" or "/" is a ratio; the rest goes to `other`. Nested objects and lists
    give rows of their own, named by their path."""
    rows = []
    if isinstance(x, list):
        for i, v in enumerate(x):
            rows += flatten(v, f"{path}[{i}]")
        return rows
    if not isinstance(x, dict):
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            rows.append({"what": path or "value", "unit": "", "value": x})
        return rows
    num = {k: v for k, v in x.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    ratio_keys = [k for k in num if any(w in k.lower() for w in ("ratio", "speedup", "/", "vs_"))]
    measured = [k for k in num if k not in ratio_keys and unit_of(k)]
    labels = [f"{k}={v}" for k, v in x.items() if isinstance(v, str)]
    labels += [f"{k}={v}" for k, v in num.items()
               if k not in ratio_keys and k not in measured and isinstance(v, int)]
    if measured:
        mine = [k for k in measured if k.lower() in ("ms", "us", "ns", "s")
                or k.lower().startswith(("mt_", "minitensor"))]
        main = (mine or measured)[0]
        row = {"what": " ".join([path] + labels).strip() or main, "unit": unit_of(main),
               "value": num[main]}
        same = {k: num[k] for k in measured if k != main and unit_of(k) == unit_of(main)}
        other = {k: num[k] for k in num
                 if k not in same and k != main and k not in ratio_keys
                 and f"{k}={num[k]}" not in labels}
        if same:
            row["baselines"] = same
        if ratio_keys:
            row["ratios"] = {k: num[k] for k in ratio_keys}
        if other:
            row["other"] = other
        rows.append(row)
    elif ratio_keys:
        rows.append({"what": " ".join([path] + labels).strip() or "ratio", "unit": "",
                     "value": "-", "ratios": {k: num[k] for k in ratio_keys}})
    for k, v in x.items():
        if isinstance(v, (dict, list)):
            rows += flatten(v, f"{path}.{k}" if path else k)
    return rows


def record(argv):
    ap = argparse.ArgumentParser(prog="render_results.py record", description=(
        "Run a bench's --json command (or read a JSON file it wrote) and write a result "
        "file with the machine, the commit, the date and the command."))
    ap.add_argument("--area", required=True, help=f"the page's section (e.g. {AREAS[1]!r})")
    ap.add_argument("--title", required=True, help="the table's title")
    ap.add_argument("--card", help="the card's name, when nvidia-smi cannot tell")
    ap.add_argument("--from", dest="src", help="a JSON file the command wrote (with --command)")
    ap.add_argument("--command", help="the command that wrote --from's file")
    ap.add_argument("--statistic", help="how a value was reduced (e.g. 'median of 20')")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--out", help="the result file (default: results/DATE-CARD-TITLE.json)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the bench command, with --json")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if bool(a.src) == bool(cmd) or (a.src and not a.command):
        ap.error("give either -- COMMAND... or --from FILE --command 'COMMAND'")
    if cmd:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            print(f"[render_results] record: the command exited with {p.returncode}")
            return 1
        text, command = p.stdout, shlex.join(cmd)
    else:
        text, command = Path(a.src).read_text(encoding="utf-8"), a.command
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        print(f"[render_results] record: the output is not JSON ({e}); did the command get --json?")
        return 1
    rows = flatten(raw)
    if not rows:
        print("[render_results] record: the JSON holds no numbers to record")
        return 1
    commit = run_text(["git", "rev-parse", "--short=7", "HEAD"]) or "unknown"
    if commit != "unknown" and run_text(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    m = this_machine(a.card)
    d = {"title": a.title, "area": a.area, "date": date, "commit": commit, "machine": m,
         "command": command, "figures": rows}
    if a.statistic:
        d["statistic"] = a.statistic
    card = re.sub(r"[^a-z0-9]+", "-", str(m["card"]).lower()).strip("-") or "none"
    out = Path(a.out or Path(a.results) / f"{date}-{card}-{slug(a.title)[:40].strip('-')}.json")
    if out.exists():
        print(f"[render_results] record: {out} exists; name another with --out")
        return 1
    out.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errs = validate(out, load(out), Path(a.results).parent)
    for e in errs:
        print(f"[render_results] {e}")
    print(f"[render_results] wrote {out} ({len(rows)} rows); now run `{COMMAND}`")
    return 1 if errs else 0


# ---- self-test ----

GOOD = {
    "title": "t", "area": "CPU", "date": "2026-01-02", "commit": "abcdef0",
    "machine": {"card": "none", "cpu": "c", "cores": 2, "cuda": "unknown",
                "driver": "unknown", "torch": "unknown"},
    "command": "minitensor bench silu --json",
    "figures": [{"what": "silu", "unit": "ms", "value": 1.5, "baselines": {"torch": 3.0},
                 "ratios": {"torch/mt": 2.0}}],
}


def self_test():
    """Each planted defect must fail --check with its message; the good file must pass."""
    import copy

    def case(mutate, name="2026-01-02-x.json", raw=None):
        d = copy.deepcopy(GOOD)
        mutate(d)
        text = raw
        with tempfile.TemporaryDirectory() as tmp:
            res = Path(tmp) / "results"
            res.mkdir()
            (res / name).write_text(text if text is not None else json.dumps(d))
            page = Path(tmp) / "performance.md"
            results, problems = collect(res)
            if not problems:
                page.write_text(render(results))
            import contextlib
            import io
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = check(res, page)
            return rc, buf.getvalue()

    failures = 0

    def expect(label, mutate, rc_want, text, name="2026-01-02-x.json", raw=None):
        nonlocal failures
        rc, out = case(mutate, name, raw)
        ok = rc == rc_want and text in out
        failures += not ok
        print(f"[render_results] self-test {label}: {'ok' if ok else 'FAILED: rc ' + str(rc) + ', ' + out}")

    expect("a good file passes", lambda d: None, 0, "1 result files")
    expect("no commit", lambda d: d.pop("commit"), 1, "missing required field 'commit'")
    expect("no command", lambda d: d.pop("command"), 1, "missing required field 'command'")
    expect("no machine cpu", lambda d: d["machine"].pop("cpu"), 1, "machine lacks 'cpu'")
    expect("no figures", lambda d: d.update(figures=[]), 1, "'figures' must be a non-empty list")
    expect("a row without unit", lambda d: d["figures"][0].pop("unit"), 1, "figures[0] lacks 'unit'")
    expect("a ratio without its x", lambda d: d["figures"][0]["ratios"].update({"x": "fast"}), 1,
           "a ratio must be a number")
    expect("a range of ratios passes", lambda d: d["figures"][0]["ratios"].update({"x": "1.1x to 1.2x"}),
           0, "1 result files")
    expect("a bad date", lambda d: d.update(date="Dec 4"), 1, "'date' must be YYYY-MM-DD")
    expect("a name without its date", lambda d: None, 1, "must start with its date",
           name="x.json")
    expect("a missing plot", lambda d: d.update(plots=["img/none.svg"]), 1, "is not a file under docs/")
    expect("not JSON", lambda d: None, 1, "not JSON", raw="{")

    # A page that differs from the files fails too.
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "results"
        res.mkdir()
        (res / "2026-01-02-x.json").write_text(json.dumps(GOOD))
        page = Path(tmp) / "performance.md"
        page.write_text(render(collect(res)[0]).replace("1.5", "1.4"))
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()) as buf:
            rc = check(res, page)
        ok = rc == 1 and "differs from the result files" in buf.getvalue()
        failures += not ok
        print(f"[render_results] self-test an edited page: {'ok' if ok else 'FAILED'}")
    # The digits a file writes are the digits the page shows.
    d = copy.deepcopy(GOOD)
    text = json.dumps(d).replace("1.5", "0.0500")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "2026-01-02-x.json").write_text(text)
        page = render(collect(tmp)[0])
        ok = "| silu | 0.0500 | 3.0 | 2.0x |" in page
        failures += not ok
        print(f"[render_results] self-test digits kept: {'ok' if ok else 'FAILED'}")
    # flatten: a bench's JSON becomes rows, ratios beside their values.
    rows = flatten({"bench": "silu", "rows": [
        {"dtype": "float32", "log2n": 20, "mt_ms": 1.0, "torch_ms": 2.0, "torch/mt": 2.0, "gbps": 9.5}]})
    ok = (rows == [{"what": "rows[0] dtype=float32 log2n=20", "unit": "ms", "value": 1.0,
                    "baselines": {"torch_ms": 2.0}, "ratios": {"torch/mt": 2.0},
                    "other": {"gbps": 9.5}}])
    failures += not ok
    print(f"[render_results] self-test flatten: {'ok' if ok else 'FAILED: ' + repr(rows)}")
    print(f"[render_results] self-test: {'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


def main(argv):
    if argv[:1] == ["record"]:
        return record(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Subcommand: record (render_results.py record --help)")
    ap.add_argument("--check", action="store_true", help="fail if the page or a file is out of date")
    ap.add_argument("--self-test", action="store_true", help="check the checker")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if a.check:
        return check(a.results, a.out)
    return write(a.results, a.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
