"""python/kiln/runtime.py: load, metadata and the argument checks made in Python. Loading an
artifact uploads its weights, so it needs a GPU: without one, load must fail cleanly with
FAILED_PRECONDITION; the checks of ex.run's arguments run on model metadata built here."""

import os
import tempfile
import unittest

from kiln_test_support import have, kiln, mlp_artifact, require_gpu, require_numpy
from kiln.runtime import Dim, TensorInfo, _stream_handle, as_arg, infer_size


class FakeDeviceArray:
    """An object with __cuda_array_interface__ (v3); nothing is ever read from its pointer."""

    def __init__(self, shape, typestr, strides=None, ptr=0x7F0000000000, readonly=False,
                 stream=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, readonly), "strides": strides,
                                         "version": 3, "stream": stream}


# The mlp_softmax model's metadata (x: f32 [S, 64] -> probs, logits: f32 [S, 32]) and a
# two-input model with a fixed axis and a 2*S+1 axis.
MLP_IN = [TensorInfo("x", 1, [1, 0], [0, 64], 0)]
TWO_IN = [TensorInfo("input_ids", 5, [0, 1], [2, 0], 1),
          TensorInfo("positions", 5, [2], [1], 0)]


class LoadTest(unittest.TestCase):
    def test_missing_directory(self):
        with self.assertRaises(kiln.NotFoundError) as cm:
            kiln.load("/nonexistent/kiln_cache")
        e = cm.exception
        self.assertEqual(e.status, "NOT_FOUND")
        self.assertIn("/nonexistent/kiln_cache", str(e))

    def test_not_an_artifact(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(kiln.KilnError) as cm:
                kiln.load(d)
            self.assertIn(d, str(cm.exception))

    def test_load_without_gpu_fails_cleanly(self):
        art = mlp_artifact()
        if kiln.device_available():
            self.skipTest("a GPU is present: test_gpu.py loads and runs the model")
        with self.assertRaises(kiln.FailedPreconditionError) as cm:
            kiln.load(art)
        self.assertEqual(cm.exception.status, "FAILED_PRECONDITION")
        self.assertIn("no CUDA device", str(cm.exception))

    def test_trusted_keys_refuse_an_unsigned_artifact_before_the_gpu(self):
        art = mlp_artifact()
        with self.assertRaises(kiln.FailedPreconditionError) as cm:
            kiln.load(art, trusted_keys=["ab" * 32])
        self.assertIn("artifact signature check failed", str(cm.exception))
        self.assertIn("unsigned", str(cm.exception))
        with self.assertRaises(kiln.KilnError) as cm:
            kiln.load(art, trusted_keys=["not a key"])
        self.assertIn("LoadOptions.trusted_keys[0]", str(cm.exception))

    def test_metadata(self):
        require_gpu(self)
        with kiln.load(mlp_artifact()) as m:
            self.assertEqual(m.max_size, 64)
            self.assertEqual([t.name for t in m.inputs], ["x"])
            self.assertEqual([t.name for t in m.outputs], ["probs", "logits"])
            x = m.inputs[0]
            self.assertEqual(x.dims, (Dim(1), 64))
            self.assertEqual(x.dims[0], "S")
            self.assertEqual(x.size_axis, 0)
            self.assertEqual(x.dtype_name, "float32")
            self.assertEqual(x.shape(3), (3, 64))
            if have("numpy"):
                import numpy as np
                self.assertEqual(x.dtype, np.float32)
            self.assertEqual(m.output("logits").shape(5), (5, 32))
            with self.assertRaises(kiln.InvalidArgumentError):
                m.input("nope")
        self.assertTrue(m.closed)
        with self.assertRaises(kiln.FailedPreconditionError):
            m.executor("FULL")


class TensorInfoTest(unittest.TestCase):
    def test_dims(self):
        t = TWO_IN[1]
        self.assertEqual(str(t.dims[0]), "2*S+1")
        self.assertEqual(t.shape(3), (7,))
        self.assertEqual(TWO_IN[0].dims, (2, Dim(1, 0)))
        self.assertEqual(TWO_IN[0].nbytes(5), 2 * 5 * 8)
        self.assertEqual(str(Dim(1, -1)), "S-1")
        self.assertIn("input_ids (int64, [2, S])", repr(TWO_IN[0]))

    def test_modes(self):
        from kiln.runtime import _parse_mode
        self.assertEqual(_parse_mode("FULL"), 2)
        self.assertEqual(_parse_mode("piecewise"), 1)
        self.assertEqual(_parse_mode(None), -1)
        self.assertEqual(_parse_mode(0), 0)
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            _parse_mode("FASTEST")
        self.assertIn("unknown graph mode 'FASTEST'", str(cm.exception))
        with self.assertRaises(kiln.InvalidArgumentError):
            _parse_mode(7)


class ArgumentChecksTest(unittest.TestCase):
    """infer_size / as_arg: what Executor.run checks before calling kiln_executor_run."""

    def args(self, **tensors):
        return {n: as_arg(v, f"input '{n}'") for n, v in tensors.items()}

    def check_fails(self, infos, tensors, *fragments, max_size=64):
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            infer_size(infos, self.args(**tensors), max_size)
        for f in fragments:
            self.assertIn(f, str(cm.exception))
        self.assertIsInstance(cm.exception, ValueError)
        return cm.exception

    def test_device_arrays(self):
        self.assertEqual(infer_size(MLP_IN, self.args(x=FakeDeviceArray((5, 64), "<f4")), 64), 5)
        a = as_arg(FakeDeviceArray((5, 64), "<f4", stream=1), "x")
        self.assertEqual((a.on_device, a.nbytes, a.dtype_name), (1, 5 * 64 * 4, "float32"))
        self.check_fails(MLP_IN, {"x": FakeDeviceArray((5, 64), "<f2")},
                         "input 'x': got a device array (FakeDeviceArray) of float16",
                         "the model takes float32")
        self.check_fails(MLP_IN, {"x": FakeDeviceArray((5, 32), "<f4")},
                         "dim 1 is 32; the model fixes it at 64")
        self.check_fails(MLP_IN, {"x": FakeDeviceArray((5, 64, 1), "<f4")},
                         "rank 3; the model takes rank 2 [S, 64]")
        self.check_fails(MLP_IN, {"x": FakeDeviceArray((65, 64), "<f4")},
                         "size 65 is outside [1, max_size = 64]")
        self.check_fails(MLP_IN, {"x": FakeDeviceArray((0, 64), "<f4")},
                         "dim 0 is 0, which is not S for any size S >= 1")

    def test_stream_handles(self):
        class TorchLikeStream:
            cuda_stream = 0x7f00

        self.assertEqual(_stream_handle(TorchLikeStream()), 0x7f00)
        self.assertEqual(_stream_handle(1), 1)  # the legacy default stream
        for bad in ("fast", -1, True, 1.5):
            with self.assertRaises(kiln.InvalidArgumentError) as cm:
                _stream_handle(bad)
            self.assertIn("a torch.cuda.Stream or an integer cudaStream_t", str(cm.exception))

    def test_names(self):
        x = FakeDeviceArray((5, 64), "<f4")
        e = self.check_fails(MLP_IN, {"x": x, "y": x}, "unknown input 'y'",
                             "the model's inputs are: x (float32, [S, 64])")
        self.assertEqual(e.status, "INVALID_ARGUMENT")
        self.check_fails(TWO_IN, {"input_ids": FakeDeviceArray((2, 3), "<i8")},
                         "missing input 'positions'")

    def test_sizes_must_agree(self):
        ok = {"input_ids": FakeDeviceArray((2, 3), "<i8"),
              "positions": FakeDeviceArray((7,), "<i8")}
        self.assertEqual(infer_size(TWO_IN, self.args(**ok), 64), 3)
        self.check_fails(TWO_IN, {"input_ids": FakeDeviceArray((2, 3), "<i8"),
                                  "positions": FakeDeviceArray((9,), "<i8")},
                         "dim 0 = 9 means size 4, but input 'input_ids' means size 3")
        self.check_fails(TWO_IN, {"input_ids": FakeDeviceArray((2, 3), "<i8"),
                                  "positions": FakeDeviceArray((8,), "<i8")},
                         "dim 0 is 8, which is not 2*S+1")
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            infer_size(TWO_IN, self.args(**ok), 64, size=4)
        self.assertIn("means size 3, but size= means size 4", str(cm.exception))

    def test_layout_and_dtype_refusals(self):
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(FakeDeviceArray((4, 64), "<f4", strides=(4, 16)), "input 'x'")
        self.assertIn("input 'x': the device array is not C-contiguous", str(cm.exception))
        # Contiguous strides spelled out are fine, and so are size-1 dims with any stride.
        as_arg(FakeDeviceArray((4, 64), "<f4", strides=(256, 4)), "x")
        as_arg(FakeDeviceArray((1, 64), "<f4", strides=(8, 4)), "x")
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(FakeDeviceArray((4,), "<c8"), "input 'x'")
        self.assertIn("typestr '<c8' has no kiln dtype", str(cm.exception))
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(FakeDeviceArray((4,), ">f4"), "input 'x'")
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(FakeDeviceArray((4,), "<f4", readonly=True), "output 'y'", output=True)
        self.assertIn("read-only", str(cm.exception))

    def test_numpy_arrays(self):
        require_numpy(self)
        import numpy as np
        self.assertEqual(infer_size(MLP_IN, self.args(x=np.zeros((3, 64), np.float32)), 64), 3)
        self.check_fails(MLP_IN, {"x": np.zeros((3, 64), np.float64)},
                         "input 'x': got a numpy array of float64; the model takes float32")
        self.check_fails(MLP_IN, {"x": np.zeros((3, 64), np.int64)}, "array of int64")
        # A non-contiguous input is copied; a non-contiguous output is refused.
        a = as_arg(np.zeros((64, 3), np.float32).T, "input 'x'")
        self.assertEqual(a.shape, (3, 64))
        self.assertTrue(a.keep.flags.c_contiguous)
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(np.zeros((64, 3), np.float32).T, "output 'y'", output=True)
        self.assertIn("output 'y': the output array is not C-contiguous", str(cm.exception))
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(np.zeros(3, np.complex64), "input 'x'")
        self.assertIn("numpy dtype complex64 has no kiln dtype", str(cm.exception))

    def test_torch_tensors(self):
        if not have("torch"):
            self.skipTest("torch is not installed for this python3")
        import torch
        a = as_arg(torch.zeros(3, 64), "input 'x'")
        self.assertEqual((a.on_device, a.dtype_name, a.shape), (0, "float32", (3, 64)))
        self.assertEqual(as_arg(torch.zeros(2, dtype=torch.bfloat16), "x").dtype_name, "bfloat16")
        self.check_fails(MLP_IN, {"x": torch.zeros(3, 64, dtype=torch.float16)},
                         "got a torch cpu tensor of float16; the model takes float32")
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(torch.zeros(64, 3).t(), "input 'x'")
        self.assertIn("is not contiguous", str(cm.exception))
        with self.assertRaises(kiln.InvalidArgumentError) as cm:
            as_arg(torch.zeros(3, dtype=torch.complex64), "input 'x'")
        self.assertIn("torch dtype torch.complex64 has no kiln dtype", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
