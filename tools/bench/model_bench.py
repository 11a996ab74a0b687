#!/usr/bin/env python3
"""Three-model benchmark: kiln FULL / PIECEWISE / NONE against PyTorch eager and torch.compile
(reduce-overhead, max-autotune), same GPU, same process, outputs checked.

    python3 tools/bench/model_bench.py [--kiln .stage/bin/kiln] [--out /tmp/kiln_model_bench]
        [--models bert,gpt2,llama] [--json-out FILE] [--no-autotune] [--tiny] ...
    .stage/run_gpu.sh models          (the same, from the staged tree on the GPU machine)

Models (Hugging Face transformers, random weights, seed 0, SDPA attention; fp16 on the GPU):
  bert   BertModel (BERT-base: 768 wide, 12 layers, 12 heads, vocabulary 30522, no pooler),
         sequence 128, at batch 1 / 8 / 32: the batch is kiln's size; output last_hidden_state
  gpt2   GPT2LMHeadModel (GPT-2 small + LM head), no KV cache, batch 1, at 1 / 128 / 512
         tokens: the sequence is kiln's size; output logits
  llama  LlamaForCausalLM (hidden 2048, 16 layers, 32 heads / 8 KV heads, MLP 5632, vocabulary
         32000, untied), no KV cache, batch 1, at 1 / 128 / 512 tokens; output logits
Per model, in one process:
  1. export with the TorchScript exporter (opset 17) in fp32, dynamic batch and sequence axes
     (inputs input_ids and attention_mask, fed all ones), into --out DIR/<model>/,
     reused when its export.json matches (model, config, seed, torch/transformers versions);
  2. kiln.yaml (size_dim the dynamic dim, dims fixing the other, max_size the largest size,
     precision fp16, targets [sm_90], mode FULL, compile and capture sizes = the measured sizes,
     autotune on unless --no-autotune) and `kiln compile` (its time from the CLI's output);
  3. kiln through the Python package (python/kiln): load, then one executor per mode (FULL,
     PIECEWISE, NONE), device tensors in and out (torch CUDA tensors), warm-up, then timed;
  4. PyTorch eager (the reference outputs), torch.compile(mode="reduce-overhead") and
     torch.compile(mode="max-autotune") (the latter after all models' other systems, as far as
     --time-budget allows; skipped ones are recorded);
  5. at every size each system's output is checked: torch.compile's against eager's, kiln's
     against the fp32 model's (computed before the model is cast to fp16), held to PyTorch fp16
     eager's own error against that same fp32 reference: max|got - ref| / max|ref| <=
     max(--tol (2e-2), 2 x eager fp16's), and for LM logits the argmax agrees on >=
     min(--argmax-min (0.9), eager fp16's agreement - 0.02) of the positions (a position whose
     two largest reference logits are within --tie-margin x max|ref| of each other counts as
     agreeing). A size failing the check is WRONG and its time does not count;
  6. JSON (--json-out, default $OUT/model_bench.json, else DIR/model_bench.json), a markdown
     table per model (beside the JSON, its name with .md; also printed) and a PNG plot
     (model_bench.png: latency vs size, log axes, one line per system, one panel per model;
     matplotlib when importable, else a built-in rasteriser), all rewritten after every step.
Timing: every system alike — host wall clock around one call followed by
torch.cuda.synchronize(), median of --repeats after --warmup calls. kiln's calls are ordered on
torch's current stream (kiln.Executor.bind(..., stream=...), kiln_executor_run_async): like a
torch.compile call, each returns once its work is enqueued, and the synchronize waits for it.
Exit status: 0 when every system ran and checked at every size; 1 when anything failed, was WRONG
or was skipped (each listed); 2 usage; 3 no CUDA GPU (without --tiny).

--tiny: 2-layer, hidden-64 versions of the three models; runs on the CPU where there is no GPU
(export, kiln compile without autotuning, the torch paths and the plot; kiln's runs need a GPU
and are skipped with a note).
"""

import argparse
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (Run, add_budget_args, log, model_list, reuse_export,  # noqa: E402
                          run_kiln, tail)
from model_bench_report import (COMPILE_MODES, KILN_MODES, SIZE_LABEL, SIZES,  # noqa: E402
                                TIMING_NOTE, check_text, merge, write_outputs)

SEED = 0
EXPORTER = "ts17"
BERT_SEQ = 128

