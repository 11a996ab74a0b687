#!/usr/bin/env python3
"""model_bench.py's report: the systems and sizes it measures, the markdown table and the PNG
plot it writes beside its JSON, and --merge (one report from the JSON of several runs). Needs no
GPU and no torch, so a merge runs anywhere.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_png  # noqa: E402
from bench_common import Run, log  # noqa: E402

KILN_MODES = ("FULL", "PIECEWISE", "NONE")
SIZES = {"bert": [1, 8, 32], "gpt2": [1, 128, 512], "llama": [1, 128, 512]}
TITLES = {"bert": "BERT-base, seq 128", "gpt2": "GPT-2 small + LM head",
          "llama": "Llama 0.85B (GQA 32/8)"}
SIZE_LABEL = {"bert": "batch", "gpt2": "tokens", "llama": "tokens"}

# Systems in table and legend order: key, label, colour, marker.
SYSTEMS = [
    ("torch_eager", "torch eager", (110, 110, 110), "o"),
    ("torch_compile_reduce_overhead", "torch.compile reduce-overhead", (31, 119, 180), "s"),
    ("torch_compile_max_autotune", "torch.compile max-autotune", (255, 127, 14), "^"),
    ("kiln_FULL", "kiln FULL", (44, 160, 44), "D"),
    ("kiln_PIECEWISE", "kiln PIECEWISE", (214, 39, 40), "v"),
    ("kiln_NONE", "kiln NONE", (148, 103, 189), "x"),
]
COMPILE_MODES = {"torch_compile_reduce_overhead": "reduce-overhead",
                 "torch_compile_max_autotune": "max-autotune"}
TIMING_NOTE = ("host wall clock (time.perf_counter) around one call followed by "
               "torch.cuda.synchronize(), for every system alike; median of the repeats after the "
               "warm-up. kiln is called through kiln.Executor.bind(..., stream=torch's current "
               "stream): the request is checked once, and each call is kiln_executor_run_async, "
               "ordered on torch's stream and returning once its work is enqueued (as a "
               "torch.compile call does).")


def check_text(c):
    if not c:
        return "-"
    s = f"rel {c['rel']:.1e}"
    if "argmax_exact" in c:
        s += f", argmax {100 * c['argmax_exact']:.0f}%"
    return s + ("" if c["ok"] else " WRONG")


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def cell(entry):
    """A table cell: ms, WRONG (ms), error, skipped or -."""
    if not entry:
        return "-"
    if "ms" in entry:
        return fmt(entry["ms"]) if entry.get("ok") else f"WRONG ({entry['ms']:.3f})"
    if "skipped" in entry:
        return "skipped"
    if "error" in entry:
        return "error"
    return "-"


def entry_of(m, key, s):
    sysres = m.get("systems", {}).get(key)
    if sysres is None:
        return None
    e = sysres.get("sizes", {}).get(str(s))
    if e is None and sysres.get("error"):
        return {"error": sysres["error"]}
    if e is None and sysres.get("skipped"):
        return {"skipped": sysres["skipped"]}
    return e


def rows_of(name, m):
    rows = []
    for s in SIZES[name]:
        ms, status = {}, {}
        for key, *_ in SYSTEMS:
            e = entry_of(m, key, s)
            ok = bool(e and "ms" in e and e.get("ok"))
            ms[key] = e["ms"] if ok else None
            status[key] = ("ok" if ok else "WRONG" if e and "ms" in e else
                           "skipped" if e and "skipped" in e else "error" if e and "error" in e
                           else "not run")
        kb = min(((ms[k], k) for k in ms if k.startswith("kiln_") and ms[k]), default=None)
        cb = min(((ms[k], k) for k in COMPILE_MODES if ms[k]), default=None)
        # The check of the fastest correct kiln mode, else of the first kiln mode checked.
        kc = (entry_of(m, kb[1], s) or {}).get("check") if kb else None
        for key in ([] if kc else [k for k, *_ in SYSTEMS if k.startswith("kiln_")]):
            kc = kc or (entry_of(m, key, s) or {}).get("check")
        rows.append({"size": s, "ms": ms, "status": status,
                     "kiln_best": kb[1] if kb else None, "kiln_best_ms": kb[0] if kb else None,
                     "compile_best": cb[1] if cb else None,
                     "compile_best_ms": cb[0] if cb else None,
                     "kiln_over_compile": kb[0] / cb[0] if kb and cb else None,
                     "kiln_check": kc})
    return rows


def title_of(name, tiny):
    return f"{name} tiny (2 layers, hidden 64)" if tiny else TITLES[name]


def table(name, m, tiny=False):
    head = ["size"] + [label + " ms" for _, label, _, _ in SYSTEMS] + [
        "kiln best / compile best", "kiln check"]
    lines = []
    for r in m.get("rows", []):
        cells = [str(r["size"])]
        for key, *_ in SYSTEMS:
            cells.append(cell(entry_of(m, key, r["size"])))
        ratio = r["kiln_over_compile"]
        cells.append(f"{ratio:.2f} ({r['kiln_best'].replace('kiln_', '')})" if ratio else "-")
        cells.append(check_text(r["kiln_check"]))
        lines.append(cells)
    md = [f"### {title_of(name, tiny)} ({SIZE_LABEL[name]} = kiln's size)", "",
          "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(c) + " |" for c in lines]
    extra = []
    kc = m.get("kiln_compile", {})
    if kc.get("ok"):
        extra.append(f"kiln compile {fmt(kc.get('compile_s'), '.1f')} s"
                     + (" (cached)" if kc.get("cached") else "")
                     + f", autotune {'on' if kc.get('autotune') else 'off'}")
    k = m.get("kiln", {})
    if "load_s" in k:
        extra.append(f"kiln load {k['load_s']:.2f} s ({k['load_mem_bytes'] / 2**20:.0f} MiB)")
    for mode in KILN_MODES:
        r = m.get("systems", {}).get(f"kiln_{mode}", {})
        if "create_s" in r:
            extra.append(f"{mode} capture {r['create_s']:.2f} s, peak "
                         f"{fmt((r.get('mem_bytes') or 0) / 2**20, '.0f')} MiB")
    for key, label, *_ in SYSTEMS[:3]:
        peaks = [e.get("peak_mem_bytes") for e in m.get("systems", {}).get(key, {})
                 .get("sizes", {}).values() if e.get("peak_mem_bytes")]
        firsts = [e.get("first_call_s") for e in m.get("systems", {}).get(key, {})
                  .get("sizes", {}).values() if e.get("first_call_s") is not None]
        if peaks:
            extra.append(f"{label} peak {max(peaks) / 2**20:.0f} MiB"
                         + (f", first calls {'/'.join(f'{x:.0f}' for x in firsts)} s"
                            if firsts else ""))
    if extra:
        md += ["", "; ".join(extra) + "."]
    return "\n".join(md)


def write_outputs(run):
    """The markdown tables and the PNG, beside the JSON; then the JSON."""
    a, rep = run.args, run.report
    base = os.path.splitext(a.json_out)[0]
    tables = []
    panels = []
    for name, m in rep["models"].items():
        m["rows"] = rows_of(name, m)
        tables.append(table(name, m, a.tiny))
        series = {}
        for r in m["rows"]:
            for key, v in r["ms"].items():
                if v:
                    series.setdefault(key, []).append((r["size"], v))
        panels.append({"title": title_of(name, a.tiny),
                       "xlabel": SIZE_LABEL[name], "ylabel": "latency ms", "series": series})
    md = ["# model_bench", "", f"{rep.get('device', '?')}; torch {rep.get('versions', {}).get('torch')}"
          f"; fp16; timing: {TIMING_NOTE}", ""]
    md += [t + "\n" for t in tables]
    if rep["failures"]:
        md += ["Failures:", ""] + [f"- {f}" for f in rep["failures"]]
    rep["markdown"] = base + ".md"
    with open(rep["markdown"], "w") as f:
        f.write("\n".join(md) + "\n")
    if panels:
        try:
            backend = plot_png.write_plot(
                base + ".png", panels, SYSTEMS,
                f"model_bench: latency vs size, fp16, {rep.get('device', '?')}", a.plot_backend)
            rep["plot"] = {"path": base + ".png", "backend": backend}
        except Exception as ex:  # noqa: BLE001  (a plot failure must not lose the numbers)
            rep["plot"] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
    run.save()
    return tables


def merge(args):
    """--merge: one report, table and plot from the JSON of several runs (e.g. one GPU call per
    model, when a cold run cannot fit every system in one call). Needs no GPU and no torch.
    Later files win for a model present in several; failures and notes are kept, prefixed with
    their file."""
    run = Run(args, "tools/bench/model_bench.py", timing=TIMING_NOTE)
    os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
    rep = run.report
    rep["merged_from"] = []
    for path in args.merge:
        with open(path) as f:
            part = json.load(f)
        rep["merged_from"].append({"path": path, "started": part.get("started"),
                                   "argv": part.get("argv"), "elapsed_s": part.get("elapsed_s")})
        for key in ("versions", "device", "timing", "settings", "cuda"):
            if key in part:
                rep.setdefault(key, part[key])
        if part.get("device") != rep.get("device"):
            run.fail(f"{path}: measured on {part.get('device')}, not {rep.get('device')}: "
                     "timings from different GPUs do not compare")
        rep["models"].update(part.get("models", {}))
        rep["failures"] += [f"{path}: {f}" for f in part.get("failures", [])]
        rep["notes"] += [f"{path}: {n}" for n in part.get("notes", [])]
    for t in write_outputs(run):
        log(t)
        log("")
    for f in rep["failures"]:
        log(f"  failure: {f}")
    log(f"json: {args.json_out}; table: {rep.get('markdown')}; plot: "
        f"{rep.get('plot', {}).get('path', rep.get('plot'))}")
    return 0 if not rep["failures"] else 1
