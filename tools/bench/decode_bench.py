#!/usr/bin/env python3
"""LLM decode benchmark (issue 14): kiln's generation decode step vs PyTorch, same GPU, same run.

    python3 tools/bench/decode_bench.py [--kiln .stage/bin/kiln] [--out /tmp/kiln_decode_bench]
        [--models gpt2,llama] [--batches 1,8,32,64] [--json-out FILE] [--autotune] [--tiny] ...
    .stage/run_gpu.sh decode          (the same, from the staged tree on the GPU machine)

For each model (random weights, fixed seed; GPT-2 small: 768 x 12 layers x 12 heads, vocabulary
50257; Llama 0.85B: hidden 2048, 16 layers, 32 heads / 8 KV heads, MLP 5632, vocabulary 32000,
untied embeddings), in one process:
  1. the KV-cache decoder is exported to ONNX as tests/models/export_kv_decoders.py does
     (TorchScript, opset 17, SDPA attention; its make_wrapper / export), in fp32 from the GPU:
     past 2 GB (Llama: 3.4 GB) the TorchScript exporter writes each weight as an external data
     file next to model.onnx, which kiln reads. (--export-dtype fp16 exports the .half() model
     instead; the TorchScript exporter then mixes in f32 Casts, and GPT-2's export is mistyped:
     onnxruntime and kiln reject it.) kiln's fp16 precision rounds the fp32 weights exactly as
     .half() does for the PyTorch side. Exports live in --out DIR/<model>/ and are reused when
     their export.json matches (model, config, seed, dtype, device, torch/transformers versions).
  2. kiln.yaml (fp16, max_size 64, capture sizes 1..64 and the same compile_sizes (kernels
     specialised per size, as a deployment declares them; --no-compile-sizes: general kernels
     only), FULL_DECODE_ONLY, autotune off unless --autotune, compilation.skinny_gemm_max_m from
     --skinny-max-m, a paged KV cache of 64 sequences) and `kiln compile`.
  3. `kiln generate CACHE --bench-decode --batches B --context 512 --iters 50 --json`.
  4. PyTorch: the same HF model in fp16 on the GPU, one decode step (1 new token per sequence,
     at position 512 after a 512-token prefill into a transformers StaticCache), eager and
     torch.compile(mode="reduce-overhead", fullgraph=True); CUDA events around each step call,
     warm-up first, median of --repeats. The cache's write position is reset to 512 before every
     call (outside the timed region), so every timed call is the same decode step.
  5. the floor: (fp16 parameter bytes + KV bytes read per step) / device-to-device copy
     bandwidth, measured here (a 1 GiB copy; bandwidth = 2 * bytes / time, read + write).
  6. one table per model and everything as JSON (--json-out, default $OUT/decode_bench.json when
     OUT is set, else DIR/decode_bench.json); a one-line summary last.
Exit status: 0 when every step of every model ran, 1 when anything failed or was skipped (the
failures are listed last), 2 usage, 3 no CUDA GPU (without --tiny).

--tiny: 2-layer, hidden-64 versions of both models, on the CPU when there is no GPU: checks the
script end to end (export, kiln compile, the torch decode path) on a machine without a GPU.
"""

import argparse
import gc
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "models"))
import export_kv_decoders as kvx  # noqa: E402  (make_wrapper, export, layers, kv_heads, head_dim)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (Run, add_budget_args, log, model_list, reuse_export,  # noqa: E402
                          run_kiln, tail)

SEED = 0
MAX_SIZE = 64
CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64]
BLOCK_SIZE = 16
MAX_SEQUENCES = 64
MAX_SEQ_LEN = 1024
BLOCK_MARGIN_TOKENS = 64  # per sequence, on top of context + iters, when sizing max_blocks
EXPORTER = "ts17"

# (transformers model class, config class, config keywords); attention is SDPA for all.
MODELS = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config",
             dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                   num_key_value_heads=8, intermediate_size=5632, vocab_size=32000,
                   max_position_embeddings=2048, tie_word_embeddings=False)),
}
TINY = {
    "gpt2": dict(n_embd=64, n_layer=2, n_head=2, vocab_size=512, n_positions=1024,
                 bos_token_id=1, eos_token_id=2),
    "llama": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                  max_position_embeddings=2048, tie_word_embeddings=False),
}