# name: (transformers class, config class, config keywords, tiny config keywords, kind)
MODELS = {
    "bert": ("BertModel", "BertConfig",
             dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, vocab_size=30522, max_position_embeddings=512),
             dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=128, vocab_size=512, max_position_embeddings=512),
             "encoder"),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config",
             dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
             dict(n_embd=64, n_layer=2, n_head=2, vocab_size=512, n_positions=1024,
                  bos_token_id=1, eos_token_id=2),
             "lm"),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                   num_key_value_heads=8, intermediate_size=5632, vocab_size=32000,
                   max_position_embeddings=2048, tie_word_embeddings=False),
              dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                   max_position_embeddings=2048, tie_word_embeddings=False),
              "lm"),
}


# ---------------------------------------------------------------- models and export


def build_model(name, tiny, device):
    import torch
    import transformers as tf
    cls, cfg_cls, full, small, kind = MODELS[name]
    kw = dict(small if tiny else full)
    extra = {} if kind == "encoder" else {"use_cache": False}
    config = getattr(tf, cfg_cls)(attn_implementation="sdpa", **extra, **kw)
    make = (lambda: getattr(tf, cls)(config, add_pooling_layer=False)) if kind == "encoder" \
        else (lambda: getattr(tf, cls)(config))
    torch.manual_seed(SEED)
    try:  # initialised where it runs (the 0.85B model initialises in ~1 s on a GPU)
        with torch.device(device):
            model = make()
    except Exception:  # noqa: BLE001  (then on the CPU, and moved)
        torch.manual_seed(SEED)
        model = make().to(device)
    model = model.eval()
    model.requires_grad_(False)
    return model, kw


def input_names(name):
    """Every export takes an attention_mask (fed all ones): without one, transformers 5's
    decoders look for packed sequences with aten::diff, which the TorchScript exporter lacks."""
    return ["input_ids", "attention_mask"]


def output_name(name):
    return "last_hidden_state" if MODELS[name][4] == "encoder" else "logits"


