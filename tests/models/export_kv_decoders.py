#!/usr/bin/env python3
"""Exports tiny decoders WITH a KV cache the way torch.onnx and Optimum lay them out, plus an
onnxruntime greedy loop over each export as the reference for generation. Runs on the GPU
machine (torch, transformers, onnx, onnxruntime); the Debian build machine has none of them:

    python3 tests/models/export_kv_decoders.py OUT_DIR [CASE_PREFIX ...]

Each OUT_DIR/<family>_<exporter>_kv[_nopos]/ holds model.onnx and greedy.json; OUT_DIR/report.json
lists every case (failures with the exporter's or onnxruntime's message; a run over some cases
updates their entries and keeps the others'). The folders are committed under tests/models/kv/.

Model inputs: input_ids [batch, seq], attention_mask [batch, past_seq + seq], position_ids
[batch, seq], past_key_values.N.key|value [batch, kv_heads, past_seq, head_dim]; outputs: logits
[batch, seq, vocab], present.N.key|value [batch, kv_heads, past_seq + seq, head_dim]. The `_nopos`
cases have no position_ids input: the wrapper does not pass it and the model derives each
token's position from the cache length (transformers' cache_position, arange(past_seq,
past_seq + seq)).
Families (2 layers, hidden 32, 2 heads of 16, vocabulary 128, fixed seeds): gpt2, llama (GQA 2/1).
Exporters: ts17 (TorchScript, opset 17), dynamo18 and dynamo23 (torch.export based, opsets 18
and 23: at 23 attention may arrive as ONNX Attention and rotary as RotaryEmbedding); SDPA
attention.
make_wrapper / names / example / export work for any such model (layer count, vocabulary, dtype
and device from the model); tools/bench/decode_bench.py imports them for its full-size decoders.

greedy.json: for each prompt (lengths 5 and 11, batch 1), the prompt ids, the 32 tokens an
onnxruntime greedy loop generates (prefill with an empty past, then one token per step feeding
the presents back as pasts) and the last-position logits of every step.
"""

import itertools
import json
import os
import sys
import traceback

import numpy as np

LAYERS = 2
VOCAB = 128
NEW_TOKENS = 32
PROMPTS = (5, 11)


def family_model(family):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    common = dict(attn_implementation="sdpa", vocab_size=VOCAB, use_cache=True)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_positions=128, n_embd=32, n_layer=LAYERS,
                                                n_head=2, **common))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=False,
            **common))
    raise ValueError(family)


def layers(model):
    c = model.config
    return getattr(c, "num_hidden_layers", None) or c.n_layer


def kv_heads(model):
    c = model.config
    return getattr(c, "num_key_value_heads", None) or getattr(c, "n_head")


def head_dim(model):
    c = model.config
    hidden = getattr(c, "hidden_size", None) or c.n_embd
    heads = getattr(c, "num_attention_heads", None) or c.n_head
    return hidden // heads


def make_wrapper(model, position_ids=True):
    """position_ids=False: the wrapper takes no position_ids (the model derives them)."""
    import torch
    from transformers import DynamicCache
    n_layers = layers(model)

    class WithPast(torch.nn.Module):
        """(input_ids, attention_mask, position_ids, k0, v0, k1, v1, ...) -> (logits, presents)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            return run(self.model, input_ids, attention_mask, position_ids, past)

    class WithPastNoPositions(torch.nn.Module):
        """(input_ids, attention_mask, k0, v0, k1, v1, ...) -> (logits, presents)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            return run(self.model, input_ids, attention_mask, None, past)

    def run(lm, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache()
        for i in range(n_layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        pos = {} if position_ids is None else {"position_ids": position_ids}
        out = lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                    use_cache=True, return_dict=True, **pos)
        presents = []
        for i in range(n_layers):
            layer = out.past_key_values.layers[i]
            presents += [layer.keys, layer.values]
        return (out.logits, *presents)

    wrapper = (WithPast if position_ids else WithPastNoPositions)().eval()
    wrapper.position_ids = position_ids
    return wrapper


def names(n_layers=LAYERS, position_ids=True):
    past = [f"past_key_values.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
    front = ["input_ids", "attention_mask"] + (["position_ids"] if position_ids else [])
    return front + past, ["logits"] + present


def example(model, batch, seq, past_len, position_ids=True):
    """Example inputs on the model's device; the pasts in the model's dtype (drawn in fp32 on the
    CPU, so a model gets the same values wherever it lives). position_ids=False: none."""
    import torch
    p = next(model.parameters())
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, model.config.vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + seq).unsqueeze(0).expand(batch, seq)
    past = [torch.randn(batch, kv_heads(model), past_len, head_dim(model), generator=g)
            for _ in range(2 * layers(model))]
    front = (ids, mask, pos) if position_ids else (ids, mask)
    return tuple(t.to(p.device) for t in front) + tuple(
        t.to(device=p.device, dtype=p.dtype) for t in past)


def export(model, wrapper, exporter, path):
    """The wrapper's inputs (make_wrapper: with or without position_ids) are the model's."""
    import torch
    with_pos = getattr(wrapper, "position_ids", True)
    ins, outs = names(layers(model), with_pos)
    front = 3 if with_pos else 2  # inputs before the pasts
    args = example(model, 2, 3, 4, with_pos)
    if exporter == "ts17":
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
                "logits": {0: "batch", 1: "seq"}}
        if with_pos:
            axes["position_ids"] = {0: "batch", 1: "seq"}
        for n in ins[front:]:
            axes[n] = {0: "batch", 2: "past_seq"}
        for n in outs[1:]:
            axes[n] = {0: "batch", 2: "total"}
        torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=17, input_names=ins,
                          output_names=outs, dynamic_axes=axes)
        return
    auto = torch.export.Dim.AUTO  # batch, seq, past_seq and their sum, as the tracer finds them
    # forward(input_ids, attention_mask[, position_ids], *past): the pasts are one tuple.
    shapes = tuple({0: auto, 1: auto} for _ in range(front)) + (
        tuple({0: auto, 2: auto} for _ in range(2 * layers(model))),)
    opset = int(exporter.removeprefix("dynamo"))  # dynamo18, dynamo23
    prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=ins,
                             output_names=outs, dynamic_shapes=shapes)
    prog.save(path)