# ---------------------------------------------------------------- model, export, kiln


def build_model(name, tiny, device):
    import torch
    import transformers as tf
    cls, cfg_cls, kw = MODELS[name]
    kw = dict(TINY[name] if tiny else kw)
    config = getattr(tf, cfg_cls)(attn_implementation="sdpa", use_cache=True, **kw)
    torch.manual_seed(SEED)
    try:  # initialised where it runs (a 0.85B model initialises in ~1 s on a GPU)
        with torch.device(device):
            model = getattr(tf, cls)(config)
    except Exception:  # noqa: BLE001  (then on the CPU, and moved)
        torch.manual_seed(SEED)
        model = getattr(tf, cls)(config).to(device)
    model = model.eval()
    model.requires_grad_(False)
    return model, kw


def model_facts(model, context):
    """Parameter bytes (fp16, tied weights once) and KV bytes read per token of context."""
    n_params = sum(p.numel() for p in model.parameters())
    kv_token = kvx.layers(model) * 2 * kvx.kv_heads(model) * kvx.head_dim(model) * 2
    return {"params": n_params, "weight_bytes": 2 * n_params, "layers": kvx.layers(model),
            "kv_heads": kvx.kv_heads(model), "head_dim": kvx.head_dim(model),
            "kv_bytes_per_token": kv_token, "context": context}


def export_model(run, name, model, kw, folder):
    """The KV-cache decoder as ONNX in folder/model.onnx, reused when export.json matches."""
    import torch
    import transformers
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    info_path = folder / "export.json"
    key = {"model": name, "config": kw, "seed": SEED, "exporter": EXPORTER,
           "dtype": run.args.export_dtype, "device": str(next(model.parameters()).device),
           "torch": torch.__version__, "transformers": transformers.__version__}
    reused = reuse_export(folder, key)
    if reused:
        return reused
    t0 = time.monotonic()
    wrapper = kvx.make_wrapper(model)
    with torch.no_grad():
        kvx.export(model, wrapper, EXPORTER, str(path))
    seconds = time.monotonic() - t0
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    ids = next(i for i in m.graph.input if i.name == "input_ids")
    dims = [d.dim_param for d in ids.type.tensor_type.shape.dim]
    files = sorted(f.name for f in folder.iterdir() if f.is_file())
    info = {"key": key, "ok": True, "path": str(path), "seconds": round(seconds, 1),
            "input_ids_dims": dims, "model_bytes": path.stat().st_size,
            "external_data_files": len([f for f in files if f not in
                                        ("model.onnx", "export.json", "kiln.yaml")
                                        and not f.endswith(".log")])}
    del m
    info_path.write_text(json.dumps(info, indent=1))
    return dict(info, reused=False)


def kiln_yaml(run, dims):
    a = run.args
    batch_dim, seq_dim = dims
    per_seq = a.context + a.iters + BLOCK_MARGIN_TOKENS
    max_blocks = MAX_SEQUENCES * math.ceil(per_seq / BLOCK_SIZE)
    return "\n".join([
        f"size_dim: {seq_dim}",
        f"dims: {{{batch_dim}: 1}}",
        f"max_size: {MAX_SIZE}",
        "precision: fp16",
        "targets: [sm_90]",
        "compilation:",
        f"  mode: {a.mode}",
        f"  cudagraph_capture_sizes: [{', '.join(map(str, CAPTURE_SIZES))}]",
        f"  skinny_gemm_max_m: {a.skinny_max_m}",
        *([f"  compile_sizes: [{', '.join(map(str, CAPTURE_SIZES))}]"] if a.compile_sizes else []),
        f"autotune: {{enabled: {'on' if a.autotune else 'off'}}}",
        "kv_cache:",
        f"  block_size: {BLOCK_SIZE}",
        f"  max_blocks: {max_blocks}",
        f"  max_sequences: {MAX_SEQUENCES}",
        f"  max_seq_len: {MAX_SEQ_LEN}",
        f"  decode_append: {a.decode_append}",
        ""])