def make_wrapper(model, names):
    import torch

    class FirstOutput(torch.nn.Module):
        """The model's first output (last_hidden_state or logits) from the named inputs."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None):
            kw = {"attention_mask": attention_mask} if "attention_mask" in names else {}
            return self.model(input_ids=input_ids, return_dict=False, **kw)[0]

    return FirstOutput().eval()


def make_inputs(name, model, size, device):
    """The inputs at a size: random ids (seeded by the size), attention_mask all ones."""
    import torch
    vocab = model.config.vocab_size
    shape = (size, BERT_SEQ) if name == "bert" else (1, size)
    g = torch.Generator().manual_seed(SEED + 1000 + size)
    ids = torch.randint(3, vocab, shape, generator=g).to(device)
    feeds = {"input_ids": ids}
    if "attention_mask" in input_names(name):
        feeds["attention_mask"] = torch.ones(shape, dtype=torch.long, device=device)
    return feeds


def export_model(run, name, model, kw, folder):
    """The model as ONNX in folder/model.onnx, reused when export.json matches."""
    import torch
    import transformers
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    info_path = folder / "export.json"
    names = input_names(name)
    key = {"model": name, "config": kw, "seed": SEED, "exporter": EXPORTER, "dtype": "fp32",
           "inputs": names, "device": str(next(model.parameters()).device),
           "torch": torch.__version__, "transformers": transformers.__version__}
    reused = reuse_export(folder, key, keep=(".log", ".json"))
    if reused:
        return reused
    t0 = time.monotonic()
    wrapper = make_wrapper(model, names)
    # Example inputs of batch 2 and sequence 16, so that neither axis is traced as 1 or 128.
    g = torch.Generator().manual_seed(SEED)
    dev = next(model.parameters()).device
    ids = torch.randint(3, model.config.vocab_size, (2, 16), generator=g).to(dev)
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes[output_name(name)] = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(wrapper, tuple(example[n] for n in names), str(path), dynamo=False,
                          opset_version=17, input_names=names, output_names=[output_name(name)],
                          dynamic_axes=axes)
    seconds = time.monotonic() - t0
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    ids = next(i for i in m.graph.input if i.name == "input_ids")
    dims = [d.dim_param or d.dim_value for d in ids.type.tensor_type.shape.dim]
    if len(dims) != 2 or not all(isinstance(d, str) and d for d in dims):
        raise RuntimeError(f"input_ids dims are {dims}, not two symbolic dims")
    files = sorted(f.name for f in folder.iterdir() if f.is_file())
    info = {"key": key, "ok": True, "path": str(path), "seconds": round(seconds, 1),
            "input_ids_dims": dims, "model_bytes": path.stat().st_size,
            "external_data_files": len([f for f in files if f not in
                                        ("model.onnx", "export.json", "kiln.yaml")
                                        and not f.endswith((".log", ".json"))])}
    del m
    info_path.write_text(json.dumps(info, indent=1))
    return dict(info, reused=False)


# ---------------------------------------------------------------- kiln compile


def kiln_yaml(run, name, dims, autotune):
    a = run.args
    batch_dim, seq_dim = dims
    sizes = SIZES[name]
    if name == "bert":
        size_dim, fixed = batch_dim, f"{{{seq_dim}: {BERT_SEQ}}}"
    else:
        size_dim, fixed = seq_dim, f"{{{batch_dim}: 1}}"
    return "\n".join([
        f"size_dim: {size_dim}",
        f"dims: {fixed}",
        f"max_size: {max(sizes)}",
        "precision: fp16",
        "targets: [sm_90]",
        "compilation:",
        "  mode: FULL",
        f"  compile_sizes: [{', '.join(map(str, sizes))}]",
        f"  cudagraph_capture_sizes: [{', '.join(map(str, sizes))}]",
        f"autotune: {{enabled: {'on' if autotune else 'off'}, budget_s: {a.autotune_budget_s}}}",
        ""])


def kiln_compile(run, name, folder, dims, autotune, logs):
    """`kiln compile`; its compile time from the CLI (kept beside the cache for cache hits)."""
    from kiln.compile import artifact_from_output
    a = run.args
    yaml = kiln_yaml(run, name, dims, autotune)
    cfg = folder / "kiln.yaml"
    cfg.write_text(yaml)
    cache = folder / "cache"
    cmd = [a.kiln, "compile", str(folder / "model.onnx"), "-c", str(cfg), "-o", str(cache)]
    log(f"[{name}] kiln compile (fp16, sizes {SIZES[name]}, autotune "
        f"{'on' if autotune else 'off'}) ...")
    log_path = logs / f"models_{name}_kiln_compile.log"
    rc, out, err, wall = run_kiln(run, cmd, run.timeout(a.kiln_compile_timeout), log_path)
    res = {"cmd": " ".join(cmd), "yaml": yaml, "rc": rc, "wall_s": round(wall, 2),
           "log": str(log_path), "autotune": autotune}
    if rc != 0:
        why = f"timed out after {wall:.0f} s" if rc is None else f"rc={rc}"
        res.update(ok=False, error=f"{why}: {tail(err or out)}")
        run.fail(f"{name}: kiln compile {why}: {tail(err or out, lines=3, chars=400)}")
        return res
    art = artifact_from_output(out + "\n" + err)
    res["artifact"] = art
    times_path = folder / "kiln_compile_times.json"
    try:
        times = json.loads(times_path.read_text())
    except (OSError, ValueError):
        times = {}
    m = re.search(r"^compiled .* in ([0-9.]+) s", out, re.M)
    if m:
        res.update(compile_s=float(m.group(1)), cached=False)
        times[os.path.basename(art or "")] = float(m.group(1))
        times_path.write_text(json.dumps(times, indent=1))
    elif "cache hit" in out + err:
        res.update(cached=True, compile_s=times.get(os.path.basename(art or "")))
    res["ok"] = art is not None
    if art is None:
        res["error"] = "no artifact directory in kiln compile's output"
        run.fail(f"{name}: kiln compile printed no artifact directory")
    else:
        how = (f"cache hit (compiled earlier in {res['compile_s']} s)" if res.get("cached")
               else f"compiled in {res.get('compile_s')} s")
        log(f"[{name}] kiln compile: {how}; wall {wall:.1f} s")
    return res


# ---------------------------------------------------------------- timing and checks


class Timer:
    """Host wall clock around fn() + synchronize, for every system alike."""

    def __init__(self, cuda):
        import torch
        self.torch, self.cuda = torch, cuda

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def median_ms(self, fn, warmup, repeats):
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), min(times)


def check(run, got, ref, lm):
    """got vs the eager reference: the relative max error, and for logits the argmax."""
    import torch
    a = run.args
    g, r = got.float(), ref.float()
    finite = bool(torch.isfinite(g).all())
    diff = (g - r).abs().max().item()
    scale = r.abs().max().item()
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
    res = {"max_abs_diff": diff, "ref_max_abs": scale, "rel": rel, "finite": finite}
    ok = finite and rel <= a.tol
    if lm:
        v = r.shape[-1]
        r2, g2 = r.reshape(-1, v), g.reshape(-1, v)
        same = r2.argmax(-1) == g2.argmax(-1)
        top2 = r2.topk(2, dim=-1).values
        tie = (top2[:, 0] - top2[:, 1]) <= a.tie_margin * scale
        res["argmax_exact"] = same.float().mean().item()
        res["argmax_agree"] = (same | tie).float().mean().item()
        res["near_ties"] = int(tie.sum().item())
        res["positions"] = int(r2.shape[0])
        ok = ok and res["argmax_agree"] >= a.argmax_min
    res["ok"] = bool(ok)
    return res




def fp32_reference(run, st, model):
    """The fp32 model's outputs at every size (st["ref32"]): what fp16 results are judged by."""
    import torch
    st["ref32"] = {}
    fwd = torch_forward(st["name"], model)
    for s in SIZES[st["name"]]:
        try:
            with torch.no_grad():
                st["ref32"][s] = fwd(**st["feeds"][s]).float().clone()
        except Exception as ex:  # noqa: BLE001  (OOM: the fp16 checks fall back to eager fp16)
            run.note(f"{st['name']}: fp32 reference at size {s}: {type(ex).__name__}: "
                     f"{str(ex)[:200]}")
        finally:
            gc.collect()


