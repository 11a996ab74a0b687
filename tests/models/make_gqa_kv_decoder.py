#!/usr/bin/env python3
"""Builds a tiny decoder on onnxruntime's com.microsoft.GroupQueryAttention with a KV cache, the
way onnxruntime-genai's builder lays such models out, plus an onnxruntime greedy loop over it as
the reference for generation (onnx, onnxruntime, numpy; runs on CPU):

    python3 tests/models/make_gqa_kv_decoder.py OUT_DIR

Writes OUT_DIR/gqa_ort_kv/ and OUT_DIR/gqa_ort_kv_shared/, each with model.onnx and greedy.json
in export_kv_decoders.py's format; the folders are committed under tests/models/kv/.

The model: 2 layers, hidden 32, 2 query heads and 1 KV head of 16, vocabulary 128, random
weights (fixed seed). Token embedding + learned position embedding (Gather of position_ids: GQA
runs without rotary, do_rotary=0), then per layer LayerNorm → Q/K/V MatMuls → GroupQueryAttention
→ output MatMul → residual, LayerNorm → MLP (MatMul, Relu, MatMul) → residual; final LayerNorm and
LM head. GQA's seqlens_k is ReduceSum(attention_mask) - 1 and total_sequence_length the mask's
length, both int32, as the builder computes them.

Inputs: input_ids, position_ids [batch, seq], attention_mask [batch, total_seq],
past_key_values.N.key|value [batch, 1, P, 16]; outputs: logits [batch, seq, 128],
present.N.key|value [batch, 1, P', 16]. The two past/present layouts of GQA:
  gqa_ort_kv         P = past_seq (the tokens so far), P' = past_seq + seq: present = the past
                     with the new keys appended; the greedy loop feeds each present back.
  gqa_ort_kv_shared  past_present_share_buffer: P = P' = max_seq, a buffer of the maximum
                     length (MAX_SEQ rows in the loop) of which seqlens_k + 1 rows are valid
                     (onnxruntime writes the new rows after the valid ones); the loop starts
                     from a zero buffer.
"""

import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_kv_decoders import NEW_TOKENS, PROMPTS, greedy_steps  # noqa: E402

LAYERS = 2
HIDDEN = 32
HEADS = 2
KV_HEADS = 1
HEAD_DIM = 16
VOCAB = 128
FFN = 64
MAX_POS = 128
MAX_SEQ = 64


