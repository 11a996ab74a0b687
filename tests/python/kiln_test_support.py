"""Shared helpers of the Python package's tests (tests/python/): the package on sys.path, the
repository's paths, the GPU gate and compiled test models."""

import os
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(os.environ.get("KILN_SOURCE_ROOT") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(REPO / "python"))

import kiln  # noqa: E402

MODELS = REPO / "tests" / "models"
MLP = MODELS / "mlp_softmax"


def have(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def require_gpu(test):
    """Skips the test when no CUDA device is usable, or fails it when KILN_REQUIRE_GPU=1."""
    if kiln.device_available():
        return
    why = kiln.device_error()
    if os.environ.get("KILN_REQUIRE_GPU") == "1":
        test.fail(f"KILN_REQUIRE_GPU=1 but no CUDA device is usable: {why}")
    test.skipTest(f"needs a CUDA GPU ({why})")


def require_numpy(test):
    if not have("numpy"):
        test.skipTest("numpy is not installed for this python3")


_compiled = {}
_tmp = None


def compiled(name, model, config):
    """Compiles `model` with `config` once per test process (into a temporary cache) and returns
    the artifact directory."""
    global _tmp
    if name not in _compiled:
        if _tmp is None:
            _tmp = tempfile.TemporaryDirectory(prefix="kiln_pytest_")
        _compiled[name] = kiln.compile(model, config, os.path.join(_tmp.name, name), timeout=300)
    return _compiled[name]


def mlp_artifact():
    return compiled("mlp", MLP / "model.onnx", MLP / "kiln.yaml")


__all__ = ["REPO", "MODELS", "MLP", "kiln", "have", "require_gpu", "require_numpy", "compiled",
           "mlp_artifact", "unittest"]
