#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The minitensor command against bad arguments and hostile environments: exit codes,
messages, and every --json output parsed by a JSON parser.

Usage: check_cli.py PATH/TO/minitensor [USER_OPS.so USER_OPS_BROKEN.so [DEFINES_ADD.so
CTOR_THROWS.so BLOCK_THROWS_INT.so]] (a user's op library for --load, the same with a block
that fails: tests/cli/user_ops.cpp; libraries that misbehave while they load:
tests/load_probe.cpp). Exit codes checked: 0 success, 1 an error,
2 a usage error (as `minitensor --help` documents)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

exe = sys.argv[1]
user_ops, user_ops_broken = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else (None, None)
probe_add, probe_ctor, probe_int = sys.argv[4:7] if len(sys.argv) > 6 else (None, None, None)
failures = []
cases = 0


def run(args, env=None, timeout=120):
    full_env = dict(os.environb)
    full_env[b"MT_KERNEL_CACHE"] = scratch.encode() + b"/kernels"
    for k, v in (env or {}).items():
        full_env[k.encode()] = v if isinstance(v, bytes) else v.encode()
    try:
        p = subprocess.run([exe] + args, env=full_env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"(hung: killed after {timeout} s)"
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def check(name, cond, detail=""):
    global cases
    cases += 1
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures.append(name)
        print("     " + detail.replace("\n", "\n     "))


def expect(name, args, rc, stderr_has=None, stdout_has=None, env=None, stderr_lacks=None, timeout=120):
    code, out, err = run(args, env, timeout)
    detail = f"rc={code}\nstdout={out[-2000:]}\nstderr={err[-2000:]}"
    ok = code == rc
    if stderr_has is not None:
        ok = ok and stderr_has in err
    if stdout_has is not None:
        ok = ok and stdout_has in out
    if stderr_lacks is not None:
        ok = ok and stderr_lacks not in err
    check(name, ok, detail)
    return code, out, err


def expect_json(name, args, env=None):
    code, out, err = run(args, env)
    try:
        value = json.loads(out)
    except ValueError as e:
        check(name, False, f"not JSON ({e}): rc={code}\nstdout={out[-2000:]}\nstderr={err[-2000:]}")
        return None
    check(name, code == 0, f"rc={code}\nstderr={err[-2000:]}")
    return value


with tempfile.TemporaryDirectory() as scratch:
    # Conventions.
    _, out, _ = expect("--version", ["--version"], 0, stdout_has="minitensor ")
    check("--version prints a version number", re.match(r"minitensor \d+\.\d+", out) is not None, out)
    expect("-V", ["-V"], 0, stdout_has="minitensor ")
    expect("--help documents the exit codes", ["--help"], 0, stdout_has="Exit codes: 0 success")
    expect("no command is a usage error", [], 2)
    expect("an unknown command says so", ["frob"], 2, stderr_has="unknown command 'frob'")
    expect("an unknown bench says so", ["bench", "frob"], 2, stderr_has="minitensor bench: unknown command 'frob'")
    expect("an unknown option is a usage error", ["doctor", "--frob"], 2)
    expect("cache frob is an error", ["cache", "frob"], 2, stderr_has="frob")

    # Values out of range are refused before anything runs.
    expect("--shape with a 20-digit size is refused", ["bench", "mlp", "--shape", "99999999999999999999x1x1"], 2,
           stderr_has="--shape takes BATCHxINxHIDDEN")
    expect("--shape 0x1x1 is refused", ["bench", "mlp", "--shape", "0x1x1"], 2, stderr_has="--shape takes")
    expect("--shape with a huge product is refused", ["bench", "mlp", "--shape", "2000000000x2000000000x1"], 2,
           stderr_has="--shape takes")
    expect("--shape 8x8 is refused", ["bench", "mlp", "--shape", "8x8"], 2, stderr_has="--shape takes")
    expect("--min-log2 -5 is refused", ["bench", "silu", "--min-log2", "-5"], 2, stderr_has="--min-log2")
    expect("--max-log2 99 is refused", ["bench", "matmul", "--max-log2", "99"], 2, stderr_has="--max-log2")
    expect("--threads 0 is refused", ["bench", "silu", "--threads", "0"], 2, stderr_has="--threads")

    # Thread counts are bounded by the machine (warned and clamped), from the flag and from OMP.
    hw = os.cpu_count() or 1
    quick = ["bench", "silu", "--min-log2", "12", "--max-log2", "12", "--min-time", "0.001", "--json"]
    code, out, err = run(quick + ["--threads", "4096"], timeout=60)
    check("--threads 4096 warns and runs on the machine's threads",
          code == 0 and "--threads 4096 is more than this machine's" in err
          and all(r["threads"] <= hw for r in json.loads(out)["rows"]), f"rc={code}\n{out}\n{err}")
    code, out, err = run(quick, env={"OMP_NUM_THREADS": "100000"}, timeout=60)
    check("OMP_NUM_THREADS=100000 warns and is clamped",
          code == 0 and "OMP_NUM_THREADS 100000 is more than this machine's" in err
          and all(r["threads"] <= hw for r in json.loads(out)["rows"]), f"rc={code}\n{out}\n{err}")

    # User text in messages is quoted, with control characters escaped.
    code, out, err = expect("dump of a name with a terminal escape fails", ["dump", "ns::\x1b[2Jx"], 1,
                            stderr_has="'ns::\\x1b[2Jx'")
    check("no raw escape reaches the terminal", "\x1b" not in err and "\x1b" not in out, repr(err))

    # MT_TRACE / MT_LOG: comma lists of whole words; unknown words warned about once.
    code, out, err = expect("MT_TRACE=nodispatch does not trace", ["doctor"], 0, env={"MT_TRACE": "nodispatch"},
                            stderr_has="MT_TRACE: ignoring unknown word 'nodispatch' (known: dispatch, dispatch:why)",
                            stderr_lacks="keys=")
    check("the warning comes once", err.count("ignoring unknown") == 1, err)
    expect("MT_TRACE=bogus,dispatch traces and warns", ["doctor"], 0, env={"MT_TRACE": "bogus, dispatch"},
           stderr_has="keys=")
    expect("MT_TRACE=dispatch:why explains each call", ["doctor"], 0, env={"MT_TRACE": "dispatch:why"},
           stderr_has="why mt::silu (a call)\n  argument self = ", stderr_lacks="ignoring unknown")
    expect("explain with a bad argument fails naming it", ["explain", "mt::exp", "--args", "gpu"], 1,
           stderr_has="[explain] argument 'gpu' is not cpu, cuda, fake")
    expect("explain --exclude with a key that does not exist fails", ["explain", "mt::exp", "--args", "cpu",
           "--exclude", "Autgrad"], 1, stderr_has="[explain] --exclude 'Autgrad' is not a dispatch key")
    code, out, _ = expect("demo --debug-mode prints one line an op and the FLOP table", ["demo", "--debug-mode"], 0)
    check("... the MLP's first matmul, with hashes", "mt::matmul(self=float32[64, 32] cpu #" in out, out[:400])
    check("... and the FLOP table", "mt::matmul" in out.split("FlopCounterMode")[-1], out[-600:])
    expect("MT_LOG=registrations (a typo) warns", ["ops"], 0, env={"MT_LOG": "registrations"},
           stderr_has="MT_LOG: ignoring unknown word 'registrations' (known: registration, jit, compile, autotune)")
    expect("MT_LOG=jit is a known word (the kernel cache reads it)", ["ops"], 0, env={"MT_LOG": "jit"},
           stderr_lacks="ignoring unknown")

    # Every --json output parses, also with a cache path holding a tab, a CR and a non-UTF-8 byte.
    odd = scratch.encode() + b"/tab\there\rcr\xffbyte"
    doc = expect_json("doctor --json with an odd cache path", ["doctor", "--json"], env={"MT_KERNEL_CACHE": odd})
    check("the odd path survives escaping", doc is not None and "tab\there\rcr" in doc.get("kernel_cache", ""),
          repr(doc))
    doc = expect_json("doctor --json", ["doctor", "--json"]) or {}
    check("doctor --json keys are identifiers, not prose labels",
          doc and all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in doc)
          and {"version", "cuda_driver", "kernel_cache", "silu_cpu"} <= set(doc), repr(list(doc)))
    # OpenBLAS's kernels: doctor names them and which matmul runs; on old kernels (forced here
    # with OPENBLAS_CORETYPE, read when the library loads) matmul runs the library's own
    # kernel, and doctor says why and how to get OpenBLAS's; MT_MATMUL=blas forces OpenBLAS.
    blas = doc.get("blas", "")
    if "OpenBLAS" in blas:
        check("doctor names OpenBLAS's kernels", "kernels for " in blas and "; matmul runs " in blas, blas)
        cpu_flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
        if re.search(r"\bavx2\b", cpu_flags) and re.search(r"\bfma\b", cpu_flags):
            old_blas = expect_json("doctor --json with OpenBLAS on old kernels", ["doctor", "--json"],
                                   env={"OPENBLAS_CORETYPE": "Prescott"}) or {}
            check("doctor says matmul runs the own kernel on old OpenBLAS kernels, and why",
                  "kernels for Prescott; matmul runs the library's own " in old_blas.get("blas", "")
                  and "OPENBLAS_CORETYPE=" in old_blas.get("blas", ""), repr(old_blas.get("blas")))
            forced = expect_json("doctor --json with MT_MATMUL=blas", ["doctor", "--json"],
                                 env={"OPENBLAS_CORETYPE": "Prescott", "MT_MATMUL": "blas"}) or {}
            check("MT_MATMUL=blas keeps OpenBLAS on old kernels",
                  forced.get("blas", "").endswith("kernels for Prescott; matmul runs cblas (MT_MATMUL=blas)"),
                  repr(forced.get("blas")))
    # opcheck on a loaded library's op: every test and gradcheck, defaults and given samples.
    if user_ops:
        _, out, _ = expect("--load LIB opcheck passes on user_ops::scale", ["--load", user_ops, "opcheck", "user_ops::scale"], 0,
                           stdout_has="opcheck: all passed")
        check("opcheck runs test_compile and gradcheck", "test_compile                PASS" in out
              and "gradcheck sample 1: ok" in out, out)
        expect("opcheck with samples (a float32 one too), --load after the command",
               ["opcheck", "user_ops::scale", "--load", user_ops, "--sample", "randn(2,3), -0.5", "--sample", "rand(4):float32, 3"],
               0, stdout_has="gradcheck sample 1: ok")
        expect("opcheck fails an op without a fake kernel or autograd", ["--load", user_ops, "opcheck", "user_ops::twice"], 1,
               stdout_has="opcheck: FAILED")
        expect("opcheck: a bad sample names the item", ["--load", user_ops, "opcheck", "user_ops::scale", "--sample", "randn(2,x)"], 1,
               stderr_has="[opcheck] --sample 'randn(2,x)': 'x' in 'randn(2,x)' is not a size")
        expect("opcheck: an unknown op suggests one", ["--load", user_ops, "opcheck", "user_ops::scal"], 1,
               stderr_has="did you mean: user_ops::scale?")
    expect("opcheck: an op with a list argument needs --sample", ["opcheck", "mt::sum_to"], 1,
           stderr_has="no default sample for argument")
    ops = expect_json("ops --json", ["ops", "--json"])
    check("ops --json lists mt::silu", ops is not None and any(o["name"] == "mt::silu" for o in ops), repr(ops)[:500])
    expect_json("cache ls --json", ["cache", "ls", "--json"])
    st = expect_json("cache stats --json", ["cache", "stats", "--json"])
    check("cache stats --json has the counts", st is not None and "entries" in st and "bytes" in st, repr(st))
    expect_json("bench silu --json", quick)
    expect_json("bench matmul --json", ["bench", "matmul", "--max-log2", "6", "--min-time", "0.01", "--json"])
    expect_json("bench mlp --json", ["bench", "mlp", "--shape", "16x8x16", "--steps", "3", "--warmup", "1", "--json"])
    ac = expect_json("bench mlp --autocast bfloat16 --json",
                     ["bench", "mlp", "--shape", "16x8x16", "--steps", "3", "--warmup", "1", "--autocast",
                      "bfloat16", "--json"])
    check("bench mlp --autocast says so and trains", ac is not None and ac.get("autocast") == "bfloat16"
          and ac["rows"][0]["ms_median"] > 0 and ac["rows"][0]["loss_last"] == ac["rows"][0]["loss_last"],
          repr(ac))
    expect("bench mlp --autocast with --compile is a usage error",
           ["bench", "mlp", "--autocast", "bfloat16", "--compile"], 2, stderr_has="excludes")
    expect("bench mlp --autocast float32 is refused", ["bench", "mlp", "--autocast", "float32"], 2,
           stderr_has="--autocast")
    # bench split on the CPU: no CUDA graph, so no split, said from the compile log.
    sp = expect_json("bench split --json", ["bench", "split", "--repeats", "2", "--calls", "2", "--json"])
    check("bench split --json has both medians, the ratio and the split read from the log",
          sp is not None and sp.get("split") is False and sp.get("graph_parts") == 0
          and sp["eager_ms"] > 0 and sp["compiled_ms"] > 0 and sp["max_abs_diff"] < 1e-4
          and "comes in up to 2 parts" in sp.get("split_line", ""), repr(sp))
    split_svg = scratch + "/split.svg"
    expect("bench split prints whether the graph was split",
           ["bench", "--plot", split_svg, "split", "--repeats", "2", "--calls", "2"], 0,
           stdout_has="graph split: no, the CPU replays no CUDA graph")
    check("... and draws its plot", os.path.exists(split_svg) and "<svg" in open(split_svg).read())
    rd = expect_json("bench reduction --json", ["bench", "reduction", "--min-log2", "10", "--max-log2", "11", "--json"])
    check("bench reduction --json has a row a size with the three medians and their ratios",
          rd is not None and [r["elements"] for r in rd["rows"]] == [1024, 2048]
          and all(r["builder_ms"] > 0 and r["eager_ms"] > 0 and r["compiled_ms"] > 0
                  and r["eager_over_builder"] > 0 for r in rd["rows"]), repr(rd))
    expect("bench reduction with --min-log2 above --max-log2 is a usage error",
           ["bench", "reduction", "--min-log2", "12", "--max-log2", "11"], 2, stderr_has="give a range")
    disp = expect_json("bench dispatch --json", ["bench", "dispatch", "--json", "--iters", "20000"])
    dispatch_keys = ["direct", "dispatch", "autograd_redispatch", "boxed", "silu_grad", "add"]
    check("bench dispatch --json is keyed by the rows' keys (bench_libtorch's)",
          disp is not None and list(disp) == dispatch_keys, repr(disp))
    rc, out, err = run(["bench", "dispatch", "--iters", "20000"])
    deltas = re.findall(r"\(([+-]\d+\.\d) ns vs direct\)", out)
    check("bench dispatch prints signed differences (never '+-')",
          rc == 0 and len(deltas) == 6 and "+-" not in out and deltas[0] == "+0.0", out + err)
    sc = expect_json("bench dispatch --self-check --json --only add",
                     ["bench", "dispatch", "--self-check", "1", "--iters", "20000", "--json", "--only", "add"])
    check("--self-check keeps --only's row and prints JSON",
          sc is not None and list(sc.get("rows", {})) == ["add"]
          and set(sc["rows"]["add"]) == {"loops_min", "loops_max", "pairs_min", "pairs_max"}, repr(sc))
    expect("--self-check with --plot is a usage error",
           ["bench", "--plot", scratch + "/sc.svg", "dispatch", "--self-check", "1"], 2,
           stderr_has="--self-check prints ranges of ratios and draws no plot")
    check("... and writes no file", not os.path.exists(scratch + "/sc.svg"))

    # A bad --device is a usage error (2), as --help promises, with the parser's reason.
    for args in (["demo"], ["bench", "silu"], ["bench", "mlp"], ["bench", "graph"], ["bench", "split"],
                 ["bench", "reduction"],
                 ["compile-demo"], ["memory"]):
        expect(" ".join(args) + " --device gpu is a usage error", args + ["--device", "gpu"], 2,
               stderr_has="cannot parse device 'gpu'")

    # A misspelt op name: the closest registered name is suggested.
    for bad in ("silu", "mt::sillu", "mt::Silu"):
        expect(f"dump {bad} suggests mt::silu", ["dump", bad], 1, stderr_has="did you mean 'mt::silu'?")
    expect("dump of a name far from every op suggests nothing", ["dump", "zz::qqqqqqqqqq"], 1,
           stderr_lacks="did you mean")

    # The help shows the values an option takes, not CLI11's internal maps.
    for args in (["bench", "mlp", "--help"], ["bench", "dispatch", "--help"]):
        _, out, _ = expect(" ".join(args) + " shows no CLI11 internals", args, 0, stdout_has="--")
        check(" ".join(args) + ": no '->' in the help", "->" not in out, out)

    # bench mlp --compile --plot draws the eager and compiled steps.
    mlp_svg = scratch + "/mlp_compile.svg"
    code, _, _ = expect("bench mlp --compile --plot writes the SVG",
                        ["bench", "--plot", mlp_svg, "mlp", "--compile", "--shape", "16x8x16", "--steps", "3",
                         "--warmup", "1"], 0, stderr_has="wrote " + mlp_svg, timeout=300)
    if os.path.exists(mlp_svg):
        text = open(mlp_svg).read()
        ET.fromstring(text)
        check("the mlp --compile picture has an eager and a compiled bar", "eager 16/8/16" in text
              and "compiled 16/8/16" in text, text[:500])
    else:
        check("bench mlp --compile --plot: the file exists", False)
    # --self-check runs and prints one line of two ratio ranges per row (a row timed against
    # itself; 0.5 to 2 around 1 leaves the paired one room on a loaded CI machine). The pairs' ratio
    # direction is checked in tests/test_bench_loops.cpp, the comparison's table in
    # check_dispatch_compare.py.
    rc, out, err = run(["bench", "dispatch", "--self-check", "1", "--iters", "20000"])
    ranges = [tuple(map(float, m)) for m in
              re.findall(r"([\d.]+) to ([\d.]+)\s+([\d.]+) to ([\d.]+)\s*$", out, re.M)]
    # Only the paired column must stay near 1 on a loaded machine: the loops-a-side column is
    # the method the self-check shows to be noisy (a CI run under load printed 2.72 there).
    check("bench dispatch --self-check: a row each, paired ratios around 1",
          rc == 0 and len(ranges) == 6 and all(0.5 < r[2] < 2 and 0.5 < r[3] < 2 and r[0] > 0 and r[1] > 0
                                               for r in ranges),
          f"rc {rc}, {len(ranges)} rows: {out}{err}")

    # The cache subcommands on broken directories.
    missing = scratch + "/missing"
    expect("cache clear on a directory not made yet has nothing to clear", ["cache", "clear"], 0,
           env={"MT_KERNEL_CACHE": missing}, stdout_has="nothing to clear: '" + missing + "' does not exist yet")
    cleared = expect_json("cache clear --json on a missing directory", ["cache", "clear", "--json"],
                          env={"MT_KERNEL_CACHE": missing})
    check("... says it did not exist", cleared == {"cleared": missing, "existed": False}, repr(cleared))
    check("... and does not make it", not os.path.exists(missing))
    afile = scratch + "/afile"
    open(afile, "w").write("x")
    expect("cache clear on a file fails with the reason", ["cache", "clear"], 1, env={"MT_KERNEL_CACHE": afile},
           stderr_has="it is not a directory")
    cache_dir = scratch + "/fifo_cache"
    os.mkdir(cache_dir, 0o700)
    os.mkfifo(cache_dir + "/" + "0" * 64 + ".mtk")
    expect("cache ls with a FIFO entry does not hang", ["cache", "ls"], 0, env={"MT_KERNEL_CACHE": cache_dir}, timeout=30,
           stdout_has="not a regular file (a FIFO)")
    expect("cache stats counts it", ["cache", "stats"], 0, env={"MT_KERNEL_CACHE": cache_dir},
           stdout_has="entries 1 (1 invalid)")
    expect("cache clear removes it", ["cache", "clear"], 0, env={"MT_KERNEL_CACHE": cache_dir})
    check("the FIFO is gone", os.listdir(cache_dir) == [], repr(os.listdir(cache_dir)))

    # The pictures of docs/memory.md: well-formed SVG (parsed by an XML parser) with the
    # elements each one promises.
    def svg_classes(path):
        root = ET.parse(path).getroot()
        classes = {}
        for el in root.iter():
            for c in el.get("class", "").split():
                classes[c] = classes.get(c, 0) + 1
        return root, classes

    lru = scratch + "/lru.svg"
    code, out, err = expect("cache --plot --demo draws the LRU", ["cache", "--plot", lru, "--demo"], 0,
                            stdout_has="evictions", timeout=300)
    if code == 0:
        root, cls = svg_classes(lru)
        check("the LRU picture is an SVG with 12 accesses, hits, misses and evictions",
              root.tag == "{http://www.w3.org/2000/svg}svg" and cls.get("access") == 12 and cls.get("hit", 0) >= 1
              and cls.get("miss", 0) >= 5 and cls.get("evicted", 0) >= 1 and root.find("{http://www.w3.org/2000/svg}title") is not None,
              repr(cls))
    log_dir = scratch + "/logged_cache"
    os.mkdir(log_dir, 0o700)
    expect("cache --plot without a log says how to get one", ["cache", "--plot", scratch + "/none.svg"], 1,
           env={"MT_KERNEL_CACHE": log_dir}, stderr_has="has no events.log yet")
    key_a, key_b = "a" * 64, "b" * 64
    with open(log_dir + "/events.log", "w") as f:
        f.write(f"1.0 compile {key_a} 100 one.cu\n2.0 write {key_a} 100 one.cu\n3.0 compile {key_b} 100 two.cu\n"
                f"4.0 eviction {key_a} 900 -\n5.0 disk_hit {key_b} 100 two.cu\nnot a line\n")
    logged = scratch + "/logged.svg"
    expect("cache --plot draws this directory's events.log", ["cache", "--plot", logged], 0,
           env={"MT_KERNEL_CACHE": log_dir}, stdout_has="1 disk hits, 2 misses (compiled), 1 evictions")
    if os.path.exists(logged):
        root, cls = svg_classes(logged)
        check("the logged picture has its three accesses", cls.get("access") == 3 and cls.get("evicted") == 1, repr(cls))
    expect("cache ls has the hits column", ["cache", "ls"], 0, env={"MT_KERNEL_CACHE": log_dir})
    # A real cache's log: 149 kernels compiled, then the last 20 hit. Drawn whole, it was
    # 3920 x 3434 px; only the last 30 accesses are drawn, at most 16 rows high.
    big_dir = scratch + "/big_cache"
    os.mkdir(big_dir, 0o700)
    with open(big_dir + "/events.log", "w") as f:
        keys = [f"{i:064x}" for i in range(149)]
        for i, k in enumerate(keys):
            f.write(f"{i}.0 compile {k} 1000 k{i}.cu\n")
        for i, k in enumerate(keys[-20:]):
            f.write(f"{200 + i}.0 disk_hit {k} 1000 k{129 + i}.cu\n")
    big = scratch + "/big.svg"
    expect("cache --plot of a 149-entry log", ["cache", "--plot", big], 0, env={"MT_KERNEL_CACHE": big_dir},
           stdout_has="20 disk hits, 149 misses (compiled), 0 evictions")
    if os.path.exists(big):
        root, cls = svg_classes(big)
        w, h = float(root.get("width")), float(root.get("height"))
        text = "".join(root.itertext())
        check("the 149-entry picture is readable: 30 columns, about 2000 x 600 px, '+N more'",
              cls.get("access") == 30 and w <= 2100 and h <= 800 and cls.get("more", 0) >= 1, f"{w} x {h} {cls}")
        check("its subtitle counts what it draws",
              "the last 30 of 169 accesses: 20 hits (green), 10 misses" in text, text[:400])

    # The allocator's picture needs a GPU: without one, a clear error.
    doc = expect_json("doctor --json (for the GPU check)", ["doctor", "--json"]) or {}
    mem_svg = scratch + "/memory.svg"
    if str(doc.get("cuda_driver", "")).startswith("found"):
        code, out, err = expect("memory --plot draws the allocator", ["memory", "--plot", mem_svg], 0,
                                stdout_has="allocator events", timeout=300)
        if code == 0:
            root, cls = svg_classes(mem_svg)
            check("the allocator picture has blocks in use, cached, in a graph pool, and empty_cache",
                  all(cls.get(c, 0) >= 1 for c in ("allocated", "cached", "pool-allocated", "empty-cache")), repr(cls))
    else:
        expect("memory --plot without a GPU says it needs one", ["memory", "--plot", mem_svg], 1,
               stderr_has="[memory] needs a GPU, but CUDA is unavailable")

    # --load: a user's op library registers its ops, which ops and dump then show.
    if user_ops:
        _, out, _ = expect("--load LIB ops lists the user's op", ["--load", user_ops, "ops", "--namespace", "user_ops"],
                           0, stdout_has="user_ops::twice(Tensor x) -> Tensor")
        check("--load LIB ops lists only that namespace (its two ops)", out.count("\n") == 2, out)
        expect("--load LIB dump shows the user's op and its CPU kernel", ["--load", user_ops, "dump", "user_ops::twice"],
               0, stdout_has="tests/cli/user_ops.cpp")
        ops = expect_json("--load LIB ops --json", ["--load", user_ops, "ops", "--json"])
        check("ops --json has the user's op with a CPU kernel",
              ops is not None and any(o["name"] == "user_ops::twice" and "CPU" in o["kernels"] for o in ops),
              repr(ops)[:500])
        expect("--load LIB demo runs", ["--load", user_ops, "demo"], 0, stdout_has="step 9")
        expect("without --load the op is not there", ["dump", "user_ops::twice"], 1, stderr_has="user_ops::twice")
        expect("--load a missing file", ["--load", scratch + "/nope.so", "ops"], 1,
               stderr_has="[load_library] there is no file '" + scratch + "/nope.so'")
        expect("--load a file that is not a library", ["--load", afile, "ops"], 1,
               stderr_has="[load_library] could not load '" + afile + "'")
        expect("--load a library whose block fails", ["--load", user_ops_broken, "ops"], 1,
               stderr_has="1 of its library blocks failed and registered nothing: the block at "
                          "tests/cli/user_ops.cpp:")
        _, _, err = run(["--load", user_ops_broken, "ops"])
        check("the failure says what was wrong", "bad_schema" in err, err)
        expect("--load without a path is a usage error", ["--load"], 2,
               stderr_has="--load needs the path of a shared library of ops")
        expect("--load after the command works too", ["ops", "--namespace", "user_ops", "--load", user_ops],
               0, stdout_has="user_ops::scale(Tensor x, float alpha) -> Tensor")
        expect("--load=LIB after a nested command", ["dump", "user_ops::scale", "--load=" + user_ops], 0,
               stdout_has="Autograd: kernel registered at tests/cli/user_ops.cpp:")
        _, out, _ = run(["--load", user_ops, "dump", "user_ops::scale"])
        check("the user's op has a CPU, a Fake and an Autograd kernel from its .so",
              all(f"{k}: " in out for k in ("CPU", "Fake", "Autograd")) and out.count("tests/cli/user_ops.cpp:") >= 4,
              out)
    if probe_add:
        # Before the dispatcher's first use (the command loads first): the built-in ops register
        # before the library's block, which then fails; every op works after.
        _, _, err = expect("--load a library that defines mt::add fails in its block", ["--load", probe_add, "demo"], 1,
                           stderr_has="[def] 'mt::add' is already defined (at kernels/ops/binary.cpp:")
        check("... as a load_library error (before, the load passed and the built-ins failed)",
              f"[load_library] '{probe_add}' loaded, but 1 of its library blocks failed" in err, err)
        expect("--load a library whose static constructor throws: an error, not an abort",
               ["--load", probe_ctor, "ops"], 1,
               stderr_has="was not loaded: a static initializer of it failed")
        expect("--load a library whose block throws a non-std::exception: an error",
               ["--load", probe_int, "ops"], 1,
               stderr_has="it threw something that is not a std::exception")

print(f"cli: {cases} cases, {len(failures)} failed" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
