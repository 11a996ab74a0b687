"""GPU tests of the Python package: compiled test models run through kiln.load / executor.run
with numpy arrays, torch CUDA tensors and __cuda_array_interface__ objects, compared with
onnxruntime; the generator against onnxruntime's greedy tokens. Each test skips only when
kiln.device_available() is false, and fails instead when KILN_REQUIRE_GPU=1."""

import json
import unittest

from kiln_test_support import MLP, MODELS, compiled, kiln, mlp_artifact, require_gpu

GPT2 = MODELS / "exported" / "gpt2_ts17_sdpa"
GPT2_KV = MODELS / "kv" / "gpt2_ts17_kv"
FP32 = dict(rtol=1e-3, atol=1e-5)  # the fp32 end-to-end tolerance (tests/README.md)


def onnxruntime_session(path):
    import onnxruntime as ort
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


class CudaArray:
    """A device array known only through __cuda_array_interface__ (wraps a torch tensor)."""

    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class GpuTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)

    def test_mlp_numpy_every_mode(self):
        import numpy as np
        ref = onnxruntime_session(MLP / "model.onnx")
        rng = np.random.default_rng(0)
        with kiln.load(mlp_artifact()) as m:
            for mode in ("FULL", "PIECEWISE", "NONE"):
                with m.executor(mode) as ex:
                    self.assertEqual((ex.requested_mode, ex.mode, ex.downgrade_reason),
                                     (mode, mode, ""))
                    self.assertEqual(ex.captured_sizes, [] if mode == "NONE"
                                     else [1, 2, 4, 8, 16, 32, 64])
                    for s in (1, 3, 8, 13, 64):  # 13: padded to the captured 16
                        x = rng.standard_normal((s, 64), dtype=np.float32)
                        out = ex.run({"x": x})
                        self.assertEqual(sorted(out), ["logits", "probs"])
                        want = dict(zip(["probs", "logits"], ref.run(["probs", "logits"],
                                                                     {"x": x})))
                        for name, w in want.items():
                            self.assertEqual(out[name].shape, (s, 32))
                            self.assertEqual(out[name].dtype, np.float32)
                            np.testing.assert_allclose(out[name], w, **FP32,
                                                       err_msg=f"{mode} size {s} {name}")

    def test_executor_reports_a_downgrade(self):
        # A model not compiled for generation runs FULL_AND_PIECEWISE as PIECEWISE, and says why.
        with kiln.load(mlp_artifact()) as m, m.executor("FULL_AND_PIECEWISE") as ex:
            self.assertEqual((ex.requested_mode, ex.mode), ("FULL_AND_PIECEWISE", "PIECEWISE"))
            self.assertIn("generation", ex.downgrade_reason)

    def test_mlp_numpy_output_subset(self):
        import numpy as np
        x = np.random.default_rng(1).standard_normal((5, 64), dtype=np.float32)
        want = onnxruntime_session(MLP / "model.onnx").run(["logits"], {"x": x})[0]
        with kiln.load(mlp_artifact()) as m, m.executor("FULL") as ex:
            buf = np.full((5, 32), np.nan, np.float32)
            out = ex.run({"x": x}, outputs={"logits": buf})
            self.assertEqual(list(out), ["logits"])
            self.assertIs(out["logits"], buf)
            np.testing.assert_allclose(buf, want, **FP32)
            ex(dict(x=x), outputs={"logits": buf})  # __call__ is run
            # bind: checked once, then rerun on the same buffers with new contents.
            bound = ex.bind({"x": x}, outputs={"logits": buf})
            self.assertEqual(bound.size, 5)
            x[:] = np.random.default_rng(3).standard_normal((5, 64), dtype=np.float32)
            want = onnxruntime_session(MLP / "model.onnx").run(["logits"], {"x": x})[0]
            self.assertIs(bound()["logits"], buf)
            np.testing.assert_allclose(buf, want, **FP32)

    def test_run_errors(self):
        import numpy as np
        with kiln.load(mlp_artifact()) as m, m.executor("FULL") as ex:
            x = np.zeros((4, 64), np.float32)
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": x.astype(np.float16)})
            self.assertIn("input 'x': got a numpy array of float16; the model takes float32",
                          str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": x, "y": x})
            self.assertIn("unknown input 'y'", str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": x}, outputs={"nope": np.zeros((4, 32), np.float32)})
            self.assertIn("unknown output 'nope'", str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": x}, outputs={"probs": np.zeros((5, 32), np.float32)})
            self.assertIn("output 'probs': shape [5, 32]; at size 4 it is [4, 32]",
                          str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": np.zeros((65, 64), np.float32)})
            self.assertIn("max_size = 64", str(cm.exception))

            # Host memory passed as device memory: kiln_executor_run's own check, raised with
            # kiln_last_error()'s message.
            class HostAsDevice:
                __cuda_array_interface__ = {"shape": (4, 64), "typestr": "<f4",
                                            "data": (x.ctypes.data, False), "version": 3,
                                            "strides": None, "stream": None}
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": HostAsDevice()})
            self.assertEqual(cm.exception.status, "INVALID_ARGUMENT")
            self.assertIn("marked as device memory", str(cm.exception))
        with self.assertRaises(kiln.FailedPreconditionError):
            ex.run({"x": x})
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.load(mlp_artifact()).executor("FASTEST")

    def test_mlp_torch_cuda_tensors_in_and_out(self):
        import numpy as np
        import torch
        ref = onnxruntime_session(MLP / "model.onnx")
        torch.manual_seed(0)
        with kiln.load(mlp_artifact()) as m, m.executor("FULL") as ex:
            for s in (1, 7, 32):
                x = torch.randn(s, 64, device="cuda")
                x = x * 2  # produced by a kernel on torch's stream just before the run
                probs = torch.full((s, 32), float("nan"), device="cuda")
                logits = torch.full((s, 32), float("nan"), device="cuda")
                out = ex.run({"x": x}, outputs={"probs": probs, "logits": logits})
                self.assertIs(out["probs"], probs)
                want = ref.run(["probs", "logits"], {"x": x.cpu().numpy()})
                np.testing.assert_allclose(probs.cpu().numpy(), want[0], **FP32)
                np.testing.assert_allclose(logits.cpu().numpy(), want[1], **FP32)
                # Device in, host out; and __cuda_array_interface__ objects in and out.
                host = ex.run({"x": x})
                np.testing.assert_allclose(host["logits"], want[1], **FP32)
                lo = torch.zeros(s, 32, device="cuda")
                ex.run({"x": CudaArray(x)}, outputs={"logits": CudaArray(lo)})
                np.testing.assert_allclose(lo.cpu().numpy(), want[1], **FP32)
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": torch.zeros(64, 4, device="cuda").t()})
            self.assertIn("not contiguous", str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": torch.zeros(4, 64, device="cuda", dtype=torch.float16)})
            self.assertIn("torch cuda tensor of float16", str(cm.exception))

    def test_mlp_run_ordered_on_a_torch_stream(self):
        import numpy as np
        import torch
        ref = onnxruntime_session(MLP / "model.onnx")
        torch.manual_seed(1)
        side = torch.cuda.Stream()
        with kiln.load(mlp_artifact()) as m, m.executor("FULL") as ex, torch.cuda.stream(side):
            for s in (1, 7, 32, 40):
                big = torch.empty(1 << 28, device="cuda")
                x = torch.randn(s, 64, device="cuda")
                big.fill_(1.0)  # a long kernel on the stream before the input is written
                x = x * 2
                logits = torch.full((s, 32), float("nan"), device="cuda")
                out = ex.run({"x": x}, outputs={"logits": logits}, stream=side)
                self.assertIs(out["logits"], logits)
                got = logits.cpu().numpy()  # a copy on `side`, after kiln's work
                want = ref.run(["logits"], {"x": x.cpu().numpy()})
                np.testing.assert_allclose(got, want[0], **FP32)
                # A bound run on the raw handle, twice in a row without waiting.
                x2 = x + 1
                bound = ex.bind({"x": x2}, outputs={"logits": logits}, stream=side.cuda_stream)
                bound()
                bound()
                want = ref.run(["logits"], {"x": x2.cpu().numpy()})
                np.testing.assert_allclose(logits.cpu().numpy(), want[0], **FP32)
            for bad, what in (({"x": np.zeros((4, 64), np.float32)}, "input 'x' is host memory"),):
                with self.assertRaises(kiln.InvalidArgumentError) as cm:
                    ex.run(bad, outputs={"logits": torch.zeros(4, 32, device="cuda")},
                           stream=side)
                self.assertIn(what, str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": torch.zeros(4, 64, device="cuda")}, stream=side)
            self.assertIn("writes device tensors only", str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": torch.zeros(4, 64, device="cuda")},
                       outputs={"logits": np.zeros((4, 32), np.float32)}, stream=side)
            self.assertIn("output 'logits' is host memory", str(cm.exception))
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({"x": torch.zeros(4, 64, device="cuda")},
                       outputs={"logits": torch.zeros(4, 32, device="cuda")}, stream="fast")
            self.assertIn("torch.cuda.Stream or an integer cudaStream_t", str(cm.exception))

    def test_gpt2_export_numpy_and_torch(self):
        import numpy as np
        import torch
        cfg = ("size_dim: seq\ndims: {batch: 2}\nmax_size: 32\nprecision: fp32\n"
               "compilation:\n  compile_sizes: [1, 8]\n  cudagraph_capture_sizes: [1, 2, 4, 8, 16,"
               " 32]\nautotune: {enabled: 'off'}\n")
        art = compiled("gpt2", GPT2 / "model.onnx", cfg)
        ref = onnxruntime_session(GPT2 / "model.onnx")
        rng = np.random.default_rng(2)
        with kiln.load(art) as m:
            self.assertEqual([t.name for t in m.inputs], ["input_ids", "attention_mask"])
            self.assertEqual(m.inputs[0].dims, (2, "S"))
            self.assertEqual(m.outputs[0].dims, (2, "S", 128))
            for mode in ("FULL", "PIECEWISE"):
                with m.executor(mode) as ex:
                    for s in (1, 5, 11, 32):
                        ids = rng.integers(3, 128, size=(2, s), dtype=np.int64)
                        mask = np.ones((2, s), np.int64)
                        want = ref.run(None, {"input_ids": ids, "attention_mask": mask})[0]
                        got = ex.run({"input_ids": ids, "attention_mask": mask})["output"]
                        np.testing.assert_allclose(got, want, **FP32, err_msg=f"{mode} {s}")
                        out = torch.empty(2, s, 128, device="cuda")
                        ex.run({"input_ids": torch.from_numpy(ids).cuda(),
                                "attention_mask": torch.from_numpy(mask).cuda()},
                               outputs={"output": out})
                        np.testing.assert_allclose(out.cpu().numpy(), want, **FP32)

    def test_generator_greedy_tokens(self):
        import numpy as np
        art = compiled("gpt2_kv", GPT2_KV / "model.onnx", GPT2_KV / "kiln.yaml")
        refs = json.loads((GPT2_KV / "greedy.json").read_text())["prompts"]
        with kiln.load(art) as m:
            with m.executor("FULL") as ex, self.assertRaises(kiln.InvalidArgumentError) as cm:
                ex.run({t.name: np.zeros(t.shape(3), t.dtype) for t in m.inputs})
            self.assertIn("compiled for generation", str(cm.exception))
            with m.generator(return_logits=True) as g:
                self.assertEqual(g.mode, "FULL_AND_PIECEWISE")
                self.assertEqual(g.downgrade_reason, "")
                self.assertEqual(g.vocab_size, len(refs[0]["step_logits"][0]))
                for i, r in enumerate(refs):
                    n = len(r["tokens"])
                    g.add(10 + i, max_new_tokens=n)
                    t = g.prefill(10 + i, r["prompt"])
                    np.testing.assert_allclose(t.logits, r["step_logits"][0], rtol=1e-3,
                                               atol=1e-3)
                    tokens = [t.token]
                    while not t.finished:
                        t = g.decode([10 + i])[0]
                        tokens.append(t.token)
                    self.assertEqual(tokens, r["tokens"])
                    g.free(10 + i)
                self.assertEqual(g.kv_cache_info().live_sequences, 0)
                with self.assertRaises(kiln.NotFoundError):
                    g.free(99)
                self.assertEqual(g.generate(refs[0]["prompt"], max_new_tokens=4),
                                 refs[0]["tokens"][:4])


if __name__ == "__main__":
    unittest.main()
