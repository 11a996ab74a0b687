#!/usr/bin/env python3
"""Builds the real-export corpus: tiny random-weight Hugging Face models exported the ways users
export them, with onnxruntime's outputs beside them in the ONNX backend-test layout. Runs on the
GPU machine (it has torch, transformers, onnxscript, onnx and onnxruntime; the Debian build
machine does not):

    python3 tests/models/export_transformers.py OUT_DIR [CASE_PREFIX ...]

Writes OUT_DIR/<family>_<path>[_nomask]/ with model.onnx, kiln.yaml, expect.json and
test_data_set_{0,1}/input_i.pb|output_j.pb, plus OUT_DIR/report.json (every case, failures with
the exporter's or onnxruntime's message). The folders are committed under tests/models/exported/.

Families (2 layers, hidden 32, 2 heads of 16, vocabulary 128, fixed seeds):
  decoders (input_ids -> logits):  gpt2, llama (GQA 2/1), qwen2 (GQA, q/k/v bias), mistral (GQA),
                                   gpt_neox (partial rotary), phi3 (fused qkv, gate_up)
  encoders (-> last_hidden_state): bert, roberta (position ids from a CumSum over the ids),
                                   distilbert
Paths:
  ts17_sdpa   TorchScript exporter, opset 17, transformers' default SDPA attention
  ts17_eager  TorchScript exporter, opset 17, eager attention
  dynamo18    torch.export-based exporter, opset 18, SDPA attention
  dynamo23    torch.export-based exporter, opset 23, SDPA attention
each with an `attention_mask` input (right-padded second row) and, as <name>_nomask, without.
  optimum     what Optimum exports: TorchScript opset 17, SDPA, inputs input_ids, attention_mask
              and position_ids (decoders) or token_type_ids (BERT)
  ortopt      onnxruntime.transformers.optimizer over ts17_eager (com.microsoft fused ops), for
              the families it has fusions for
A failing export is recorded in report.json and skipped. Where onnxruntime refuses a model, the
outputs come from onnx's reference evaluator instead, and expect.json's `reference` says so.
"""

import concurrent.futures
import json
import os
import shutil
import sys
import traceback

import numpy as np

LAYERS = 2
BATCH = 2
SEQ_LENS = (5, 11)  # test_data_set_0 and _1; batch is 2 in both
VOCAB = 128
DECODERS = ("gpt2", "llama", "qwen2", "mistral", "gpt_neox", "phi3")
ENCODERS = ("bert", "roberta", "distilbert")
PATHS = ("ts17_sdpa", "ts17_eager", "dynamo18", "dynamo23")
ORTOPT_TYPES = {"gpt2": "gpt2", "bert": "bert", "roberta": "bert", "distilbert": "bert",
                "phi3": "phi"}


def family_model(family, attn):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    common = dict(attn_implementation=attn, vocab_size=VOCAB)
    dec = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
               num_attention_heads=2, max_position_embeddings=64, use_cache=False,
               tie_word_embeddings=False, **common)
    if family == "gpt2":
        cfg = tf.GPT2Config(n_positions=64, n_embd=32, n_layer=LAYERS, n_head=2,
                            use_cache=False, **common)
        return tf.GPT2LMHeadModel(cfg)
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=1, **dec))
    if family == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=1, **dec))
    if family == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=1, **dec))
    if family == "gpt_neox":
        cfg = tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                               num_attention_heads=2, max_position_embeddings=64,
                               rotary_pct=0.25, use_cache=False, tie_word_embeddings=False,
                               **common)
        return tf.GPTNeoXForCausalLM(cfg)
    if family == "phi3":
        cfg = tf.Phi3Config(num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2, **dec)
        return tf.Phi3ForCausalLM(cfg)
    enc = dict(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
               intermediate_size=64, **common)
    if family == "bert":
        return tf.BertModel(tf.BertConfig(max_position_embeddings=64, type_vocab_size=2, **enc),
                            add_pooling_layer=False)
    if family == "roberta":
        cfg = tf.RobertaConfig(max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
                               **enc)
        return tf.RobertaModel(cfg, add_pooling_layer=False)
    if family == "distilbert":
        cfg = tf.DistilBertConfig(dim=32, n_layers=LAYERS, n_heads=2, hidden_dim=64,
                                  max_position_embeddings=64, **common)
        return tf.DistilBertModel(cfg)
    raise ValueError(family)