def check_fp16(run, got, st, s, lm):
    """kiln's fp16 output at size s against the fp32 reference, held to PyTorch fp16 eager's own
    error there: max|got - ref32| / max|ref32| <= max(--tol, 2 x eager's), and for logits the
    argmax agrees on at least min(--argmax-min, eager's agreement - 0.02) of the positions.
    Without an fp32 reference: check() against fp16 eager."""
    if s not in st.get("ref32", {}):
        return check(run, got, st["ref"][s], lm)
    a = run.args
    ref32 = st["ref32"][s]
    mine = check(run, got, ref32, lm)
    eager = check(run, st["ref"][s], ref32, lm)
    tol = max(a.tol, 2 * eager["rel"])
    ok = mine["finite"] and mine["rel"] <= tol
    if lm:
        need = min(a.argmax_min, eager["argmax_agree"] - 0.02)
        ok = ok and mine["argmax_agree"] >= need
        mine["argmax_needed"] = need
    mine.update(reference="torch fp32", tol=tol, eager_fp16_rel=eager["rel"],
                eager_fp16_argmax_exact=eager.get("argmax_exact"), ok=bool(ok))
    return mine


# ---------------------------------------------------------------- PyTorch


def torch_forward(name, model):
    """fn(feeds) -> the output tensor (last_hidden_state or logits)."""
    if MODELS[name][4] == "encoder":
        def fwd(input_ids, attention_mask):
            return model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    else:
        def fwd(input_ids, attention_mask):
            return model(input_ids=input_ids, attention_mask=attention_mask,
                         use_cache=False).logits
    return fwd


def peak_begin(cuda):
    import torch
    if not cuda:
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def peak_end(cuda, before, weight_bytes):
    """The model's weights plus the most memory allocated on top of what was there before the
    system's first call at this size (for torch.compile: its peak while timed, so CUDA graph
    pools and static buffers count, compile-time scratch does not)."""
    import torch
    if not cuda:
        return None
    torch.cuda.synchronize()
    return weight_bytes + max(0, torch.cuda.max_memory_allocated() - before)


def torch_eager(run, st):
    """Eager at every size: the reference outputs (st["ref"]) and the timings."""
    import torch
    a, name = run.args, st["name"]
    res = st["systems"]["torch_eager"] = {"sizes": {}}
    fwd = torch_forward(name, st["model"])
    for s in SIZES[name]:
        e = res["sizes"][str(s)] = {}
        try:
            feeds = st["feeds"][s]
            with torch.no_grad():
                before = peak_begin(st["cuda"])
                st["ref"][s] = fwd(**feeds).clone()
                ms, best = st["timer"].median_ms(lambda: fwd(**feeds), a.warmup, a.repeats)
                e.update(ms=ms, min_ms=best, ok=True,
                         peak_mem_bytes=peak_end(st["cuda"], before, st["weight_bytes"]))
            log(f"[{name}] torch eager size {s}: {ms:.3f} ms")
        except Exception as ex:  # noqa: BLE001  (OOM and the like: recorded, the run goes on)
            e["error"] = f"{type(ex).__name__}: {str(ex)[:500]}"
            run.fail(f"{name}: torch eager size {s}: {type(ex).__name__}: {str(ex)[:200]}")
        finally:
            gc.collect()


