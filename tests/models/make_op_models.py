#!/usr/bin/env python3
"""Single-op models for the ops Debian's ONNX 1.12 test data cannot cover: the com.microsoft
contrib ops and the opset-23 ops (Attention, RMSNormalization, RotaryEmbedding). Their expected
outputs come from onnxruntime (CPU provider), falling back to onnx.reference where onnxruntime
refuses a model; expect.json records which one answered. Runs on the GPU machine:

    python3 tests/models/make_op_models.py OUT_DIR

Writes OUT_DIR/<case>/model.onnx + test_data_set_0/ in the ONNX backend-test layout and
OUT_DIR/report.json. The folders are committed under tests/models/ops/. Fixed seeds.
"""

import json
import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F = TensorProto.FLOAT
I32 = TensorProto.INT32
I64 = TensorProto.INT64
B, S, H, KV, D = 2, 5, 4, 2, 8  # batch, sequence, query heads, key/value heads, head size
HID = H * D


def rnd(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def rope_cache(max_pos, half):
    inv = 1.0 / (10000 ** (np.arange(half, dtype=np.float64) / half))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def cases(rng):
    """(name, op_type, domain, opset, attrs, inputs [(name, array or None)], outputs, inits)."""
    out = []
    x3 = rnd(rng, B, S, HID)
    q4, k4, v4 = rnd(rng, B, H, S, D), rnd(rng, B, KV, S, D), rnd(rng, B, KV, S, D)
    pad = np.ones((B, S), np.int32)
    pad[1, 3:] = 0
    cos, sin = rope_cache(16, D // 2)
    pos = np.tile(np.arange(S, dtype=np.int64), (B, 1))
    # --- opset 23
    out.append(("attention_4d_gqa", "Attention", "", 23, {},
                [("Q", q4), ("K", k4), ("V", v4)], ["Y"], {}))
    out.append(("attention_4d_causal_scaled", "Attention", "", 23,
                {"is_causal": 1, "scale": 0.25},
                [("Q", rnd(rng, B, H, S, D)), ("K", rnd(rng, B, H, S, D)),
                 ("V", rnd(rng, B, H, S, D))], ["Y"], {}))
    mask = np.where(rng.random((B, 1, S, S)) < 0.2, -1e4, 0.0).astype(np.float32)
    out.append(("attention_4d_float_mask", "Attention", "", 23, {},
                [("Q", rnd(rng, B, H, S, D)), ("K", rnd(rng, B, H, S, D)),
                 ("V", rnd(rng, B, H, S, D)), ("attn_mask", mask)], ["Y"], {}))
    out.append(("attention_3d_gqa_causal", "Attention", "", 23,
                {"q_num_heads": H, "kv_num_heads": KV, "is_causal": 1},
                [("Q", x3), ("K", rnd(rng, B, S, KV * D)), ("V", rnd(rng, B, S, KV * D))],
                ["Y"], {}))
    out.append(("rms_normalization", "RMSNormalization", "", 23, {"epsilon": 1e-5},
                [("X", x3), ("scale", rnd(rng, HID))], ["Y"], {}))
    out.append(("rotary_embedding_4d", "RotaryEmbedding", "", 23, {},
                [("X", rnd(rng, B, H, S, D)), ("cos_cache", cos), ("sin_cache", sin),
                 ("position_ids", pos)], ["Y"], {}))
    out.append(("rotary_embedding_3d_interleaved", "RotaryEmbedding", "", 23,
                {"interleaved": 1, "num_heads": H},
                [("X", x3), ("cos_cache", cos), ("sin_cache", sin), ("position_ids", pos)],
                ["Y"], {}))
    # --- com.microsoft
    out.append(("ms_multi_head_attention", "MultiHeadAttention", MS, 1, {"num_heads": H},
                [("query", x3), ("key", rnd(rng, B, S, HID)), ("value", rnd(rng, B, S, HID))],
                ["output"], {}))
    out.append(("ms_multi_head_attention_key_padding", "MultiHeadAttention", MS, 1,
                {"num_heads": H},
                [("query", x3), ("key", rnd(rng, B, S, HID)), ("value", rnd(rng, B, S, HID)),
                 ("bias", None), ("key_padding_mask", pad)], ["output"], {}))
    seqlens = np.full((B,), S - 1, np.int32)
    total = np.array(S, np.int32)
    out.append(("ms_group_query_attention", "GroupQueryAttention", MS, 1,
                {"num_heads": H, "kv_num_heads": KV},
                [("query", x3), ("key", rnd(rng, B, S, KV * D)), ("value", rnd(rng, B, S, KV * D)),
                 ("past_key", None), ("past_value", None), ("seqlens_k", seqlens),
                 ("total_sequence_length", total)],
                ["output", "present_key", "present_value"], {}))
    w = rnd(rng, HID, 3 * HID, scale=0.2)
    bqkv = rnd(rng, 3 * HID, scale=0.1)
    out.append(("ms_attention_mask", "Attention", MS, 1, {"num_heads": H},
                [("input", x3), ("weights", w), ("bias", bqkv), ("mask_index", pad)],
                ["output"], {}))
    out.append(("ms_attention_unidirectional", "Attention", MS, 1,
                {"num_heads": H, "unidirectional": 1},
                [("input", x3), ("weights", w), ("bias", bqkv)], ["output"], {}))
    g, be, bi = rnd(rng, HID), rnd(rng, HID), rnd(rng, HID)
    out.append(("ms_skip_layer_normalization", "SkipLayerNormalization", MS, 1,
                {"epsilon": 1e-5},
                [("input", x3), ("skip", rnd(rng, B, S, HID)), ("gamma", g), ("beta", be),
                 ("bias", bi)], ["output"], {}))
    out.append(("ms_skip_simplified_layer_normalization", "SkipSimplifiedLayerNormalization", MS,
                1, {"epsilon": 1e-5},
                [("input", x3), ("skip", rnd(rng, B, S, HID)), ("gamma", g)], ["output"], {}))
    out.append(("simplified_layer_normalization", "SimplifiedLayerNormalization", "", 17,
                {"epsilon": 1e-5, "axis": -1}, [("X", x3), ("scale", g)], ["Y"], {}))
    out.append(("ms_fast_gelu", "FastGelu", MS, 1, {},
                [("X", x3), ("bias", bi)], ["Y"], {}))
    out.append(("ms_bias_gelu", "BiasGelu", MS, 1, {}, [("A", x3), ("B", bi)], ["C"], {}))
    cos2, sin2 = rope_cache(16, D // 2)
    out.append(("ms_rotary_embedding", "RotaryEmbedding", MS, 1, {"num_heads": H},
                [("input", x3), ("position_ids", pos), ("cos_cache", cos2),
                 ("sin_cache", sin2)], ["output"], {}))
    out.append(("ms_rotary_embedding_interleaved", "RotaryEmbedding", MS, 1,
                {"num_heads": H, "interleaved": 1},
                [("input", x3), ("position_ids", pos), ("cos_cache", cos2),
                 ("sin_cache", sin2)], ["output"], {}))
    return out


def dtype_of(a):
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def build(name, op, domain, opset, attrs, inputs, outputs):
    ins = [n if a is not None else "" for n, a in inputs]
    node = helper.make_node(op, ins, outputs, name=name, domain=domain, **attrs)
    g_in = [helper.make_tensor_value_info(n, dtype_of(a), a.shape) for n, a in inputs
            if a is not None]
    g_out = [helper.make_tensor_value_info(o, F, None) for o in outputs]
    opsets = [helper.make_opsetid("", max(opset if domain == "" else 17, 17))]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    graph = helper.make_graph([node], name, g_in, g_out)
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def run(model, feeds):
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds), "onnxruntime " + ort.__version__
    except Exception as e:  # onnx.reference knows the standard ops onnxruntime may not
        from onnx.reference import ReferenceEvaluator
        if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            raise
        outs = ReferenceEvaluator(model).run(None, feeds)
        return outs, f"onnx.reference {onnx.__version__} (onnxruntime: {str(e)[:200]})"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    report = {}
    for name, op, domain, opset, attrs, inputs, outputs, _ in cases(rng):
        try:
            model = build(name, op, domain, opset, attrs, inputs, outputs)
            feeds = {n: a for n, a in inputs if a is not None}
            outs, who = run(model, feeds)
            folder = os.path.join(out, name)
            d = os.path.join(folder, "test_data_set_0")
            os.makedirs(d, exist_ok=True)
            onnx.save(model, os.path.join(folder, "model.onnx"))
            for i, (n, a) in enumerate((n, a) for n, a in inputs if a is not None):
                open(os.path.join(d, f"input_{i}.pb"), "wb").write(
                    numpy_helper.from_array(a, n).SerializeToString())
            for j, o in enumerate(outs[:1]):  # the main output only: presents are copies
                open(os.path.join(d, f"output_{j}.pb"), "wb").write(
                    numpy_helper.from_array(np.asarray(o), outputs[j]).SerializeToString())
            with open(os.path.join(folder, "expect.json"), "w") as f:
                json.dump({"op": op, "domain": domain, "reference": who}, f, indent=1)
            report[name] = who
            print(f"{name}: ok ({who[:60]})", flush=True)
        except Exception as e:
            report[name] = f"FAILED {type(e).__name__}: {e}"[:1500]
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)
            traceback.print_exc(limit=2)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
