#!/usr/bin/env python3
"""kiln's prefill attention kernel vs torch scaled_dot_product_attention, same GPU, same run.

    python3 tools/bench_attention.py build/tests/kernels/bench_attention
    python3 tools/bench_attention.py --sweep build/tests/kernels/bench_attention

fp16, causal, B = 4, H = 16, head_dim 64 and 128, sequence 512 / 1024 / 2048. Both sides are
timed the same way: CUDA events around each launch, 3 warm-up launches, median of 30, two input
sets rotated. Prints a table (config, kiln ms, torch ms, torch/kiln: >= 0.7 is the target) and a
correctness spot-check of kiln's output against SDPA in fp32 (seq 512, from `--dump`).

--sweep: the default tiles and every autotuner candidate (`bench_attention --sweep`), head dims
64 / 80 / 96 / 128: per (head dim, sequence) the configs fastest first, each with its time
relative to the default (< 1: faster).
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

B, H = 4, 16
REPEATS, SETS = 30, 2


def torch_ms(d, seq):
    gen = torch.Generator(device="cuda").manual_seed(d * 7919 + seq)
    sets = [[(torch.rand(B, H, seq, d, device="cuda", generator=gen) * 4 - 2).half()
             for _ in range(3)] for _ in range(SETS)]
    for i in range(3):
        F.scaled_dot_product_attention(*sets[i % SETS], is_causal=True)
    torch.cuda.synchronize()
    times = []
    for i in range(REPEATS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        F.scaled_dot_product_attention(*sets[i % SETS], is_causal=True)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def spot_check(dump, d, seq=512):
    def load(name):
        path = os.path.join(dump, f"{name}_d{d}_s{seq}.f16")
        return torch.from_file(path, size=B * H * seq * d, dtype=torch.float16).view(B, H, seq, d)
    q, k, v, o = (load(n).cuda() for n in "qkvo")
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    err = (o.float() - ref).abs()
    bad = (err > 1e-3 + 1e-2 * ref.abs()).sum().item()  # end-to-end fp16 tolerance, tests/README.md
    return err.max().item(), bad, err.numel()


def sweep(binary):
    out = subprocess.run([binary, "--sweep"], check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    groups = {}
    for r in rows:
        groups.setdefault((r["d"], r["seq"]), []).append(r)
    print(f"{'d':>4}{'seq':>6}  {'config':<34}{'ms':>10}{'TFLOPs':>9}{'vs default':>12}")
    for (d, seq), rs in sorted(groups.items()):
        base = next(r["ms"] for r in rs if r["default"])
        for r in sorted(rs, key=lambda r: r["ms"]):
            name = r["config"] + (" *" if r["default"] else "")
            print(f"{d:>4}{seq:>6}  {name:<34}{r['ms']:>10.4f}{r['tflops']:>9.1f}"
                  f"{r['ms'] / base:>12.3f}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--sweep":
        sweep(sys.argv[2])
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as dump:
        out = subprocess.run([sys.argv[1], "--dump", dump], check=True, capture_output=True,
                             text=True).stdout
        kiln = {(r["d"], r["seq"]): r for r in map(json.loads, out.splitlines())}
        print(f"{'config':<22}{'kiln ms':>10}{'torch ms':>10}{'torch/kiln':>12}{'kiln TFLOPs':>13}")
        for (d, seq), r in sorted(kiln.items()):
            t = torch_ms(d, seq)
            print(f"{f'd={d} seq={seq}':<22}{r['ms']:>10.4f}{t:>10.4f}{t / r['ms']:>12.2f}"
                  f"{r['tflops']:>13.1f}")
        for d in sorted({d for d, _ in kiln}):
            worst, bad, total = spot_check(dump, d)
            print(f"check d={d} seq=512: max |kiln - sdpa(fp32)| = {worst:.2e}, "
                  f"{bad} of {total} outside rtol 1e-2 / atol 1e-3")


if __name__ == "__main__":
    main()