def build(shared):
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def weight(name, shape, scale=0.2):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                             .astype(np.float32), name))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, name, domain="", **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def layer_norm(x, name):
        gamma = const(name + ".weight", (1.0 + 0.1 * rng.standard_normal(HIDDEN))
                      .astype(np.float32))
        beta = const(name + ".bias", (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        return node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    # seqlens_k = sum(mask) - 1, total_sequence_length = mask's length (int32).
    const("one_i64", np.array(1, np.int64))
    const("axis1", np.array([1], np.int64))
    s = node("ReduceSum", ["attention_mask", "axis1"], "mask_sum", keepdims=0)
    s = node("Sub", [s, "one_i64"], "mask_sum_m1")
    seqlens = node("Cast", [s], "seqlens_k", to=TensorProto.INT32)
    shape = node("Shape", ["attention_mask"], "mask_shape")
    const("idx1", np.array(1, np.int64))
    total = node("Gather", [shape, "idx1"], "mask_len", axis=0)
    total = node("Cast", [total], "total_sequence_length", to=TensorProto.INT32)

    tok = node("Gather", [weight("embed_tokens", (VOCAB, HIDDEN), 1.0), "input_ids"], "tok_emb")
    pos = node("Gather", [weight("embed_positions", (MAX_POS, HIDDEN), 1.0), "position_ids"],
               "pos_emb")
    x = node("Add", [tok, pos], "embeddings")
    for l in range(LAYERS):
        p = f"layers.{l}"
        h = layer_norm(x, f"{p}.input_norm")
        q = node("MatMul", [h, weight(f"{p}.q_proj", (HIDDEN, HEADS * HEAD_DIM))], f"{p}.q")
        k = node("MatMul", [h, weight(f"{p}.k_proj", (HIDDEN, KV_HEADS * HEAD_DIM))], f"{p}.k")
        v = node("MatMul", [h, weight(f"{p}.v_proj", (HIDDEN, KV_HEADS * HEAD_DIM))], f"{p}.v")
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [q, k, v, f"past_key_values.{l}.key", f"past_key_values.{l}.value", seqlens, total],
            [f"{p}.attn", f"present.{l}.key", f"present.{l}.value"], name=f"{p}.gqa",
            domain="com.microsoft", num_heads=HEADS, kv_num_heads=KV_HEADS, do_rotary=0))
        o = node("MatMul", [f"{p}.attn", weight(f"{p}.o_proj", (HEADS * HEAD_DIM, HIDDEN))],
                 f"{p}.o")
        x = node("Add", [x, o], f"{p}.residual1")
        h = layer_norm(x, f"{p}.post_norm")
        h = node("MatMul", [h, weight(f"{p}.up", (HIDDEN, FFN))], f"{p}.up_out")
        h = node("Relu", [h], f"{p}.act")
        h = node("MatMul", [h, weight(f"{p}.down", (FFN, HIDDEN))], f"{p}.down_out")
        x = node("Add", [x, h], f"{p}.residual2")
    x = layer_norm(x, "final_norm")
    node("MatMul", [x, weight("lm_head", (HIDDEN, VOCAB))], "logits")

    past = "max_seq" if shared else "past_seq"
    present = "max_seq" if shared else "total_seq"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch", "total_seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch", "seq", VOCAB])]
    for l in range(LAYERS):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{l}.{kv}", TensorProto.FLOAT,
                ["batch", KV_HEADS, past, HEAD_DIM]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{l}.{kv}", TensorProto.FLOAT, ["batch", KV_HEADS, present, HEAD_DIM]))
    graph = helper.make_graph(nodes, "gqa_kv_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def greedy_loop(sess, prompt, shared):
    """Prefill with an empty past (shared: a zero buffer of MAX_SEQ rows), then one token per
    step feeding the presents back as pasts; returns the tokens and each step's last logits."""
    rows = MAX_SEQ if shared else 0
    past = [np.zeros((1, KV_HEADS, rows, HEAD_DIM), np.float32) for _ in range(2 * LAYERS)]
    names = [f"past_key_values.{l}.{kv}" for l in range(LAYERS) for kv in ("key", "value")]
    return greedy_steps(sess, prompt, past, names)


def numpy_greedy(model_path, prompt):
    """The same decoder without a cache (every step recomputes the whole sequence), from the
    model's own weights: checks onnxruntime's cached loop."""
    m = onnx.load(model_path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

    def norm(x, name):
        x = x - x.mean(-1, keepdims=True)
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5) * w[name + ".weight"] + \
            w[name + ".bias"]

    seq = list(prompt)
    tokens = []
    for _ in range(NEW_TOKENS):
        n = len(seq)
        x = w["embed_tokens"][seq] + w["embed_positions"][:n]
        for l in range(LAYERS):
            p = f"layers.{l}"
            h = norm(x, f"{p}.input_norm")
            q = (h @ w[f"{p}.q_proj"]).reshape(n, HEADS, HEAD_DIM)
            k, v = h @ w[f"{p}.k_proj"], h @ w[f"{p}.v_proj"]
            att = np.einsum("shd,td->hst", q, k) / np.sqrt(HEAD_DIM)
            att = att + np.triu(np.full((n, n), -np.inf), 1)
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hst,td->shd", att, v).reshape(n, HEADS * HEAD_DIM)
            x = x + o @ w[f"{p}.o_proj"]
            h = np.maximum(norm(x, f"{p}.post_norm") @ w[f"{p}.up"], 0)
            x = x + h @ w[f"{p}.down"]
        tok = int(np.argmax((norm(x, "final_norm") @ w["lm_head"])[-1]))
        tokens.append(tok)
        seq.append(tok)
    return tokens


def main():
    import onnxruntime as ort
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/models/kv"
    for shared in (False, True):
        folder = os.path.join(out, "gqa_ort_kv_shared" if shared else "gqa_ort_kv")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        onnx.save(build(shared), path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(3)
        result = {"family": "gqa", "exporter": "onnx_helper_shared" if shared else "onnx_helper",
                  "new_tokens": NEW_TOKENS, "prompts": []}
        for n in PROMPTS:
            prompt = [int(x) for x in rng.integers(3, VOCAB, size=n)]
            tokens, logits = greedy_loop(sess, prompt, shared)
            ref = numpy_greedy(path, prompt)
            if tokens != ref:
                raise RuntimeError(f"{folder}: onnxruntime's greedy tokens differ from numpy's: "
                                   f"{tokens} vs {ref}")
            # export_kv_decoders.py's key: the cache-less reference's tokens.
            result["prompts"].append({"prompt": prompt, "tokens": tokens, "torch_tokens": ref,
                                      "step_logits": logits})
        with open(os.path.join(folder, "greedy.json"), "w") as f:
            json.dump(result, f)
        print(folder, "ok")


if __name__ == "__main__":
    main()
