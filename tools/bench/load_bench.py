#!/usr/bin/env python3
"""The weight-load benchmark (issue 15, "fast load"): how fast `Model::load` moves a large weights
file to the GPU from a warm page cache, with each upload strategy, hashing on (the default).

Builds a synthetic fp16 model with --gib of weights (a chain of 4096 x 4096 MatMuls, random
weights, seed 0, written as ONNX external data), compiles it with kiln (no autotune: only the load
is measured), then runs `kiln bench --compare-upload --json`, which loads the artifact three times
per strategy after a first load has warmed the page cache. Prints the median weights time and
GB/s per strategy and the whole load; writes --out/load_bench.json. Exit 1 on any failure.

    LD_LIBRARY_PATH=.stage/lib python3 tools/bench/load_bench.py --kiln .stage/bin/kiln
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

WIDTH = 4096


def build_model(out: Path, gib: float):
    layers = max(1, round(gib * (1 << 30) / (WIDTH * WIDTH * 2)))
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    with open(out / "weights.bin", "wb") as f:
        offset = 0
        # Small finite fp16 values (the bytes matter, not the numbers): uniform in [-1/64, 1/64],
        # one random matrix with its first row changed per layer (writing stays fast).
        w = (rng.random((WIDTH, WIDTH), dtype=np.float32) / 32 - 1 / 64).astype(np.float16)
        for i in range(layers):
            w[0, :] = np.float16(i / 4096)
            data = w.tobytes()
            f.write(data)
            t = TensorProto()
            t.name, t.data_type = f"w{i}", TensorProto.FLOAT16
            t.dims.extend([WIDTH, WIDTH])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", "weights.bin"), ("offset", str(offset)),
                         ("length", str(len(data)))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += len(data)
            inits.append(t)
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
            prev = f"h{i}"
    g = helper.make_graph(
        nodes, "load_bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["S", WIDTH])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT16, ["S", WIDTH])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, out / "model.onnx")
    (out / "kiln.yaml").write_text(
        "size_dim: S\nmax_size: 8\nprecision: fp16\n"
        "compilation:\n  compile_sizes: []\n  cudagraph_capture_sizes: [1, 8]\n")
    return layers, offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--gib", type=float, default=1.6)
    ap.add_argument("--out", default="/tmp/kiln_load_bench")
    ap.add_argument("--json-out", help="the JSON report (default: --out/load_bench.json)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    layers, nbytes = build_model(out, a.gib)
    print(f"model: {layers} MatMuls of {WIDTH}x{WIDTH} fp16, {nbytes / 1e9:.2f} GB of weights "
          f"({time.monotonic() - t0:.1f} s to write)", flush=True)
    t0 = time.monotonic()
    subprocess.run([a.kiln, "-q", "compile", str(out / "model.onnx"), "-c", str(out / "kiln.yaml"),
                    "-o", str(out / "cache")], check=True)
    compile_s = time.monotonic() - t0
    print(f"compiled in {compile_s:.1f} s", flush=True)
    r = subprocess.run([a.kiln, "bench", str(out / "cache"), "--compare-upload", "--sizes", "1",
                        "--iters", "3", "--json"], check=True, capture_output=True, text=True)
    report = json.loads(r.stdout)
    rows = {}
    for load in report["upload_compare"]:
        rows.setdefault(load["weights_strategy"], []).append(load)
    result = {"weights_bytes": nbytes, "compile_s": compile_s, "strategies": {}}
    print("================ load_bench")
    print(f"| strategy | weights ms (median of {len(next(iter(rows.values())))}) | GB/s | "
          "load total ms | of which cuBLASLt ms | hashed |")
    print("|---|---|---|---|---|---|")
    for name, loads in rows.items():
        w = statistics.median(x["weights_ms"] for x in loads)
        total = statistics.median(x["total_ms"] for x in loads)
        gbs = nbytes / (w / 1e3) / 1e9
        result["strategies"][name] = {"weights_ms": w, "gb_per_s": gbs, "total_ms": total,
                                      "loads": loads}
        lt = statistics.median(x["cublaslt_ms"] for x in loads)
        print(f"| {name} | {w:.1f} | {gbs:.1f} | {total:.1f} | {lt:.1f} | {loads[0]['verified']} |")
    Path(a.json_out or out / "load_bench.json").write_text(json.dumps(result, indent=1))
    best = max(result["strategies"].values(), key=lambda x: x["gb_per_s"])
    print(f"load_bench ok: {nbytes / 1e9:.2f} GB, best {best['gb_per_s']:.1f} GB/s "
          f"({best['weights_ms']:.1f} ms), load {best['total_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
