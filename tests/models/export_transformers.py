#!/usr/bin/env python3
"""Exports tiny random-weight transformer models the way real users do, with onnxruntime's
outputs beside them in the ONNX backend-test layout. Runs on the GPU machine (it has torch,
transformers, onnxscript, onnx and onnxruntime; the Debian build machine does not):

    python3 tests/models/export_transformers.py OUT_DIR [CASE ...]

Writes OUT_DIR/<family>_<exporter>/ with model.onnx, kiln.yaml, expect.json and
test_data_set_{0,1}/input_i.pb|output_j.pb, plus OUT_DIR/report.json. The folders are
committed under tests/models/exported/. Families (2 layers each, hidden 64, 4 heads, fixed seeds):
  gpt2   input_ids -> logits (causal, LayerNorm, tanh GELU, Conv1D projections)
  llama  input_ids -> logits (GQA 4 query / 2 key-value heads, RoPE, RMSNorm, SiLU MLP)
  bert   input_ids, attention_mask -> last_hidden_state (padding mask, erf GELU)
Exporters: ts17 (TorchScript exporter, opset 17), dynamo18 / dynamo23 (torch.export based
exporter; dynamo23 with transformers' SDPA attention, the others with its eager attention), ortopt (onnxruntime.transformers.optimizer fusions over ts17: com.microsoft
Attention, SkipLayerNormalization, FastGelu/BiasGelu). A failing export is recorded in
report.json and skipped; it does not stop the others.
"""

import json
import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import numpy_helper

LAYERS = 2
BATCH = 2
SEQ_LENS = (5, 11)  # test_data_set_0 and _1: S is the sequence length; batch is bound to 2


def family_model(family, attn):
    torch.manual_seed(0)
    common = dict(attn_implementation=attn)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=LAYERS,
                                      n_head=4, use_cache=False, **common)
        model = transformers.GPT2LMHeadModel(cfg)
    elif family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=LAYERS, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64,
                                       rms_norm_eps=1e-5, tie_word_embeddings=False,
                                       use_cache=False, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif family == "bert":
        cfg = transformers.BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=LAYERS,
                                      num_attention_heads=4, intermediate_size=128,
                                      max_position_embeddings=64, type_vocab_size=1, **common)
        model = transformers.BertModel(cfg, add_pooling_layer=False)
    else:
        raise ValueError(family)
    model.eval()
    return model


class LogitsOnly(torch.nn.Module):
    """input_ids (+ attention_mask) -> the first output only, as a plain tensor."""

    def __init__(self, model, with_mask):
        super().__init__()
        self.model = model
        self.with_mask = with_mask

    def forward(self, input_ids, attention_mask=None):
        if not self.with_mask:
            # Decoders get an all-ones mask built from the ids' shape: transformers 5 otherwise
            # probes position_ids for packed sequences with aten::diff, which opset 17 lacks.
            attention_mask = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          return_dict=False)[0]


def make_inputs(family, seq, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 256, size=(BATCH, seq), dtype=np.int64)
    feeds = {"input_ids": ids}
    if family == "bert":
        mask = np.ones((BATCH, seq), dtype=np.int64)
        mask[1, seq - max(1, seq // 3):] = 0  # second row padded at the end
        feeds["attention_mask"] = mask
    return feeds


def export_torch(family, wrapper, path, exporter):
    names = ["input_ids"] + (["attention_mask"] if family == "bert" else [])
    example = make_inputs(family, 8, 99)
    args = tuple(torch.from_numpy(example[n]) for n in names)
    if exporter == "ts17":
        axes = {n: {0: "batch", 1: "seq"} for n in names}
        axes["output"] = {0: "batch", 1: "seq"}
        torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=17, input_names=names,
                          output_names=["output"], dynamic_axes=axes)
    else:
        opset = int(exporter.replace("dynamo", ""))
        batch = torch.export.Dim("batch", min=1, max=16)
        seq = torch.export.Dim("seq", min=2, max=64)
        shapes = {n: {0: batch, 1: seq} for n in names}
        prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset,
                                 input_names=names, output_names=["output"],
                                 dynamic_shapes=shapes)
        prog.save(path)


def export_ortopt(family, src, path):
    from onnxruntime.transformers import optimizer
    model_type = {"gpt2": "gpt2", "bert": "bert"}.get(family)
    if model_type is None:
        raise RuntimeError(f"onnxruntime's optimizer has no fusion for {family}")
    opt = optimizer.optimize_model(src, model_type=model_type, num_heads=4, hidden_size=64,
                                   opt_level=0, use_gpu=False)
    opt.save_model_to_file(path)


