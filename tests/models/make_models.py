#!/usr/bin/env python3
"""Generates the checked-in test models and their ONNX backend-test data.

Run from anywhere with Debian's python3 (python3-onnx 1.12, python3-numpy):
    /usr/bin/python3 tests/models/make_models.py
The output is deterministic (fixed seeds); re-running must not change the checked-in files.

    /usr/bin/python3 tests/models/make_models.py --bench-mlp12 OUT_DIR
writes the 12-layer benchmark model (not checked in: 48 MiB of weights) into OUT_DIR instead:
x[batch, 1024] -> 11 x Relu(MatMul(1024x1024) + Add) -> MatMul + Add -> probs = Softmax, with
He-scaled weights so activations stay O(1), and a kiln.yaml with max_size 512, 36 capture sizes
([1, 2, 4, 8] + every 16 up to 512) and compile_sizes [1, 8, 64]. tools/bench_gpu.sh uses it.

mlp_softmax/: x[batch, 64] -> Relu(MatMul + Add) -> Relu(Gemm transB) -> Gemm(alpha=0.5)
-> logits[batch, 32], probs = Softmax(logits). Expected outputs are computed in float64 from
the float32 weights and inputs, then rounded to float32.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp_softmax_weights(rng):
    def dense(fan_in, shape):
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    return {
        "W1": dense(64, (64, 128)),
        "b1": (0.1 * rng.standard_normal(128)).astype(np.float32),
        "W2": dense(128, (96, 128)),  # used with transB=1
        "b2": (0.1 * rng.standard_normal(96)).astype(np.float32),
        "W3": 3.0 * dense(96, (96, 32)),  # wider logits: a softmax that is not near-uniform
        "b3": (0.1 * rng.standard_normal(32)).astype(np.float32),
    }


def mlp_softmax_model(w):
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1_mm"], name="fc1_matmul"),
        helper.make_node("Add", ["h1_mm", "b1"], ["h1_pre"], name="fc1_bias"),
        helper.make_node("Relu", ["h1_pre"], ["y1"], name="relu1"),
        helper.make_node("Gemm", ["y1", "W2", "b2"], ["h2_pre"], name="fc2", transB=1),
        helper.make_node("Relu", ["h2_pre"], ["y2"], name="relu2"),
        helper.make_node("Gemm", ["y2", "W3", "b3"], ["logits"], name="fc3", alpha=0.5, beta=1.0),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_softmax",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        outputs=[
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 32]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 32]),
        ],
        initializer=[numpy_helper.from_array(v, name=k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln tests/models/make_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp_softmax_reference(w, x):
    f = {k: v.astype(np.float64) for k, v in w.items()}
    x = x.astype(np.float64)
    y1 = np.maximum(x @ f["W1"] + f["b1"], 0.0)
    y2 = np.maximum(y1 @ f["W2"].T + f["b2"], 0.0)
    logits = 0.5 * (y2 @ f["W3"]) + 1.0 * f["b3"]
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    return probs.astype(np.float32), logits.astype(np.float32)


KILN_YAML = """\
# kiln compile config for tests/models/mlp_softmax (schema: schemas/config.md)
size_dim: batch
max_size: 64
precision: fp32
targets: [sm_90]
compilation:
  mode: FULL
  compile_sizes: [1, 8]
  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 32, 64]
"""


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name=name).SerializeToString())


def make_mlp_softmax():
    out = os.path.join(HERE, "mlp_softmax")
    os.makedirs(out, exist_ok=True)
    w = mlp_softmax_weights(np.random.default_rng(20261122))
    onnx.save(mlp_softmax_model(w), os.path.join(out, "model.onnx"))
    with open(os.path.join(out, "kiln.yaml"), "w") as f:
        f.write(KILN_YAML)
    data_rng = np.random.default_rng(7)
    for i, batch in enumerate([3, 13]):
        d = os.path.join(out, f"test_data_set_{i}")
        os.makedirs(d, exist_ok=True)
        x = data_rng.standard_normal((batch, 64)).astype(np.float32)
        probs, logits = mlp_softmax_reference(w, x)
        write_tensor(os.path.join(d, "input_0.pb"), x, "x")
        write_tensor(os.path.join(d, "output_0.pb"), probs, "probs")
        write_tensor(os.path.join(d, "output_1.pb"), logits, "logits")


BENCH_WIDTH = 1024
BENCH_LAYERS = 12


def bench_mlp12_model(rng):
    nodes, inits = [], []
    h = "x"
    for i in range(BENCH_LAYERS):
        last = i == BENCH_LAYERS - 1
        # He scaling keeps the variance through Relu layers; the last layer is narrower so the
        # softmax is neither saturated nor uniform.
        scale = np.sqrt((1.0 if last else 2.0) / BENCH_WIDTH)
        w = (scale * rng.standard_normal((BENCH_WIDTH, BENCH_WIDTH))).astype(np.float32)
        b = (0.01 * rng.standard_normal(BENCH_WIDTH)).astype(np.float32)
        inits += [numpy_helper.from_array(w, name=f"W{i}"), numpy_helper.from_array(b, name=f"b{i}")]
        nodes.append(helper.make_node("MatMul", [h, f"W{i}"], [f"mm{i}"], name=f"fc{i}_matmul"))
        out = "logits" if last else f"pre{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [out], name=f"fc{i}_bias"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"h{i}"], name=f"relu{i}"))
            h = f"h{i}"
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes,
        "bench_mlp12",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", BENCH_WIDTH])],
        outputs=[helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", BENCH_WIDTH])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln tests/models/make_models.py --bench-mlp12")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def bench_capture_sizes():
    return [1, 2, 4, 8] + list(range(16, 513, 16))


def make_bench_mlp12(out):
    os.makedirs(out, exist_ok=True)
    onnx.save(bench_mlp12_model(np.random.default_rng(20261212)), os.path.join(out, "model.onnx"))
    sizes = bench_capture_sizes()
    assert len(sizes) == 36
    with open(os.path.join(out, "kiln.yaml"), "w") as f:
        f.write("# kiln compile config for the 12-layer bench model (tests/models/make_models.py)\n"
                "size_dim: batch\n"
                "max_size: 512\n"
                "precision: fp32\n"
                "targets: [sm_90]\n"
                "compilation:\n"
                "  mode: FULL\n"
                "  compile_sizes: [1, 8, 64]\n"
                f"  cudagraph_capture_sizes: [{', '.join(str(s) for s in sizes)}]\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-mlp12", metavar="OUT_DIR",
                        help="write the 12-layer bench model and its kiln.yaml into OUT_DIR")
    args = parser.parse_args()
    if args.bench_mlp12:
        make_bench_mlp12(args.bench_mlp12)
    else:
        make_mlp_softmax()
