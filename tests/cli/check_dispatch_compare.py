#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/bench/dispatch_compare.py (compare_torch.py --dispatch) against fake benches with known
figures: the rows paired by key, the ratio's direction (libtorch / minitensor), the
interleaved form's ratio taken from the pairs (not recomputed from the medians), the range
over rounds, every round printed, and the JSON it writes.

Usage: check_dispatch_compare.py PATH/TO/tools/bench/dispatch_compare.py"""
import json
import os
import re
import subprocess
import sys
import tempfile

script = sys.argv[1]
failures = []


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures.append(name)
        print("     " + str(detail).replace("\n", "\n     "))


KEYS = ["direct", "dispatch", "autograd_redispatch", "boxed", "silu_grad", "add"]
# Round r of the interleaved fake: minitensor 100 + r ns, libtorch 600 ns, and a pairs'
# ratio of 5 + r / 10 (deliberately not 600 / (100 + r)).
FAKE_LIBTORCH = r'''#!/usr/bin/env python3
import json, sys
keys = %r
if len(sys.argv) == 3 and sys.argv[1] == "--interleaved":
    n = int(sys.argv[2])
    rounds = [{k: {"minitensor": 100.0 + r, "libtorch": 600.0, "ratio": 5 + r / 10} for k in keys}
              for r in range(n)]
    print(json.dumps({"pairs": 21, "loop_ms": 5, "rounds": rounds}))
else:
    d = {k: 600.0 for k in keys}
    d["below_autograd"] = 50.0
    print(json.dumps(d))
''' % (KEYS,)
FAKE_MINITENSOR = r'''#!/usr/bin/env python3
import json, sys
assert sys.argv[1:] == ["bench", "dispatch", "--json"], sys.argv
print(json.dumps({k: 200.0 for k in %r}))
''' % (KEYS,)

with tempfile.TemporaryDirectory() as d:
    lt, mt = os.path.join(d, "bench_libtorch"), os.path.join(d, "minitensor")
    for path, text in ((lt, FAKE_LIBTORCH), (mt, FAKE_MINITENSOR)):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)

    out_json = os.path.join(d, "pairs.json")
    p = subprocess.run([sys.executable, script, "--libtorch-bench", lt, "--interleaved",
                        "--rounds", "3", "--json", out_json], capture_output=True, text=True)
    check("interleaved: exits 0", p.returncode == 0, p.stderr)
    row = re.search(r"^\| mt::add on 1 element \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| "
                    r"([\d.]+)x to ([\d.]+)x \|", p.stdout, re.M)
    check("interleaved: the add row, medians 101.0 and 600.0, ratio 5.10x from the pairs, "
          "range 5.00x to 5.20x",
          row is not None and row.groups() == ("101.0", "600.0", "5.10", "5.00", "5.20"),
          p.stdout)
    check("interleaved: no row that only libtorch has", "below autograd" not in p.stdout,
          p.stdout)
    check("interleaved: every round printed",
          "silu_grad: 100.0, 600.0: 5.00x; 101.0, 600.0: 5.10x; 102.0, 600.0: 5.20x" in p.stdout,
          p.stdout)
    if os.path.exists(out_json):
        j = json.load(open(out_json))
        add = next((r for r in j["rows"] if r["row"] == "add"), None)
        check("interleaved: the JSON names the form and keeps every round's ratio",
              j["form"] == "pairs" and j["pairs"] == 21 and add is not None
              and add["ratio"] == [5.0, 5.1, 5.2] and add["libtorch"] == [600.0] * 3, j)
    else:
        check("interleaved: writes its JSON", False)

    out_json = os.path.join(d, "procs.json")
    p = subprocess.run([sys.executable, script, "--libtorch-bench", lt, "--minitensor", mt,
                        "--rounds", "2", "--json", out_json], capture_output=True, text=True)
    check("processes: exits 0", p.returncode == 0, p.stderr)
    row = re.search(r"^\| mt::silu on 1 element, requires grad \(records the tape\) \| ([\d.]+) \| "
                    r"([\d.]+) \| ([\d.]+)x \|", p.stdout, re.M)
    check("processes: silu's row is libtorch / minitensor = 600 / 200 = 3.00x",
          row is not None and row.groups() == ("200.0", "600.0", "3.00"), p.stdout)
    check("processes: the row only libtorch has is shown without a ratio",
          re.search(r"^\| \(no minitensor row\) below autograd \| - \| 50\.0 \| - \|", p.stdout,
                    re.M) is not None, p.stdout)
    j = json.load(open(out_json)) if os.path.exists(out_json) else {}
    check("processes: the JSON names the form", j.get("form") == "processes", j)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