def dim_params(model):
    out = {}
    for vi in model.graph.input:
        out[vi.name] = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
    return out


def write_case(folder, family, exporter, model_path, torch_model):
    model = onnx.load(model_path)
    dims = dim_params(model)
    first = dims["input_ids"]
    if not (isinstance(first[0], str) and isinstance(first[1], str)):
        raise RuntimeError(f"input_ids dims are {first}, not two symbolic dims")
    batch_name, seq_name = first
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    try:
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        sess.run(None, {n: v for n, v in make_inputs(family, SEQ_LENS[0], 1).items()
                        if n in in_names})
        reference = "onnxruntime " + ort.__version__
    except Exception as e:  # e.g. onnxruntime 1.30 refuses the exporter's RotaryEmbedding
        from onnx.reference import ReferenceEvaluator
        sess = ReferenceEvaluator(model)
        reference = f"onnx.reference {onnx.__version__} (onnxruntime: {str(e)[:300]})"
    max_err = 0.0
    for k, seq in enumerate(SEQ_LENS):
        feeds = {n: v for n, v in make_inputs(family, seq, 100 + k).items() if n in in_names}
        outs = sess.run(None, feeds)
        with torch.no_grad():
            ref = torch_model(*[torch.from_numpy(feeds[n]) for n in in_names]).numpy()
        max_err = max(max_err, float(np.abs(outs[0] - ref).max()))
        d = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        for i, n in enumerate(in_names):
            t = numpy_helper.from_array(feeds[n], n)
            open(os.path.join(d, f"input_{i}.pb"), "wb").write(t.SerializeToString())
        for j, n in enumerate(out_names):
            t = numpy_helper.from_array(outs[j], n)
            open(os.path.join(d, f"output_{j}.pb"), "wb").write(t.SerializeToString())
    with open(os.path.join(folder, "kiln.yaml"), "w") as f:
        f.write(f"# {family} exported by {exporter}: S is the sequence length, batch is {BATCH}.\n")
        f.write(f"size_dim: {seq_name}\ndims: {{{batch_name}: {BATCH}}}\nmax_size: 32\n")
        f.write("compilation:\n  compile_sizes: [1, 8]\n"
                "  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 32]\n")
    ops = {}
    for n in model.graph.node:
        key = f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        ops[key] = ops.get(key, 0) + 1
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    expect = dict(family=family, exporter=exporter, layers=LAYERS, attention_ops=LAYERS,
                  opsets=opsets, inputs=dims, ops=ops, reference=reference, ref_vs_torch_max_abs_err=max_err,
                  torch=torch.__version__, transformers=transformers.__version__,
                  onnx=onnx.__version__, onnxruntime=ort.__version__)
    with open(os.path.join(folder, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1, sort_keys=True)
    return expect


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    only = sys.argv[2:]  # optional case names, e.g. llama_dynamo23
    report = {}
    for family in ("gpt2", "llama", "bert"):
        for exporter in ("ts17", "dynamo18", "dynamo23", "ortopt"):
            if only and f"{family}_{exporter}" not in only:
                continue
            # dynamo23 exports torch's SDPA (onnx Attention at opset 23); the others trace the
            # eager attention (MatMul, scale, mask, Softmax, MatMul).
            model = family_model(family, "sdpa" if exporter == "dynamo23" else "eager")
            wrapper = LogitsOnly(model, family == "bert").eval()
            name = f"{family}_{exporter}"
            folder = os.path.join(out, name)
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "model.onnx")
            try:
                if exporter == "ortopt":
                    export_ortopt(family, os.path.join(out, f"{family}_ts17", "model.onnx"), path)
                else:
                    export_torch(family, wrapper, path, exporter)
                report[name] = write_case(folder, family, exporter, path, wrapper)
                print(f"{name}: ok ops={report[name]['ops']}", flush=True)
            except Exception as e:  # record and go on with the next exporter
                report[name] = {"error": f"{type(e).__name__}: {e}",
                                "trace": traceback.format_exc()[-3000:]}
                print(f"{name}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                for f in os.listdir(folder):
                    p = os.path.join(folder, f)
                    if os.path.isfile(p):
                        os.remove(p)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
