#!/usr/bin/env python3
"""The host's share of one kiln call: how much longer a call takes than its graph replay.

    python3 tools/bench/call_overhead.py [--kiln .stage/bin/kiln] [--model DIR] [--sizes 1,8]
        [--iters 2000]

Compiles DIR/model.onnx with DIR/kiln.yaml (default: the 2-layer GPT-2 test export,
tests/models/exported/gpt2_ts17_eager, whose replay is about 20 µs, so the rest of a call stands
out), loads it in FULL mode with inputs and outputs as torch CUDA tensors, and prints per size
the median microseconds of (each timed as model_bench.py times a call: host wall clock around
the call and a torch.cuda.synchronize()):
  - the synchronous bound call (kiln.Executor.bind, torch's stream synchronised first);
  - the bound call without that synchronisation (sync_streams=False);
  - the bound call ordered on torch's stream (stream=..., kiln_executor_run_async: no host wait
    inside the call; the synchronize after it waits), as model_bench.py makes it;
  - kiln_executor_run alone through ctypes (no Python checks);
  - the bound call with numpy inputs and outputs (host memory: the copies are H2D and D2H);
  - the floors: an idle torch.cuda.synchronize(), and the replay of a one-kernel torch CUDA graph;
  - the replay's device time (`kiln bench`, CUDA events around the replay only).
The difference between kiln_executor_run and the replay's device time is what the runtime adds
per call (input and output copies, the real-size copy, checks, the stream synchronisation).
Needs a GPU and torch. Exit status: 0 when every measurement ran, 1 otherwise, 3 without a GPU.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import kiln_env  # noqa: E402


def median_us(fn, sync, iters):
    for _ in range(min(200, iters)):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(kiln, torch, np, cache, size, iters):
    from kiln import _lib
    model = kiln.load(str(cache))
    ex = model.executor("FULL")
    rng = np.random.default_rng(0)
    feeds = {}
    for t in ex.inputs:
        shape = t.shape(size)
        if "mask" in t.name:
            a = np.ones(shape, dtype=t.dtype)
        elif np.issubdtype(t.dtype, np.integer):
            a = rng.integers(0, 50, shape).astype(t.dtype)
        else:
            a = rng.standard_normal(shape).astype(t.dtype)
        feeds[t.name] = torch.from_numpy(a).cuda()
    outs = {t.name: torch.from_numpy(np.zeros(t.shape(size), dtype=t.dtype)).cuda()
            for t in ex.outputs}
    bound = ex.bind(feeds, outputs=outs)
    unsynced = ex.bind(feeds, outputs=outs, sync_streams=False)
    ordered = ex.bind(feeds, outputs=outs, stream=torch.cuda.current_stream())
    host = ex.bind({k: v.cpu().numpy() for k, v in feeds.items()})
    run = _lib.load_library().kiln_executor_run
    handle = ex._live()

    def raw():
        _lib.check(run(handle, bound._c_in, len(bound._c_in), bound._c_out, len(bound._c_out)))

    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.zeros(4, device="cuda")
        with torch.cuda.graph(graph):
            x.add_(1)
    sync = torch.cuda.synchronize
    return {
        "bound call, synchronous": median_us(bound, sync, iters),
        "bound call, no stream sync": median_us(unsynced, sync, iters),
        "bound call on torch's stream (async)": median_us(ordered, sync, iters),  # model_bench
        "kiln_executor_run (ctypes)": median_us(raw, sync, iters),
        "bound call, host numpy I/O": median_us(host, sync, iters),
        "idle torch.cuda.synchronize": median_us(lambda: None, sync, iters),
        "torch graph replay, 1 kernel": median_us(graph.replay, sync, iters),
    }


def device_us(kiln_bin, cache, sizes, iters):
    out = subprocess.run([kiln_bin, "bench", str(cache), "--mode", "FULL", "--sizes",
                          ",".join(map(str, sizes)), "--iters", str(iters), "--json"],
                         capture_output=True, text=True, env=kiln_env(kiln_bin), check=True)
    runs = json.loads(out.stdout)["modes"][0]["runs"]
    return {r["size"]: r["device_ms"]["median"] * 1e3 for r in runs}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kiln", default=str(ROOT / ".stage/bin/kiln"))
    p.add_argument("--model", default=str(ROOT / "tests/models/exported/gpt2_ts17_eager"),
                   help="a folder with model.onnx and kiln.yaml (default %(default)s)")
    p.add_argument("--sizes", default="1,8", help="request sizes (default %(default)s)")
    p.add_argument("--iters", type=int, default=2000, help="timed calls per median")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    try:
        import numpy as np
        import torch
        import kiln
    except ImportError as e:
        print(f"call_overhead: {e}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("call_overhead: no CUDA GPU", file=sys.stderr)
        return 3
    model = Path(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        subprocess.run([a.kiln, "-q", "compile", str(model / "model.onnx"), "-c",
                        str(model / "kiln.yaml"), "-o", str(cache)], check=True,
                       env=kiln_env(a.kiln))
        dev = device_us(a.kiln, cache, sizes, a.iters)
        for s in sizes:
            rows = measure(kiln, torch, np, cache, s, a.iters)
            rows["replay device time (kiln bench)"] = dev[s]
            print(f"== {model.name}, size {s} (median µs)")
            for k, v in rows.items():
                print(f"  {k:38s} {v:8.1f}")
            print(f"  {'runtime per call beyond the replay':38s} "
                  f"{rows['kiln_executor_run (ctypes)'] - dev[s]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