def torch_compiled(run, st, key):
    """torch.compile(mode) at every size: automatic dynamic shapes (the first size compiles
    static, the next recompiles with a dynamic size that the last reuses), CUDA graphs per
    size; first calls timed, outputs checked against eager."""
    import torch
    a, name, mode = run.args, st["name"], COMPILE_MODES[key]
    res = st["systems"][key] = {"mode": mode, "sizes": {}}
    lm = MODELS[name][4] == "lm"
    fwd = torch_forward(name, st["model"])
    torch._dynamo.reset()
    cfg = torch._dynamo.config
    for attr in ("recompile_limit", "cache_size_limit"):  # the name changed across versions
        if hasattr(cfg, attr):
            setattr(cfg, attr, max(getattr(cfg, attr), 64))
    fullgraph = True
    compiled = torch.compile(fwd, mode=mode, fullgraph=True)
    broken = None
    for s in SIZES[name]:
        e = res["sizes"][str(s)] = {}
        if broken:
            e["skipped"] = broken
            run.fail(f"{name}: {key} size {s} skipped: {broken}")
            continue
        if run.left_s() < a.compile_reserve_s:
            e["skipped"] = f"time budget ({run.left_s():.0f} s left)"
            run.fail(f"{name}: {key} size {s} skipped: time budget")
            continue
        if s not in st["ref"]:
            e["skipped"] = "no eager reference at this size"
            run.fail(f"{name}: {key} size {s} skipped: no eager reference")
            continue
        feeds = st["feeds"][s]

        def call():
            if st["cuda"]:
                torch.compiler.cudagraph_mark_step_begin()
            return compiled(**feeds)

        try:
            with torch.no_grad():
                before = peak_begin(st["cuda"])
                t0 = time.monotonic()
                try:
                    call()
                except Exception as ex:  # noqa: BLE001
                    if not fullgraph:
                        raise
                    log(f"[{name}] {mode}: fullgraph compile failed ({type(ex).__name__}: "
                        f"{str(ex)[:200]}); compiling with graph breaks")
                    fullgraph = False
                    torch._dynamo.reset()
                    compiled = torch.compile(fwd, mode=mode, fullgraph=False)
                    t0 = time.monotonic()
                    call()
                first = time.monotonic() - t0
                call()  # the second call records the CUDA graph (reduce-overhead)
                out2 = call().clone()
                c = check(run, out2, st["ref"][s], lm)
                if st["cuda"]:  # compile-time scratch (autotuning) left out; graph pools stay in
                    torch.cuda.reset_peak_memory_stats()
                ms, best = st["timer"].median_ms(call, a.warmup, a.repeats)
                e.update(ms=ms, min_ms=best, first_call_s=round(first, 1), fullgraph=fullgraph,
                         check=c, ok=c["ok"],
                         peak_mem_bytes=peak_end(st["cuda"], before, st["weight_bytes"]))
            del out2
            if not c["ok"]:
                run.fail(f"{name}: {key} size {s} WRONG: {check_text(c)}")
            log(f"[{name}] torch.compile {mode} size {s}: {ms:.3f} ms (first call {first:.1f} s, "
                f"fullgraph={fullgraph}, {check_text(c)})")
        except Exception as ex:  # noqa: BLE001  (compile errors, OOM: recorded, the run goes on)
            e["error"] = f"{type(ex).__name__}: {str(ex)[:500]}"
            e["trace"] = traceback.format_exc()[-1500:]
            run.fail(f"{name}: {key} size {s}: {type(ex).__name__}: {str(ex)[:200]}")
            if "out of memory" not in str(ex).lower():
                broken = f"torch.compile {mode} failed at size {s}"
        finally:
            gc.collect()
        run.save()
    del compiled
    torch._dynamo.reset()
    gc.collect()
    if st["cuda"]:
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- kiln runs


