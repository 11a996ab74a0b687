#!/usr/bin/env python3
"""tools/source_fingerprint.py: the compiler's source hash (part of every cache key) moves with any
source change (content, name, a new file), ignores other files, is stable, and leaves an unchanged
header untouched (so an unchanged tree rebuilds nothing)."""

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "source_fingerprint.py"


def run(root, out):
    subprocess.run([sys.executable, str(SCRIPT), str(out), str(root), "compiler", "kernels"],
                   check=True)
    text = out.read_text()
    line = [x for x in text.splitlines() if x.startswith("#define KILN_COMPILER_SOURCE_HASH")]
    assert len(line) == 1, text
    return line[0].split('"')[1]


class SourceFingerprint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name) / "src"
        (self.root / "compiler" / "ops").mkdir(parents=True)
        (self.root / "kernels").mkdir()
        (self.root / "compiler" / "ops" / "a.cc").write_text("int a() { return 1; }\n")
        (self.root / "compiler" / "b.h").write_text("#pragma once\n")
        (self.root / "kernels" / "k.cuh").write_text("// kernel\n")
        self.out = Path(self.tmp.name) / "fp.h"

    def tearDown(self):
        self.tmp.cleanup()

    def test_stable_and_sixteen_hex_digits(self):
        h = run(self.root, self.out)
        self.assertRegex(h, r"^[0-9a-f]{16}$")
        self.assertEqual(run(self.root, self.out), h)

    def test_every_source_change_moves_it(self):
        h = run(self.root, self.out)
        seen = {h}
        (self.root / "compiler" / "ops" / "a.cc").write_text("int a() { return 2; }\n")
        seen.add(run(self.root, self.out))
        (self.root / "kernels" / "k.cuh").write_text("// kernel, changed\n")
        seen.add(run(self.root, self.out))
        (self.root / "compiler" / "ops" / "a.cc").rename(self.root / "compiler" / "ops" / "c.cc")
        seen.add(run(self.root, self.out))
        (self.root / "compiler" / "new.proto").write_text("syntax = \"proto3\";\n")
        seen.add(run(self.root, self.out))
        self.assertEqual(len(seen), 5, seen)

    def test_other_files_do_not_count(self):
        h = run(self.root, self.out)
        (self.root / "compiler" / "README.md").write_text("notes\n")
        (self.root / "tools").mkdir()
        (self.root / "tools" / "x.cc").write_text("int x;\n")  # not a hashed folder
        self.assertEqual(run(self.root, self.out), h)

    def test_an_unchanged_header_is_not_rewritten(self):
        run(self.root, self.out)
        past = 1_000_000_000
        os.utime(self.out, (past, past))
        run(self.root, self.out)
        self.assertEqual(self.out.stat().st_mtime, past)
        (self.root / "compiler" / "b.h").write_text("#pragma once\n// changed\n")
        run(self.root, self.out)
        self.assertNotEqual(self.out.stat().st_mtime, past)

    def test_no_sources_is_an_error(self):
        empty = Path(self.tmp.name) / "empty"
        empty.mkdir()
        r = subprocess.run([sys.executable, str(SCRIPT), str(self.out), str(empty), "compiler"],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no sources", r.stderr)


if __name__ == "__main__":
    unittest.main()