def kiln_compile(run, name, folder, dims, logs):
    a = run.args
    yaml = kiln_yaml(run, dims)
    (folder / "kiln.yaml").write_text(yaml)
    cache = folder / (f"cache_{a.mode}_{'tuned' if a.autotune else 'untuned'}_skinny{a.skinny_max_m}"
                      f"{'' if a.compile_sizes else '_general'}{a.cache_tag}")
    cmd = [a.kiln, "compile", str(folder / "model.onnx"), "-c", str(folder / "kiln.yaml"),
           "-o", str(cache)]
    log(f"[{name}] kiln compile ({a.mode}, autotune {'on' if a.autotune else 'off'}, "
        f"skinny_gemm_max_m {a.skinny_max_m}) ...")
    log_path = logs / f"decode_{name}_kiln_compile.log"
    rc, out, err, secs = run_kiln(run, cmd, run.timeout(a.kiln_compile_timeout), log_path)
    res = {"cmd": " ".join(cmd), "yaml": yaml, "rc": rc, "seconds": round(secs, 1),
           "cache": str(cache), "log": str(log_path)}
    if rc == 0:
        res["ok"] = True
        log(f"[{name}] kiln compile: ok in {secs:.1f} s")
    else:
        why = f"timed out after {secs:.0f} s" if rc is None else f"rc={rc}"
        res.update(ok=False, error=f"{why}: {tail(err or out)}")
        run.fail(f"{name}: kiln compile {why}: {tail(err or out, lines=3, chars=400)}")
    return res


def parse_generate_json(out):
    """kiln generate --json prints one (indented) JSON object on stdout; tolerate text before it."""
    try:
        return json.loads(out)
    except ValueError:
        pass
    dec = json.JSONDecoder()
    starts = [i for i in range(len(out)) if out[i] == "{" and (i == 0 or out[i - 1] == "\n")]
    for i in starts:
        try:
            obj, _ = dec.raw_decode(out, i)
            if isinstance(obj, dict) and "results" in obj:
                return obj
        except ValueError:
            continue
    raise ValueError("no JSON object with 'results' in kiln generate's output")


def kiln_generate(run, name, cache, logs):
    a = run.args
    cmd = [a.kiln, "generate", cache, "--bench-decode", "--batches",
           ",".join(map(str, a.batches)), "--context", str(a.context), "--iters", str(a.iters),
           "--json"]
    if a.kiln_modes:
        cmd += ["--mode", a.kiln_modes]
    log(f"[{name}] kiln generate --bench-decode ...")
    log_path = logs / f"decode_{name}_kiln_generate.log"
    rc, out, err, secs = run_kiln(run, cmd, run.timeout(a.kiln_run_timeout), log_path)
    res = {"cmd": " ".join(cmd), "rc": rc, "seconds": round(secs, 1), "log": str(log_path),
           "ok": False,
           "stderr_tail": tail(err, lines=8)}
    try:
        j = parse_generate_json(out)
        results = j["results"]
        res["json"] = j
    except (ValueError, KeyError, TypeError) as e:
        why = f"timed out after {secs:.0f} s" if rc is None else f"rc={rc}"
        res["error"] = f"{why}; {e}: {tail(err or out)}"
        run.fail(f"{name}: kiln generate {why}: {tail(err or out, lines=3, chars=400)}")
        return res, {}
    by_batch = {}
    for r in results:
        b = int(r["batch"])
        entry = by_batch.setdefault(b, {})
        if "skipped" in r:
            entry[r.get("mode", "?")] = {"skipped": r["skipped"]}
            run.fail(f"{name}: kiln skipped batch {b} ({r.get('mode', '?')}): {r['skipped']}")
        else:
            entry[r.get("mode", "?")] = {"ms": float(r["ms"]),
                                        "tokens_per_s": float(r.get("tokens_per_s", 0) or 0)}
    for b in a.batches:
        if b not in by_batch:
            run.fail(f"{name}: kiln generate reported nothing for batch {b}")
    if rc != 0:
        run.fail(f"{name}: kiln generate rc={rc}: {tail(err, lines=3, chars=400)}")
    res["ok"] = rc == 0
    return res, by_batch


# ---------------------------------------------------------------- PyTorch side