def input_names(family, path, with_mask):
    names = ["input_ids"]
    if with_mask or path == "optimum":
        names.append("attention_mask")
    if path == "optimum" and family in DECODERS:
        names.append("position_ids")
    if path == "optimum" and family == "bert":
        names.append("token_type_ids")
    return names


def make_inputs(family, names, seq, seed):
    """Random ids; the second row right-padded by a third (ids there are the pad id)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, size=(BATCH, seq), dtype=np.int64)
    mask = np.ones((BATCH, seq), dtype=np.int64)
    if "attention_mask" in names:
        mask[1, seq - max(1, seq // 3):] = 0
        ids[mask == 0] = 1 if family == "roberta" else 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    pos = np.cumsum(mask, axis=1) - 1
    feeds["position_ids"] = np.where(mask == 0, 1, pos).astype(np.int64)
    tt = np.zeros((BATCH, seq), dtype=np.int64)
    tt[:, seq // 2:] = 1
    feeds["token_type_ids"] = tt
    return {n: feeds[n] for n in names}


def make_wrapper(model, names):
    import torch
    extra = names[2] if len(names) > 2 else None  # position_ids or token_type_ids

    class FirstOutput(torch.nn.Module):
        """The model's first output as a plain tensor, from the named inputs."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None, third=None):
            kw = {"input_ids": input_ids}
            if attention_mask is not None:
                kw["attention_mask"] = attention_mask
            if extra is not None:
                kw[extra] = third
            return self.model(**kw, return_dict=False)[0]

    return FirstOutput().eval()


def export(wrapper, names, family, path, out_path):
    import torch
    example = make_inputs(family, names, 8, 99)
    args = tuple(torch.from_numpy(example[n]) for n in names)
    if path.startswith("ts17") or path == "optimum":
        axes = {n: {0: "batch", 1: "seq"} for n in names}
        axes["output"] = {0: "batch", 1: "seq"}
        torch.onnx.export(wrapper, args, out_path, dynamo=False, opset_version=17,
                          input_names=names, output_names=["output"], dynamic_axes=axes)
        return
    opset = int(path.replace("dynamo", ""))
    batch = torch.export.Dim("batch", min=1, max=16)
    seq = torch.export.Dim("seq", min=2, max=64)
    shapes = tuple({0: batch, 1: seq} for _ in names)
    prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=names,
                             output_names=["output"], dynamic_shapes=shapes)
    prog.save(out_path)


def export_ortopt(family, src, out_path):
    from onnxruntime.transformers import optimizer
    opt = optimizer.optimize_model(src, model_type=ORTOPT_TYPES[family], num_heads=2,
                                   hidden_size=32, opt_level=0, use_gpu=False)
    opt.save_model_to_file(out_path)


def dim_params(model):
    out = {}
    for vi in model.graph.input:
        out[vi.name] = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
    return out


