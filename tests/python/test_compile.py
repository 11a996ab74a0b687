"""python/kiln/compile.py: kiln.compile through the CLI (no GPU needed)."""

import os
import tempfile
import unittest
from pathlib import Path

from kiln_test_support import MLP, kiln


class CompileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln_compile_test_")
        self.out = os.path.join(self.tmp.name, "cache")

    def tearDown(self):
        self.tmp.cleanup()

    def test_compiles_and_returns_the_artifact_directory(self):
        art = kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out)
        self.assertTrue(os.path.isdir(art), art)
        self.assertTrue(Path(art).resolve().is_relative_to(Path(self.out).resolve()), art)
        self.assertTrue(os.path.isfile(os.path.join(art, "manifest.kiln")), os.listdir(art))
        # Compiled again: a cache hit names the same directory.
        self.assertEqual(kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out), art)
        # --force recompiles into the same key.
        self.assertEqual(kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out,
                                      force=True), art)

    def test_level_is_its_own_artifact(self):
        art3 = kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out)
        art0 = kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out, level=0)
        self.assertNotEqual(art0, art3)
        self.assertEqual(kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out, level=3),
                         art3)  # the config's default level
        with self.assertRaises(kiln.CompileError):
            kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out, level=7)

    def test_config_as_a_dict_or_yaml_text(self):
        cfg = {"size_dim": "batch", "max_size": 16, "precision": "fp32",
               "compilation": {"mode": "FULL", "compile_sizes": [1, 8],
                               "cudagraph_capture_sizes": [1, 4, 16]},
               "autotune": {"enabled": "off"}}
        a = kiln.compile(MLP / "model.onnx", cfg, self.out)
        self.assertTrue(os.path.isdir(a))
        text = ("size_dim: batch\nmax_size: 16\nprecision: fp32\ncompilation:\n  mode: FULL\n"
                "  compile_sizes: [1, 8]\n  cudagraph_capture_sizes: [1, 4, 16]\n"
                "autotune: {enabled: 'off'}\n")
        self.assertEqual(kiln.compile(MLP / "model.onnx", text, self.out), a)  # same key

    def test_failure_raises_with_the_cli_stderr(self):
        with self.assertRaises(kiln.CompileError) as cm:
            kiln.compile(MLP / "model.onnx", {"size_dim": "nope", "max_size": 4}, self.out)
        e = cm.exception
        self.assertIsInstance(e, kiln.KilnError)
        self.assertEqual(e.returncode, 1)
        self.assertIn("dim_param 'batch'", e.stderr)
        self.assertIn("neither the size_dim ('nope')", str(e))

    def test_missing_model_file(self):
        with self.assertRaises(kiln.CompileError) as cm:
            kiln.compile(os.path.join(self.tmp.name, "none.onnx"), MLP / "kiln.yaml", self.out)
        self.assertIn("none.onnx", str(cm.exception))

    def test_missing_config_file(self):
        with self.assertRaises(kiln.CompileError) as cm:
            kiln.compile(MLP / "model.onnx", os.path.join(self.tmp.name, "none.yaml"), self.out)
        self.assertIn("none.yaml", str(cm.exception))

    def test_find_cli_honours_kiln_cli(self):
        cli = kiln.find_cli()
        self.assertTrue(os.access(cli, os.X_OK), cli)
        old = os.environ.get("KILN_CLI")
        os.environ["KILN_CLI"] = os.path.join(self.tmp.name, "no-kiln")
        try:
            with self.assertRaises(kiln.KilnError) as cm:
                kiln.compile(MLP / "model.onnx", MLP / "kiln.yaml", self.out)
            self.assertIn("no-kiln", str(cm.exception))
            self.assertEqual(cm.exception.status, "NOT_FOUND")
        finally:
            if old is None:
                del os.environ["KILN_CLI"]
            else:
                os.environ["KILN_CLI"] = old


if __name__ == "__main__":
    unittest.main()