def greedy_steps(sess, prompt, past, past_names, position_ids=True):
    """onnxruntime's greedy loop over a KV-cache decoder: the prompt from `past` (the empty
    pasts), then one token per step feeding the presents (the outputs after the logits) back
    as pasts; returns the NEW_TOKENS tokens and each step's last-position logits."""
    ids = np.array([prompt], dtype=np.int64)
    tokens, logits = [], []
    total = 0
    for _ in range(NEW_TOKENS):
        seq = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total + seq), np.int64)}
        if position_ids:
            feeds["position_ids"] = np.arange(total, total + seq, dtype=np.int64)[None, :]
        feeds.update(zip(past_names, past))
        out = sess.run(None, feeds)
        last = out[0][0, -1]
        tok = int(np.argmax(last))
        tokens.append(tok)
        logits.append([float(x) for x in last])
        past = out[1:]
        total += seq
        ids = np.array([[tok]], dtype=np.int64)
    return tokens, logits


def greedy_loop(sess, model, prompt, position_ids=True):
    """Prefill with an empty past, then one token per step; returns tokens and step logits."""
    past = [np.zeros((1, kv_heads(model), 0, head_dim(model)), np.float32)
            for _ in range(2 * LAYERS)]
    ins, _ = names(LAYERS, position_ids)
    return greedy_steps(sess, prompt, past, ins[3 if position_ids else 2:], position_ids)


def torch_greedy(model, prompt):
    import torch
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             min_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0)
    return [int(t) for t in out[0, len(prompt):]]


def case_name(family, exporter, position_ids):
    return f"{family}_{exporter}_kv" + ("" if position_ids else "_nopos")


def run_case(family, exporter, out, position_ids=True):
    import onnxruntime as ort
    name = case_name(family, exporter, position_ids)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    model = family_model(family).eval()
    export(model, make_wrapper(model, position_ids), exporter, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    result = {"family": family, "exporter": exporter, "new_tokens": NEW_TOKENS, "prompts": []}
    for n in PROMPTS:
        prompt = [int(x) for x in rng.integers(3, VOCAB, size=n)]
        tokens, logits = greedy_loop(sess, model, prompt, position_ids)
        ref = torch_greedy(model, prompt)
        result["prompts"].append({"prompt": prompt, "tokens": tokens, "torch_tokens": ref,
                                  "step_logits": logits})
        if tokens != ref:
            raise RuntimeError(f"onnxruntime's greedy tokens differ from torch's: {tokens} vs {ref}")
    with open(os.path.join(folder, "greedy.json"), "w") as f:
        json.dump(result, f)
    return {"ok": True}


def main():
    out = sys.argv[1]
    only = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    report_path = os.path.join(out, "report.json")
    report = {}
    if os.path.exists(report_path):  # the cases not run this time keep their entries
        with open(report_path) as f:
            report = json.load(f)
    cases = itertools.product(("gpt2", "llama"), ("ts17", "dynamo18", "dynamo23"), (True, False))
    for family, exporter, position_ids in cases:
        name = case_name(family, exporter, position_ids)
        if only and not any(name.startswith(o) for o in only):
            continue
        try:
            report[name] = run_case(family, exporter, out, position_ids)
            print(f"{name}: ok", flush=True)
        except Exception as e:  # record and go on
            report[name] = {"error": f"{type(e).__name__}: {str(e)[:2000]}",
                            "trace": traceback.format_exc()[-3000:]}
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    with open(report_path, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