class Timer:
    """CUDA events around each call on a GPU; perf_counter (after a synchronize) on the CPU."""

    def __init__(self, device):
        import torch
        self.torch = torch
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def median_ms(self, fn, before, warmup, repeats):
        torch = self.torch
        for _ in range(warmup):
            before()
            fn()
        self.sync()
        times = []
        for _ in range(repeats):
            before()  # untimed: reset the cache position
            if self.cuda:
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def copy_bandwidth(device, tiny):
    """Device-to-device copy of a 1 GiB buffer (64 MiB on the CPU): 2 * bytes / median time."""
    import torch
    n = (64 << 20) if device.type == "cpu" else (1 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    timer = Timer(device)
    ms = timer.median_ms(lambda: dst.copy_(src), lambda: None, 3, 5 if tiny else 20)
    del src, dst
    return {"bytes": n, "ms": ms, "bytes_per_s": 2 * n / (ms * 1e-3),
            "convention": "read+write: 2 * bytes / time of dst.copy_(src) (median)"}


class TorchDecode:
    """One decode step of an HF model over a StaticCache holding `context` tokens."""

    def __init__(self, model, batch, context, device):
        import torch
        from transformers import StaticCache
        self.torch, self.model, self.batch, self.context = torch, model, batch, context
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.keep_kw = "logits_to_keep" in params
        self.cache = StaticCache(config=model.config, max_cache_len=context + 8)
        g = torch.Generator().manual_seed(SEED + batch)
        vocab = model.config.vocab_size
        prompt = torch.randint(3, vocab, (batch, context + 1), generator=g).to(device)
        self.prompt = prompt
        self.ids = prompt[:, context:context + 1].contiguous()
        self.pos = torch.full((batch, 1), context, dtype=torch.long, device=device)
        self.cache_position = torch.tensor([context], device=device)
        # Prefill the first `context` tokens (eager; the cache's tensors are created here).
        kw = {self.cache_kw: self.cache, "use_cache": True}
        if self.keep_kw:
            kw["logits_to_keep"] = 1
        with torch.no_grad():
            model(input_ids=prompt[:, :context], **kw)
        layer0 = self.cache.layers[0]
        # transformers 5.x writes at the layer's cumulative_length; older ones at cache_position.
        self.cumulative = hasattr(layer0, "cumulative_length")
        self.extra = {} if self.cumulative else {"cache_position": self.cache_position}

    def reset(self):
        if self.cumulative:
            for layer in self.cache.layers:
                layer.cumulative_length.fill_(self.context)

    def step_fn(self):
        """fn(ids, pos, cache) -> next tokens: the function timed (and compiled)."""
        model, cache_kw, extra = self.model, self.cache_kw, self.extra

        def step(ids, pos, cache):
            out = model(input_ids=ids, position_ids=pos, use_cache=True, **{cache_kw: cache},
                        **extra)
            return out.logits[:, -1].argmax(-1), out.logits

        return step

    def call(self, fn):
        return fn(self.ids, self.pos, self.cache)

    def check_position(self, fn):
        """One step from a reset writes slot `context` of every layer and nothing after it."""
        torch = self.torch
        layer = self.cache.layers[0]
        keys = layer.keys
        c = self.context
        with torch.no_grad():
            keys[:, :, c:].zero_()
            self.reset()
            _, logits = self.call(fn)
            wrote = bool(keys[:, :, c].abs().sum() > 0)
            after = bool(keys[:, :, c + 1:].abs().sum() == 0)
            pos = int(layer.cumulative_length) if self.cumulative else None
        ok = wrote and after and logits.shape[:2] == (self.batch, 1) and (
            pos is None or pos == c + 1)
        return ok, {"wrote_slot": wrote, "later_slots_untouched": after,
                    "position_after": pos, "logits_shape": list(logits.shape)}

    def check_logits(self, fn):
        """The decode step's logits vs a full forward over context + 1 tokens without a cache."""
        torch = self.torch
        with torch.no_grad():
            self.reset()
            _, dec = self.call(fn)
            dec = dec[:, -1].float()
            kw = {"logits_to_keep": 1} if self.keep_kw else {}
            full = self.model(input_ids=self.prompt, use_cache=False, **kw).logits[:, -1].float()
        err = (dec - full).abs().max().item()
        scale = full.abs().max().item()
        same_argmax = bool((dec.argmax(-1) == full.argmax(-1)).all())
        return err <= 2e-2 * max(scale, 1.0), {"max_abs_err": err, "max_abs_logit": scale,
                                               "same_argmax": same_argmax}


def torch_bench(run, name, model, device, logs_entry):
    """Eager and torch.compile(reduce-overhead) decode timings per batch into logs_entry."""
    import torch
    a = run.args
    timer = Timer(device)
    eager, compiled, checks = {}, {}, {}
    logs_entry.update(eager=eager, compile=compiled, checks=checks)
    compiled_fn = None
    fullgraph = True
    broken = None  # the first torch.compile failure: later batches are not compiled again
    torch._dynamo.reset()
    cfg = torch._dynamo.config
    for attr in ("recompile_limit", "cache_size_limit"):  # the name changed across versions
        if hasattr(cfg, attr):
            setattr(cfg, attr, max(getattr(cfg, attr), 64))
    for b in a.batches:
        dec = None
        try:
            dec = TorchDecode(model, b, a.context, device)
            step = dec.step_fn()
            ok, info = dec.check_position(step)
            if b == a.batches[0]:
                ok2, info2 = dec.check_logits(step)
                info["logits_vs_full_forward"] = info2
                ok = ok and ok2
            checks[str(b)] = dict(info, ok=ok)
            if not ok:
                run.fail(f"{name}: torch decode check at batch {b}: {info}")
            with torch.no_grad():
                ms = timer.median_ms(lambda: dec.call(step), dec.reset, a.warmup, a.repeats)
            eager[str(b)] = {"ms": ms, "tokens_per_s": b / ms * 1e3}
            log(f"[{name}] torch eager batch {b}: {ms:.3f} ms")
        except Exception as e:  # OOM and the like: record and go on
            eager[str(b)] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            run.fail(f"{name}: torch eager batch {b}: {type(e).__name__}: {str(e)[:200]}")
        if a.no_torch_compile or dec is None:
            dec = None
            continue
        if broken:
            compiled[str(b)] = {"skipped": broken}
            continue
        if run.left_s() < a.compile_reserve_s:
            compiled[str(b)] = {"skipped": f"time budget ({run.left_s():.0f} s left)"}
            run.fail(f"{name}: torch.compile batch {b} skipped: time budget")
            continue
        try:
            if compiled_fn is None:
                compiled_fn = torch.compile(step, mode="reduce-overhead", fullgraph=fullgraph)

            def call():
                torch.compiler.cudagraph_mark_step_begin()
                return dec.call(compiled_fn)

            t0 = time.monotonic()
            with torch.no_grad():
                dec.reset()
                try:
                    tok_c, logits_c = call()
                except Exception as e:  # noqa: BLE001
                    if not fullgraph:
                        raise
                    log(f"[{name}] fullgraph compile failed ({type(e).__name__}: "
                        f"{str(e)[:200]}); compiling with graph breaks")
                    fullgraph = False
                    torch._dynamo.reset()
                    compiled_fn = torch.compile(step, mode="reduce-overhead", fullgraph=False)
                    dec.reset()
                    tok_c, logits_c = call()
                compile_s = time.monotonic() - t0
                # Same step as eager: position check and logits against the eager step's.
                logits_c = logits_c.clone()
                dec.reset()
                _, logits_e = dec.call(step)
                diff = (logits_c.float() - logits_e.float()).abs().max().item()
                scale = logits_e.float().abs().max().item()
                ok, info = dec.check_position(lambda *x: call())
                info["max_abs_diff_vs_eager"] = diff
                ok = ok and diff <= 2e-2 * max(scale, 1.0)
                ms = timer.median_ms(call, dec.reset, a.warmup, a.repeats)
            compiled[str(b)] = {"ms": ms, "tokens_per_s": b / ms * 1e3,
                                "first_call_s": round(compile_s, 1), "fullgraph": fullgraph,
                                "max_abs_diff_vs_eager": diff, "position_check": info}
            if not ok:
                run.fail(f"{name}: torch.compile decode check at batch {b}: {info}")
            log(f"[{name}] torch.compile batch {b}: {ms:.3f} ms (first call {compile_s:.1f} s, "
                f"fullgraph={fullgraph}, |compiled - eager| {diff:.2e})")
        except Exception as e:  # compile errors, OOM: record and go on
            compiled[str(b)] = {"error": f"{type(e).__name__}: {str(e)[:500]}",
                                "trace": traceback.format_exc()[-1500:]}
            run.fail(f"{name}: torch.compile batch {b}: {type(e).__name__}: {str(e)[:200]}")
            if "out of memory" not in str(e).lower():
                broken = f"torch.compile failed at batch {b}"
        finally:
            dec = None
            gc.collect()
    del compiled_fn
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- table


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def rows_and_table(run, name, m):
    a = run.args
    facts = m["facts"]
    bw = run.report["copy_bandwidth"]["bytes_per_s"]
    kiln = m.get("kiln_by_batch", {})
    modes = sorted({mode for e in kiln.values() for mode in e})
    rows = []
    for b in a.batches:
        kb = kiln.get(b, {})
        kms = {mode: v.get("ms") for mode, v in kb.items()}
        timed = {mode: v for mode, v in kb.items() if "ms" in v}
        best = min(timed.items(), key=lambda kv: kv[1]["ms"]) if timed else None
        te = m["torch"].get("eager", {}).get(str(b), {}).get("ms")
        tc = m["torch"].get("compile", {}).get(str(b), {}).get("ms")
        kv_bytes = b * a.context * facts["kv_bytes_per_token"]
        floor = (facts["weight_bytes"] + kv_bytes) / bw * 1e3
        k = best[1]["ms"] if best else None
        rows.append({"batch": b, "kiln_ms": kms, "kiln_best_mode": best[0] if best else None,
                     "kiln_ms_best": k,
                     "kiln_tokens_per_s": best[1].get("tokens_per_s") if best else None,
                     "torch_eager_ms": te, "torch_compile_ms": tc, "floor_ms": floor,
                     "floor_bytes": facts["weight_bytes"] + kv_bytes, "kv_bytes": kv_bytes,
                     "kiln_over_torch_compile": k / tc if k and tc else None,
                     "kiln_over_floor": k / floor if k else None,
                     "torch_compile_over_floor": tc / floor if tc else None})
    m["rows"] = rows
    head = ["batch"] + [f"kiln {mode} ms" for mode in modes or ["-"]] + [
        "torch eager ms", "torch.compile ms", "floor ms", "kiln/compile", "kiln/floor",
        "kiln tok/s"]
    lines = []
    for r in rows:
        cells = [str(r["batch"])]
        for mode in modes or ["-"]:
            v = r["kiln_ms"].get(mode)
            cells.append(fmt(v) if v is not None else (
                "skipped" if mode in r["kiln_ms"] else "-"))
        cells += [fmt(r["torch_eager_ms"]), fmt(r["torch_compile_ms"]), fmt(r["floor_ms"]),
                  fmt(r["kiln_over_torch_compile"], ".2f"), fmt(r["kiln_over_floor"], ".2f"),
                  fmt(r["kiln_tokens_per_s"], ".0f")]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    out = [f"---- {name}: {facts['params'] / 1e6:.1f} M params ({facts['weight_bytes'] / 2**20:.0f}"
           f" MiB fp16), context {a.context}, KV {facts['kv_bytes_per_token']} B/token, "
           f"floor at {bw / 1e12:.2f} TB/s (copy, read+write)"]
    out.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for c in lines:
        out.append("  ".join(x.rjust(w) for x, w in zip(c, widths)))
    return "\n".join(out)


# ---------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=".stage/bin/kiln", help="the kiln CLI (default %(default)s)")
    p.add_argument("--out", default="/tmp/kiln_decode_bench",
                   help="exports and kiln caches, reused across runs (default %(default)s)")
    p.add_argument("--json-out", default=None,
                   help="the JSON report (default $OUT/decode_bench.json, else OUT_DIR/...)")
    p.add_argument("--models", default="gpt2,llama", help="comma list of gpt2, llama")
    p.add_argument("--batches", default="1,8,32,64", help="comma list, each in [1, 64]")
    p.add_argument("--context", type=int, default=512, help="tokens already in the cache")
    p.add_argument("--iters", type=int, default=50, help="kiln generate's decode steps")
    p.add_argument("--mode", default="FULL_DECODE_ONLY",
                   choices=["FULL_DECODE_ONLY", "FULL", "FULL_AND_PIECEWISE", "PIECEWISE", "NONE"],
                   help="kiln.yaml compilation.mode (default %(default)s)")
    p.add_argument("--kiln-modes", default="",
                   help="kiln generate --mode list, e.g. FULL_DECODE_ONLY,NONE (default: the "
                        "artifact's mode)")
    p.add_argument("--autotune", action="store_true", help="kiln.yaml autotune: {enabled: on}")
    p.add_argument("--no-compile-sizes", dest="compile_sizes", action="store_false",
                   help="leave kiln.yaml compilation.compile_sizes out (default: the capture "
                   "sizes, so every size runs kernels specialised for it)")
    p.add_argument("--cache-tag", default="", help="appended to the kiln cache folder's name")
    p.add_argument("--skinny-max-m", default="auto",
                   type=lambda v: v if v == "auto" else int(v),
                   help="kiln.yaml compilation.skinny_gemm_max_m: auto or 0-16 (default "
                        "%(default)s, the compiler's own; 0: cuBLASLt for every GEMM)")
    p.add_argument("--decode-append", default="auto", choices=["auto", "separate", "in_attention"],
                   help="kiln.yaml kv_cache.decode_append (default %(default)s, the compiler's "
                        "own)")
    p.add_argument("--export-dtype", default="fp32", choices=["fp32", "fp16"],
                   help="dtype of the ONNX export (default %(default)s: the TorchScript exporter "
                        "writes Llama's 3.4 GB as external data; its fp16 exports carry f32 "
                        "Casts that leave GPT-2 mistyped)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=100, help="timed torch calls (median)")
    p.add_argument("--no-torch-compile", action="store_true", help="eager torch only")
    p.add_argument("--no-kiln", action="store_true", help="skip kiln compile and generate")
    p.add_argument("--no-generate", action="store_true",
                   help="kiln compile only (no kiln generate): for machines without a GPU")
    p.add_argument("--kiln-compile-timeout", type=int, default=240, help="seconds")
    p.add_argument("--kiln-run-timeout", type=int, default=150, help="seconds")
    add_budget_args(p, "batch")
    a = p.parse_args(argv)
    a.models = model_list(p, a.models, MODELS)
    try:
        a.batches = sorted({int(b) for b in a.batches.split(",") if b})
    except ValueError:
        p.error("--batches: a comma list of integers")
    if not a.batches or a.batches[0] < 1 or a.batches[-1] > MAX_SEQUENCES:
        p.error(f"--batches: each in [1, {MAX_SEQUENCES}] (kv_cache.max_sequences)")
    if a.context + a.iters + 1 > MAX_SEQ_LEN:
        p.error(f"--context + --iters must stay below max_seq_len {MAX_SEQ_LEN}")
    if a.json_out is None:
        a.json_out = os.path.join(os.environ["OUT"] if os.environ.get("OUT") else a.out,
                                  "decode_bench.json")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    import transformers
    import onnx
    run = Run(args, "tools/bench/decode_bench.py")
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        log("decode_bench: no CUDA GPU here (torch.cuda.is_available() is False); --tiny runs on "
            "the CPU")
        return 3
    device = torch.device("cuda" if cuda else "cpu")
    logs = Path(args.json_out).resolve().parent
    logs.mkdir(parents=True, exist_ok=True)
    rep = run.report
    rep["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                       "transformers": transformers.__version__, "onnx": onnx.__version__}
    rep["device"] = torch.cuda.get_device_name() if cuda else "cpu"
    rep["settings"] = {"context": args.context, "iters": args.iters, "batches": args.batches,
                       "mode": args.mode, "autotune": args.autotune, "tiny": args.tiny,
                       "export_dtype": args.export_dtype, "torch_dtype": "fp16",
                       "torch_cache_len": args.context + 8, "warmup": args.warmup,
                       "repeats": args.repeats, "kiln": args.kiln}
    log(f"decode_bench on {rep['device']}: torch {torch.__version__}, transformers "
        f"{transformers.__version__}; models {','.join(args.models)}, batches "
        f"{','.join(map(str, args.batches))}, context {args.context}")
    rep["copy_bandwidth"] = copy_bandwidth(device, args.tiny)
    log(f"copy bandwidth {rep['copy_bandwidth']['bytes_per_s'] / 1e12:.3f} TB/s "
        f"(read+write: 2 x {rep['copy_bandwidth']['bytes'] >> 20} MiB / "
        f"{rep['copy_bandwidth']['ms']:.3f} ms)")
    run.save()
    tables = []
    for name in args.models:
        m = rep["models"][name] = {"torch": {}}
        model = None
        try:
            t0 = time.monotonic()
            # Built in fp32 (the seeded initialisation), exported in --export-dtype, timed in fp16:
            # the same weights on both sides (kiln's fp16 precision rounds them like .half()).
            model, kw = build_model(name, args.tiny, device)
            m["config"] = kw
            m["facts"] = model_facts(model, args.context)
            log(f"[{name}] {m['facts']['params'] / 1e6:.1f} M parameters, built in "
                f"{time.monotonic() - t0:.1f} s")
            folder = Path(args.out) / (name + ("_tiny" if args.tiny else ""))
            if args.export_dtype == "fp16":
                model.half()
            try:
                exp = export_model(run, name, model, kw, folder)
                m["export"] = exp
                how = "reused" if exp["reused"] else f"done in {exp['seconds']:.1f} s"
                log(f"[{name}] export: {how}"
                    f" ({exp['model_bytes'] / 2**20:.0f} MiB model.onnx, "
                    f"{exp['external_data_files']} external data files), input_ids dims "
                    f"{exp['input_ids_dims']}")
            except Exception as e:  # noqa: BLE001
                m["export"] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:1500]}",
                               "trace": traceback.format_exc()[-2000:]}
                run.fail(f"{name}: export: {type(e).__name__}: {str(e)[:300]}")
            model.half()
            gc.collect()
            run.save()
            if not args.no_kiln and m["export"].get("ok"):
                if run.left_s() < 60:
                    run.fail(f"{name}: kiln skipped: time budget")
                else:
                    kc = m["kiln_compile"] = kiln_compile(
                        run, name, folder, m["export"]["input_ids_dims"], logs)
                    run.save()
                    if kc["ok"] and not args.no_generate:
                        kg, by_batch = kiln_generate(run, name, kc["cache"], logs)
                        m["kiln_generate"] = kg
                        m["kiln_by_batch"] = by_batch
                        run.save()
            torch_bench(run, name, model, device, m["torch"])
        except Exception as e:  # noqa: BLE001  (building the model, and the like)
            m["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            m["trace"] = traceback.format_exc()[-2000:]
            run.fail(f"{name}: {type(e).__name__}: {str(e)[:300]}")
        finally:
            del model
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        if "facts" in m:
            table = rows_and_table(run, name, m)
            m["kiln_by_batch"] = {str(k): v for k, v in m.get("kiln_by_batch", {}).items()}
            tables.append(table)
            log(table)
        run.save()
    log("================ decode_bench ================")
    for t in tables:
        log(t)
    parts = []
    for name, m in rep["models"].items():
        cells = []
        for r in m.get("rows", []):
            k = r["kiln_ms_best"]
            if k:
                cells.append(f"b{r['batch']} kiln {k:.3f} ms = "
                             f"{fmt(r['kiln_over_torch_compile'], '.2f')}x torch.compile, "
                             f"{r['kiln_over_floor']:.2f}x floor")
            elif r["torch_compile_ms"]:
                cells.append(f"b{r['batch']} kiln -, torch.compile {r['torch_compile_ms']:.3f} "
                             f"ms = {r['torch_compile_over_floor']:.2f}x floor")
            else:
                cells.append(f"b{r['batch']} kiln -, torch eager {fmt(r['torch_eager_ms'])} ms")
        parts.append(f"{name}: " + "; ".join(cells))
    return run.finish("decode_bench", parts, f"json: {args.json_out}")


if __name__ == "__main__":
    sys.exit(main())
