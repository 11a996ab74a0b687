#!/usr/bin/env python3
"""Where a decode step's time goes: every kernel of one step, timed by Nsight Compute.

    python3 tools/bench/decode_profile.py CACHE [CACHE...] [--kiln .stage/bin/kiln]
        [--batches 1,8] [--context 512] [--iters 3] [--out DIR] [--ncu PATH]
        [--sizes 1,128,512 [--mode FULL]]
    .stage/run_gpu.sh profile      (after `decode`: the caches decode_bench.py compiled)

--sizes profiles one run of a cache compiled without generation instead (model_bench.py's
caches: BERT, GPT-2 and Llama without a KV cache): `kiln bench CACHE --sizes N --mode FULL`,
its timed runs the profiled range, one ncu run per size; the rest is as for a decode step.

For each kiln generation cache and batch, `ncu` runs `kiln generate CACHE --bench-decode` (a
prefill, a warm-up step and --iters decode steps, graph replays in FULL_DECODE_ONLY) and reads,
per kernel of the timed steps (the runtime's profiler range; graph kernel nodes one by one;
clocks left alone): its duration, DRAM bytes read and written, grid and block. ncu runs each
kernel alone with caches flushed, so a small kernel's duration includes a couple of µs of
launch and ramp that overlap in a graph replay: read the shares, not the sum, against the
replay time from decode_bench.py. The last decode step is found as the period of the
kernel-name sequence at the end of the run (the steps are identical). Printed per step: the
kernels grouped by family (skinny GEMM, cuBLASLt GEMM, attention, norms, elementwise, ...) with
launches, time, share of the step and bytes, and the 14 costliest kernel names.
Every kernel of the step in order (duration, MB read, GB/s) goes to DIR/<cache>_b<B>_step.txt,
ncu's raw CSV to DIR/<cache>_b<B>.csv (--keep-reports: its .ncu-rep too), the tables to
DIR/decode_profile.json.
Exit status: 0 when every profile ran and held a repeated step, 1 otherwise, 2 usage.
"""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import kiln_env, log  # noqa: E402

METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]

# Kernel families by name; the first match wins.
FAMILIES = [
    ("skinny GEMM", ("kiln_skinny_gemm",)),
    ("cuBLASLt GEMM", ("gemm", "gemv", "cutlass", "sm90_xmma", "splitKreduce", "nvjet")),
    ("attention", ("attention",)),
    ("norm", ("norm", "layernorm", "rmsnorm")),
    ("sampling", ("sample", "argmax", "topk")),
    ("elementwise", ("kiln_ew_",)),
    ("layout", ("transpose", "gather", "concat", "slice", "layout", "copy")),
    ("reduce", ("reduce",)),
]


def family(name):
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k.lower() in low for k in keys):
            return fam
    return "other"


def find_ncu(given):
    for p in [given, shutil.which("ncu"), "/usr/local/cuda/bin/ncu"]:
        if p and os.path.exists(p):
            return p
    for root in ["/opt/nvidia/nsight-compute", "/usr/local/cuda/nsight-compute"]:
        if os.path.isdir(root):
            for dirpath, _, files in os.walk(root):
                if "ncu" in files:
                    return os.path.join(dirpath, "ncu")
    return None


