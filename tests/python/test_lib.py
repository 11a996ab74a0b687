"""python/kiln/_lib.py and errors.py: finding and loading libkiln_runtime, status names, errors."""

import os
import subprocess
import sys
import unittest

from kiln_test_support import REPO, kiln


def run_python(code, **env):
    e = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=120)


class LibraryTest(unittest.TestCase):
    def test_loads_and_reports_its_path(self):
        lib = kiln.load_library()
        path = kiln.library_path()
        self.assertTrue(os.path.basename(path).startswith("libkiln_runtime"), path)
        self.assertIs(lib, kiln.load_library())  # loaded once

    def test_status_names_and_dtype_sizes(self):
        from kiln import _lib
        self.assertEqual(_lib.status_name(0), "OK")
        self.assertEqual(_lib.status_name(1), "INVALID_ARGUMENT")
        self.assertEqual(_lib.status_name(8), "IO_ERROR")
        self.assertEqual(_lib.status_name(9), "CONTEXT_LOST")
        self.assertEqual(_lib.status_name(99), "UNKNOWN")
        lib = kiln.load_library()
        for code, (_, size) in kiln.DTYPES.items():
            self.assertEqual(lib.kiln_dtype_size(code), size, code)
        self.assertEqual(lib.kiln_dtype_size(0), 0)

    def test_device_available_is_a_bool_with_a_reason(self):
        ok = kiln.device_available()
        self.assertIsInstance(ok, bool)
        if ok:
            self.assertEqual(kiln.device_error(), "")
        else:
            self.assertIn("no CUDA device", kiln.device_error())

    def test_kiln_library_env_names_the_missing_file(self):
        p = run_python("import kiln; kiln.load_library()",
                       KILN_LIBRARY="/nonexistent/libkiln_runtime.so")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("LibraryNotFoundError", p.stderr)
        self.assertIn("/nonexistent/libkiln_runtime.so ($KILN_LIBRARY): no such file", p.stderr)
        self.assertIn("set KILN_LIBRARY", p.stderr)

    def test_kiln_library_env_rejects_another_library(self):
        # A real shared library that is not kiln's: found, loaded, and refused by name.
        import ctypes.util
        libm = ctypes.util.find_library("m")
        if not libm:
            self.skipTest("no libm to load")
        p = run_python(
            "import kiln\n"
            "try:\n    kiln.load_library()\n"
            "except kiln.LibraryNotFoundError as e:\n    print(e)\n",
            KILN_LIBRARY=libm)
        self.assertIn("not kiln's runtime library (lacks kiln_last_error", p.stdout)

    def test_search_order_without_env(self):
        env = {k: v for k, v in os.environ.items() if k != "KILN_LIBRARY"}
        e = dict(env, PYTHONPATH=str(REPO / "python"))
        p = subprocess.run([sys.executable, "-c",
                            "from kiln import _lib\n"
                            "for w, c in _lib.candidate_paths(): print(w, c)\n"],
                           capture_output=True, text=True, env=e, timeout=60)
        lines = p.stdout.splitlines()
        self.assertTrue(lines[0].startswith("package "), lines)
        self.assertIn(f"checkout {REPO / 'build' / 'runtime' / 'libkiln_runtime.so'}", lines)
        self.assertIn(f"checkout {REPO / '.stage' / 'lib' / 'libkiln_runtime.so'}", lines)


class ErrorsTest(unittest.TestCase):
    def test_subclass_per_status(self):
        from kiln.errors import error_for_status
        e = error_for_status(1, "INVALID_ARGUMENT", "input 'x': bad")
        self.assertIsInstance(e, kiln.InvalidArgumentError)
        self.assertIsInstance(e, kiln.KilnError)
        self.assertIsInstance(e, ValueError)
        self.assertEqual((e.status, e.code, e.message), ("INVALID_ARGUMENT", 1, "input 'x': bad"))
        self.assertEqual(str(e), "[INVALID_ARGUMENT] input 'x': bad")
        for code, cls in ((2, kiln.NotFoundError), (3, kiln.UnimplementedError),
                          (4, kiln.DataLossError), (5, kiln.FailedPreconditionError),
                          (6, kiln.ResourceExhaustedError), (7, kiln.InternalError),
                          (8, kiln.IoError), (9, kiln.ContextLostError)):
            e = error_for_status(code, cls.status, "m")
            self.assertIs(type(e), cls)
            self.assertEqual(str(e), f"[{cls.status}] m")
        e = error_for_status(42, "UNKNOWN", "m")
        self.assertIs(type(e), kiln.KilnError)
        self.assertEqual((e.status, e.code), ("UNKNOWN", 42))


if __name__ == "__main__":
    unittest.main()