def kiln_runs(run, st):
    """Load the artifact, then per mode: an executor (capture), every size with device tensors
    in and out (checked against eager, timed), the executor closed. Memory: the drop in the
    device's free memory (cudaMemGetInfo through torch.cuda.mem_get_info) from before the load,
    at its lowest while the mode ran."""
    import torch
    import kiln
    a, name = run.args, st["name"]
    lm = MODELS[name][4] == "lm"
    k = st["kiln"]
    art = st["kiln_compile"]["artifact"]
    out_name = output_name(name)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    outs = {}
    model = None
    try:
        free0 = torch.cuda.mem_get_info()[0]
        model = kiln.load(art)
        free_loaded = torch.cuda.mem_get_info()[0]
        k.update(load_s=round(model.load_seconds, 3), load_mem_bytes=free0 - free_loaded,
                 inputs=[t.describe() for t in model.inputs],
                 outputs=[t.describe() for t in model.outputs])
        log(f"[{name}] kiln load: {model.load_seconds:.2f} s, "
            f"{(free0 - free_loaded) / 2**20:.0f} MiB")
        info = model.output(out_name)
        dtype = getattr(torch, info.dtype_name)
        for s in SIZES[name]:
            outs[s] = torch.empty(info.shape(s), dtype=dtype, device="cuda")
        # The output buffers are torch's: count their drop in free memory out of kiln's.
        free0 -= free_loaded - torch.cuda.mem_get_info()[0]
    except Exception as ex:  # noqa: BLE001
        k["error"] = f"{type(ex).__name__}: {str(ex)[:800]}"
        run.fail(f"{name}: kiln load: {str(ex)[:300]}")
        for mode in a.kiln_modes:
            st["systems"][f"kiln_{mode}"] = {"error": "kiln load failed", "sizes": {}}
        if model is not None:
            model.close()
        return
    for mode in a.kiln_modes:
        res = st["systems"][f"kiln_{mode}"] = {"sizes": {}}
        ex = None
        try:
            ex = model.executor(mode)
            low = torch.cuda.mem_get_info()[0]
            res["create_s"] = round(ex.create_seconds, 3)
            log(f"[{name}] kiln {mode}: executor created (capture) in {ex.create_seconds:.2f} s")
            for s in SIZES[name]:
                e = res["sizes"][str(s)] = {}
                try:
                    feeds = {t.name: st["feeds"][s][t.name] for t in model.inputs
                             if t.name in st["feeds"][s]}  # missing ones: kiln's own message
                    out = outs[s]
                    out.fill_(float("nan"))
                    bound = ex.bind(feeds, outputs={out_name: out},
                                    stream=torch.cuda.current_stream())
                    bound()
                    c = check_fp16(run, out, st, s, lm) if s in st["ref"] else None
                    ms, best = st["timer"].median_ms(bound, a.warmup, a.repeats)
                    e.update(ms=ms, min_ms=best, check=c, ok=bool(c and c["ok"]))
                    if mode == "FULL":  # the unbound path: every call checked in Python
                        e["run_ms_unbound"], _ = st["timer"].median_ms(
                            lambda: ex.run(feeds, outputs={out_name: out}), 3,
                            max(5, a.repeats // 5))
                    low = min(low, torch.cuda.mem_get_info()[0])
                    if c is None:
                        e["ok"] = False
                        run.fail(f"{name}: kiln {mode} size {s}: no eager reference to check")
                    elif not c["ok"]:
                        run.fail(f"{name}: kiln {mode} size {s} WRONG: {check_text(c)}")
                    log(f"[{name}] kiln {mode} size {s}: {ms:.3f} ms ({check_text(c)})")
                except Exception as exc:  # noqa: BLE001
                    e["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
                    run.fail(f"{name}: kiln {mode} size {s}: {str(exc)[:300]}")
            res["mem_bytes"] = free0 - low
        except Exception as exc:  # noqa: BLE001  (capture failures, OOM)
            res["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
            run.fail(f"{name}: kiln {mode} executor: {str(exc)[:300]}")
        finally:
            if ex is not None:
                ex.close()
            gc.collect()
        run.save()
    model.close()
    del outs
    torch.cuda.empty_cache()


# ---------------------------------------------------------------- tables and plot




# ---------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=".stage/bin/kiln", help="the kiln CLI (default %(default)s)")
    p.add_argument("--kiln-library", default=None,
                   help="libkiln_runtime.so (default: $KILN_LIBRARY, else beside the CLI: "
                        "../lib/ of a staged tree, ../runtime/ of a build)")
    p.add_argument("--out", default="/tmp/kiln_model_bench",
                   help="exports and kiln caches, reused across runs (default %(default)s)")
    p.add_argument("--json-out", default=None,
                   help="the JSON report (default $OUT/model_bench.json, else OUT_DIR/...); the "
                        "markdown (.md) and plot (.png) go beside it")
    p.add_argument("--models", default="bert,gpt2,llama", help="comma list of bert, gpt2, llama")
    p.add_argument("--kiln-modes", default=",".join(KILN_MODES),
                   help="comma list of kiln graph modes to time (default %(default)s)")
    p.add_argument("--no-autotune", action="store_true", help="kiln.yaml autotune: off")
    p.add_argument("--autotune-budget-s", type=int, default=45,
                   help="kiln.yaml autotune.budget_s per model (default %(default)s)")
    p.add_argument("--no-kiln", action="store_true", help="skip kiln (compile and runs)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip both torch.compile modes")
    p.add_argument("--no-max-autotune", action="store_true",
                   help="skip torch.compile(mode='max-autotune')")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=50, help="timed calls per size (median)")
    p.add_argument("--tol", type=float, default=2e-2,
                   help="max|got - ref| / max|ref| allowed (default %(default)s)")
    p.add_argument("--argmax-min", type=float, default=0.9,
                   help="LM logits: fraction of positions whose argmax must agree (default "
                        "%(default)s)")
    p.add_argument("--tie-margin", type=float, default=2e-3,
                   help="LM logits: a position whose top-2 reference logits are within this x "
                        "max|ref| counts as agreeing (default %(default)s)")
    p.add_argument("--kiln-compile-timeout", type=int, default=300, help="seconds")
    add_budget_args(p, "size")
    p.add_argument("--plot-backend", default="auto", choices=["auto", "matplotlib", "builtin"])
    p.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                   help="write one report, table and plot from earlier runs' JSON (no GPU)")
    a = p.parse_args(argv)
    a.models = model_list(p, a.models, MODELS)
    if not a.models:
        p.error("--models: none given")
    a.kiln_modes = [m.strip().upper() for m in a.kiln_modes.split(",") if m.strip()]
    for m in a.kiln_modes:
        if m not in KILN_MODES:
            p.error(f"--kiln-modes: '{m}' is not one of {', '.join(KILN_MODES)}")
    if a.warmup < 0 or a.repeats < 1:
        p.error("--warmup >= 0 and --repeats >= 1")
    if a.json_out is None:
        a.json_out = os.path.join(os.environ["OUT"] if os.environ.get("OUT") else a.out,
                                  "model_bench.json")
    return a


def use_library(args):
    """Points the kiln package at the runtime library that goes with --kiln."""
    if args.kiln_library:
        os.environ["KILN_LIBRARY"] = args.kiln_library
    elif not os.environ.get("KILN_LIBRARY"):
        cli_dir = Path(args.kiln).resolve().parent
        for lib in (cli_dir.parent / "lib" / "libkiln_runtime.so",
                    cli_dir.parent / "runtime" / "libkiln_runtime.so"):
            if lib.is_file():
                os.environ["KILN_LIBRARY"] = str(lib)
                break
    sys.path.insert(0, str(REPO / "python"))


def run_model(run, name, states):
    """Phase 1 of a model: build, export, kiln compile + runs, eager, reduce-overhead."""
    import torch
    a, rep = run.args, run.report
    cuda = rep["cuda"]
    device = torch.device("cuda" if cuda else "cpu")
    m = rep["models"][name] = {"sizes": SIZES[name], "size_is": SIZE_LABEL[name],
                               "systems": {}, "kiln": {}}
    st = {"name": name, "cuda": cuda, "systems": m["systems"], "kiln": m["kiln"], "ref": {},
          "timer": Timer(cuda)}
    t0 = time.monotonic()
    model, kw = build_model(name, a.tiny, device)
    m["config"] = kw
    n_params = sum(p.numel() for p in model.parameters())
    m["params"] = n_params
    st["weight_bytes"] = 2 * n_params
    log(f"[{name}] {n_params / 1e6:.1f} M parameters, built in {time.monotonic() - t0:.1f} s")
    folder = Path(a.out) / (name + ("_tiny" if a.tiny else ""))
    try:
        exp = m["export"] = export_model(run, name, model, kw, folder)
        how = "reused" if exp["reused"] else f"done in {exp['seconds']:.1f} s"
        log(f"[{name}] export: {how} ({exp['model_bytes'] / 2**20:.0f} MiB model.onnx, "
            f"{exp['external_data_files']} external data files), input_ids dims "
            f"{exp['input_ids_dims']}")
    except Exception as ex:  # noqa: BLE001
        m["export"] = {"ok": False, "error": f"{type(ex).__name__}: {str(ex)[:1500]}",
                       "trace": traceback.format_exc()[-2000:]}
        run.fail(f"{name}: export: {type(ex).__name__}: {str(ex)[:300]}")
    st["feeds"] = {s: make_inputs(name, model, s, device) for s in SIZES[name]}
    fp32_reference(run, st, model)
    model.half()  # the same weights kiln's fp16 precision rounds to
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    st["model"] = model
    run.save()
    if not a.no_kiln and m["export"].get("ok"):
        autotune = not a.no_autotune and cuda
        if not a.no_autotune and not cuda:
            run.note(f"{name}: no GPU here, so kiln compiles without autotuning")
        st["kiln_compile"] = m["kiln_compile"] = kiln_compile(
            run, name, folder, m["export"]["input_ids_dims"], autotune, Path(a.json_out).parent)
        run.save()
    torch_eager(run, st)
    run.save()
    if st.get("kiln_compile", {}).get("ok"):
        import kiln
        if not cuda:
            run.note(f"{name}: kiln runs skipped: no CUDA GPU here")
            for mode in a.kiln_modes:
                m["systems"][f"kiln_{mode}"] = {"skipped": "no CUDA GPU", "sizes": {}}
        elif not kiln.device_available():
            run.fail(f"{name}: kiln runs: {kiln.device_error()}")
            for mode in a.kiln_modes:
                m["systems"][f"kiln_{mode}"] = {"error": kiln.device_error(), "sizes": {}}
        else:
            kiln_runs(run, st)
    elif not a.no_kiln:
        for mode in a.kiln_modes:
            m["systems"][f"kiln_{mode}"] = {"error": "no kiln artifact", "sizes": {}}
    run.save()
    if not a.no_torch_compile:
        torch_compiled(run, st, "torch_compile_reduce_overhead")
    states[name] = st




def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.merge:
        return merge(args)
    import torch
    import transformers
    import onnx
    use_library(args)
    run = Run(args, "tools/bench/model_bench.py", timing=TIMING_NOTE)
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        log("model_bench: no CUDA GPU here (torch.cuda.is_available() is False); --tiny runs "
            "on the CPU")
        return 3
    if not cuda:
        args.warmup, args.repeats = min(args.warmup, 2), min(args.repeats, 5)
    rep = run.report
    rep["cuda"] = cuda
    rep["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                       "transformers": transformers.__version__, "onnx": onnx.__version__}
    rep["device"] = torch.cuda.get_device_name() if cuda else "cpu"
    rep["settings"] = {"models": args.models, "sizes": {n: SIZES[n] for n in args.models},
                       "bert_seq": BERT_SEQ, "kiln_modes": args.kiln_modes,
                       "autotune": not args.no_autotune,
                       "autotune_budget_s": args.autotune_budget_s, "tiny": args.tiny,
                       "export_dtype": "fp32", "torch_dtype": "fp16", "kiln_precision": "fp16",
                       "warmup": args.warmup, "repeats": args.repeats, "tol": args.tol,
                       "argmax_min": args.argmax_min, "tie_margin": args.tie_margin,
                       "time_budget_s": args.time_budget, "kiln": args.kiln,
                       "kiln_library": os.environ.get("KILN_LIBRARY")}
    log(f"model_bench on {rep['device']}: torch {torch.__version__}, transformers "
        f"{transformers.__version__}; models {','.join(args.models)}; budget "
        f"{args.time_budget:.0f} s")
    log(f"timing: {TIMING_NOTE}")
    run.save()
    states = {}
    # Phase 1: every model's export, kiln, eager and reduce-overhead.
    for name in args.models:
        if run.left_s() < 30:
            rep["models"][name] = {"skipped": "time budget", "systems": {}}
            run.fail(f"{name}: skipped: time budget")
            continue
        try:
            run_model(run, name, states)
        except Exception as ex:  # noqa: BLE001  (building the model, and the like)
            m = rep["models"].setdefault(name, {"systems": {}})
            m["error"] = f"{type(ex).__name__}: {str(ex)[:1500]}"
            m["trace"] = traceback.format_exc()[-2000:]
            run.fail(f"{name}: {type(ex).__name__}: {str(ex)[:300]}")
        write_outputs(run)
    # Phase 2: max-autotune, as far as the budget goes.
    for name in args.models:
        st = states.get(name)
        if st is None or args.no_torch_compile or args.no_max_autotune:
            continue
        try:
            torch_compiled(run, st, "torch_compile_max_autotune")
        except Exception as ex:  # noqa: BLE001
            run.fail(f"{name}: max-autotune: {type(ex).__name__}: {str(ex)[:300]}")
        write_outputs(run)
    for st in states.values():
        st.pop("model", None)
    states.clear()
    gc.collect()
    tables = write_outputs(run)
    log("================ model_bench ================")
    log(f"timing: {TIMING_NOTE}")
    for t in tables:
        log(t)
        log("")
    parts = []
    for name, m in rep["models"].items():
        cells = []
        for r in m.get("rows", []):
            if r["kiln_over_compile"]:
                cells.append(f"{r['size']}: kiln {r['kiln_best_ms']:.3f} ms = "
                             f"{r['kiln_over_compile']:.2f}x torch.compile")
            elif r["kiln_best_ms"]:
                cells.append(f"{r['size']}: kiln {r['kiln_best_ms']:.3f} ms")
            else:
                cells.append(f"{r['size']}: kiln -")
        parts.append(f"{name}: " + "; ".join(cells))
    return run.finish("model_bench", parts,
                      f"json: {args.json_out}; table: {rep.get('markdown')}; plot: "
                      f"{rep.get('plot', {}).get('path', rep.get('plot'))}")


if __name__ == "__main__":
    sys.exit(main())