def read_rows(ncu, report):
    """The report's kernels, in launch order: dicts with name, grid, block and the metrics."""
    p = subprocess.run([ncu, "--import", report, "--csv", "--page", "raw", "--print-units",
                        "base"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"ncu --import failed: {p.stderr.strip()[-400:]}")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    kernels = []
    for r in rows:
        if not (r.get("ID") or "").strip().isdigit():
            continue  # the units row
        k = {"id": int(r["ID"]), "name": r.get("Kernel Name", "?"),
             "grid": r.get("Grid Size", ""), "block": r.get("Block Size", "")}
        for m in METRICS:
            v = (r.get(m) or "0").replace(",", "")
            try:
                k[m] = float(v)
            except ValueError:
                k[m] = 0.0
        kernels.append(k)
    kernels.sort(key=lambda k: k["id"])
    return kernels, p.stdout


def last_step(kernels, min_repeats=2):
    """The kernels of the last decode step: the shortest tail that repeats min_repeats times."""
    names = [k["name"] + k["grid"] for k in kernels]
    n = len(names)
    for period in range(1, n // min_repeats + 1):
        tail = names[n - period:]
        if all(names[n - (r + 1) * period:n - r * period] == tail for r in range(1, min_repeats)):
            return kernels[n - period:]
    return None


def summarize(step):
    total_ns = sum(k["gpu__time_duration.sum"] for k in step)
    fams = {}
    for k in step:
        f = fams.setdefault(family(k["name"]), {"launches": 0, "ns": 0.0, "read": 0.0,
                                                "write": 0.0})
        f["launches"] += 1
        f["ns"] += k["gpu__time_duration.sum"]
        f["read"] += k["dram__bytes_read.sum"]
        f["write"] += k["dram__bytes_write.sum"]
    return total_ns, fams


def gbps(nbytes, ns):
    return nbytes / ns if ns > 0 else 0.0  # bytes per ns = GB/s


def print_step(label, step, total_ns, fams, listing):
    """The family table and the 14 costliest kernel names on stdout; every kernel of the step,
    in order, into `listing`."""
    log(f"==== {label}: {len(step)} kernels, {total_ns / 1e3:.1f} us of kernel time "
        f"(ncu, each kernel alone), {sum(k['dram__bytes_read.sum'] for k in step) / 1e6:.1f} MB read")
    log(f"  {'family':<16} {'launches':>8} {'us':>9} {'share':>6} {'MB read':>9} {'GB/s':>7}")
    for fam, f in sorted(fams.items(), key=lambda kv: -kv[1]["ns"]):
        log(f"  {fam:<16} {f['launches']:>8} {f['ns'] / 1e3:>9.1f} "
            f"{100 * f['ns'] / total_ns:>5.1f}% {f['read'] / 1e6:>9.2f} "
            f"{gbps(f['read'] + f['write'], f['ns']):>7.0f}")
    names = {}
    for k in step:
        base = k["name"].split("__")[0].split("(")[0][:48]
        n = names.setdefault(base, [0, 0.0])
        n[0] += 1
        n[1] += k["gpu__time_duration.sum"]
    log(f"  {'kernel (name before its signature)':<48} {'launches':>8} {'us':>9}")
    for base, (count, ns) in sorted(names.items(), key=lambda kv: -kv[1][1])[:14]:
        log(f"  {base:<48} {count:>8} {ns / 1e3:>9.1f}")
    with open(listing, "w") as f:
        f.write(f"{label}\n{'#':>4} {'us':>7} {'MB rd':>7} {'GB/s':>6}  grid / block  kernel\n")
        for i, k in enumerate(step):
            ns = k["gpu__time_duration.sum"]
            f.write(f"{i:>4} {ns / 1e3:>7.2f} {k['dram__bytes_read.sum'] / 1e6:>7.2f} "
                f"{gbps(k['dram__bytes_read.sum'] + k['dram__bytes_write.sum'], ns):>6.0f}  "
                f"{k['grid']} / {k['block']}  {k['name'][:100]}\n")


def ncu_command(ncu, report, a, cache, n):
    """ncu over the kiln run that profiles `cache` at batch (or, with a.sizes, size) n: its
    profiled range is the timed steps (kiln generate --bench-decode) or runs (kiln bench)."""
    cmd = [ncu, "--clock-control", "none", "--graph-profiling", "node",
           "--profile-from-start", "off", "--metrics", ",".join(METRICS), "-f", "-o", report,
           a.kiln]
    if a.sizes:
        return cmd + ["bench", cache, "--sizes", str(n), "--mode", a.mode, "--warmup", "1",
                      "--iters", str(a.iters)]
    return cmd + ["generate", cache, "--bench-decode", "--batches", str(n), "--context",
                  str(a.context), "--iters", str(a.iters), "--mode", "FULL_DECODE_ONLY"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("caches", nargs="+",
                   help="kiln caches compiled for generation (with --sizes: without)")
    p.add_argument("--kiln", default=".stage/bin/kiln")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "decode_profile"))
    p.add_argument("--ncu", default=None)
    p.add_argument("--timeout", type=int, default=240, help="seconds per ncu run")
    p.add_argument("--sizes", default=None,
                   help="profile `kiln bench --sizes N` runs instead of decode steps")
    p.add_argument("--mode", default="FULL", help="with --sizes: the graph mode (default FULL)")
    p.add_argument("--keep-reports", action="store_true",
                   help="keep ncu's .ncu-rep files (open them with ncu-ui)")
    a = p.parse_args()
    ncu = find_ncu(a.ncu)
    if not ncu:
        log("decode_profile: no ncu found (PATH, /usr/local/cuda/bin, /opt/nvidia)")
        return 1
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in (a.sizes or a.batches).split(",") if b]
    what = "size" if a.sizes else "batch"
    report, failures = {}, []
    for cache in a.caches:
        cname = Path(cache).parent.name + "_" + Path(cache).name
        for b in batches:
            label = f"{cname} {what} {b}"
            rep = out / f"{cname}_b{b}"
            cmd = ncu_command(ncu, str(rep), a, cache, b)
            log(f"[{label}] {' '.join(cmd)}")
            try:
                pr = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                                    env=kiln_env(a.kiln))
            except subprocess.TimeoutExpired:
                failures.append(f"{label}: ncu timed out after {a.timeout} s")
                continue
            (out / f"{cname}_b{b}.log").write_text(pr.stdout + "\n---- stderr\n" + pr.stderr)
            if pr.returncode != 0:
                failures.append(f"{label}: ncu rc={pr.returncode}: {pr.stderr.strip()[-300:]}")
                continue
            try:
                kernels, raw = read_rows(ncu, str(rep) + ".ncu-rep")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"{label}: {e}")
                continue
            (out / f"{cname}_b{b}.csv").write_text(raw)
            if not a.keep_reports:
                os.remove(str(rep) + ".ncu-rep")
            step = last_step(kernels, min_repeats=min(3, a.iters))
            if not step:
                failures.append(f"{label}: no repeated step among {len(kernels)} kernels")
                continue
            total_ns, fams = summarize(step)
            print_step(label, step, total_ns, fams, out / f"{cname}_b{b}_step.txt")
            report[label] = {"kernels": len(step), "kernel_us": total_ns / 1e3,
                             "families": fams,
                             "step": [{"name": k["name"], "grid": k["grid"], "block": k["block"],
                                       "us": k["gpu__time_duration.sum"] / 1e3,
                                       "read_mb": k["dram__bytes_read.sum"] / 1e6}
                                      for k in step]}
    (out / "decode_profile.json").write_text(json.dumps(report, indent=1))
    for f in failures:
        log(f"FAILED: {f}")
    log(f"decode_profile {'ok' if not failures else 'FAILED'}: "
        + " | ".join(f"{k}: {v['kernels']} kernels {v['kernel_us']:.0f} us"
                     for k, v in report.items()))
    return 0 if not failures and report else 1


if __name__ == "__main__":
    sys.exit(main())