def write_case(folder, family, path, model_path, wrapper):
    import onnx
    import onnxruntime as ort
    import torch
    import transformers
    from onnx import numpy_helper
    model = onnx.load(model_path)
    dims = dim_params(model)
    first = dims["input_ids"]
    if not (isinstance(first[0], str) and isinstance(first[1], str)):
        raise RuntimeError(f"input_ids dims are {first}, not two symbolic dims")
    batch_name, seq_name = first
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    reference = "onnxruntime " + ort.__version__
    try:
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        sess.run(None, make_inputs(family, in_names, SEQ_LENS[0], 100))
    except Exception as e:  # onnxruntime 1.30 refuses the opset-23 RotaryEmbedding of decoders
        from onnx.reference import ReferenceEvaluator
        sess = ReferenceEvaluator(model)
        reference = f"onnx.reference {onnx.__version__} (onnxruntime refused: {str(e)[:300]})"
    max_err = 0.0
    for k, seq in enumerate(SEQ_LENS):
        feeds = make_inputs(family, in_names, seq, 100 + k)
        outs = sess.run(None, feeds)
        with torch.no_grad():
            ref = wrapper(*[torch.from_numpy(feeds[n]) for n in in_names]).numpy()
        # Rows of padded queries differ between implementations (their values are unused).
        keep = feeds.get("attention_mask", np.ones((BATCH, seq), np.int64)).astype(bool)
        max_err = max(max_err, float(np.abs(outs[0] - ref)[keep].max()))
        d = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        for i, n in enumerate(in_names):
            t = numpy_helper.from_array(feeds[n], n)
            open(os.path.join(d, f"input_{i}.pb"), "wb").write(t.SerializeToString())
        for j, n in enumerate(out_names):
            t = numpy_helper.from_array(outs[j], n)
            open(os.path.join(d, f"output_{j}.pb"), "wb").write(t.SerializeToString())
    if max_err > 1e-3:
        raise RuntimeError(f"{reference} differs from torch by {max_err} on real rows")
    with open(os.path.join(folder, "kiln.yaml"), "w") as f:
        f.write(f"# {family} exported by {path}: S is the sequence length, batch is {BATCH}.\n")
        f.write(f"size_dim: {seq_name}\ndims: {{{batch_name}: {BATCH}}}\nmax_size: 32\n")
        f.write("compilation:\n  compile_sizes: [1, 8]\n"
                "  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 32]\n")
    ops = {}
    for n in model.graph.node:
        key = f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        ops[key] = ops.get(key, 0) + 1
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    expect = dict(family=family, path=path, encoder=family in ENCODERS, layers=LAYERS,
                  attention_ops=LAYERS, opsets=opsets, inputs=dims, ops=ops,
                  reference=reference, ref_vs_torch_max_abs_err=max_err,
                  torch=torch.__version__, transformers=transformers.__version__,
                  onnx=onnx.__version__)
    with open(os.path.join(folder, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1, sort_keys=True)
    return expect


def cases(family):
    out = [(p, True) for p in PATHS] + [(p, False) for p in PATHS] + [("optimum", True)]
    if family in ORTOPT_TYPES:
        out.append(("ortopt", True))
    return out


def run_family(family, out, only):
    import torch
    torch.set_num_threads(2)
    report = {}
    for path, with_mask in cases(family):
        name = f"{family}_{path}" + ("" if with_mask else "_nomask")
        if only and not any(name.startswith(o) for o in only):
            continue
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        model_path = os.path.join(folder, "model.onnx")
        try:
            src = "ts17_eager" if path == "ortopt" else path
            attn = "eager" if src == "ts17_eager" else "sdpa"
            model = family_model(family, attn).eval()
            names = input_names(family, path, with_mask)
            wrapper = make_wrapper(model, names)
            if path == "ortopt":
                tmp = os.path.join(folder, "source.onnx")
                export(wrapper, names, family, "ts17_eager", tmp)
                export_ortopt(family, tmp, model_path)
                os.remove(tmp)
            else:
                export(wrapper, names, family, path, model_path)
            report[name] = write_case(folder, family, path, model_path, wrapper)
            print(f"{name}: ok", flush=True)
        except Exception as e:  # record and go on with the next case
            report[name] = {"error": f"{type(e).__name__}: {str(e)[:2000]}",
                            "trace": traceback.format_exc()[-3000:]}
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    return report


def main():
    out = sys.argv[1]
    only = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    report = {}
    families = DECODERS + ENCODERS
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(families)) as pool:
        for r in pool.map(run_family, families, [out] * len(families),
                          [only] * len(families)):
            report.update(r)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    ok = sum(1 for r in report.values() if "error" not in r)
    print(f"corpus: {ok} of {len(report)} cases exported and checked against onnxruntime")


if __name__ == "__main__":
    main()
