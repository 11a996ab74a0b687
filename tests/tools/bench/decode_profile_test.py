#!/usr/bin/env python3
"""tools/bench/decode_profile.py without a GPU: the repeated step found in a kernel listing, the
kernel families, the per-family sums and the ncu command for decode steps and for --sizes."""

import argparse
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "bench"))
import decode_profile as dp  # noqa: E402


def kernel(name, grid="(1,1,1)", ns=1000.0, read=0.0):
    return {"name": name, "grid": grid, "block": "(128,1,1)", "gpu__time_duration.sum": ns,
            "dram__bytes_read.sum": read, "dram__bytes_write.sum": 0.0}


class LastStep(unittest.TestCase):
    def test_the_repeating_tail_after_a_warm_up(self):
        step = [kernel("kiln_rmsnorm_a"), kernel("kiln_skinny_gemm_b"), kernel("kiln_attention_c")]
        warm = [kernel("kiln_gather_x"), kernel("kiln_rmsnorm_a")]
        got = dp.last_step(warm + step * 3, min_repeats=3)
        self.assertEqual([k["name"] for k in got], [k["name"] for k in step])

    def test_the_grid_tells_launches_of_one_kernel_apart(self):
        # The same kernel at two grids within a step: the period is both launches, not one.
        step = [kernel("kiln_ew_a", "(4,1,1)"), kernel("kiln_ew_a", "(8,1,1)")]
        got = dp.last_step(step * 2, min_repeats=2)
        self.assertEqual([k["grid"] for k in got], ["(4,1,1)", "(8,1,1)"])

    def test_no_repetition_is_none(self):
        ks = [kernel("a"), kernel("b"), kernel("c")]
        self.assertIsNone(dp.last_step(ks, min_repeats=2))


class Families(unittest.TestCase):
    def test_names(self):
        self.assertEqual(dp.family("kiln_skinny_gemm_1234__K"), "skinny GEMM")
        self.assertEqual(dp.family("nvjet_sm90_hsh_64x8_TNT"), "cuBLASLt GEMM")
        self.assertEqual(dp.family("kiln_paged_attention_split"), "attention")
        self.assertEqual(dp.family("kiln_rmsnorm_ab"), "norm")
        self.assertEqual(dp.family("kiln_ew_ab"), "elementwise")
        self.assertEqual(dp.family("kiln_transpose_ab"), "layout")
        self.assertEqual(dp.family("kiln_gated_pairs_ab"), "other")

    def test_summarize_sums_each_family(self):
        total, fams = dp.summarize([kernel("kiln_ew_a", ns=1500.0, read=3e6),
                                    kernel("kiln_ew_b", ns=500.0, read=1e6),
                                    kernel("kiln_rmsnorm_c", ns=1000.0)])
        self.assertEqual(total, 3000.0)
        self.assertEqual(fams["elementwise"]["launches"], 2)
        self.assertEqual(fams["elementwise"]["ns"], 2000.0)
        self.assertEqual(fams["elementwise"]["read"], 4e6)
        self.assertEqual(fams["norm"]["launches"], 1)


class Command(unittest.TestCase):
    def args(self, sizes=None):
        return argparse.Namespace(kiln="kiln", sizes=sizes, mode="FULL", iters=3, context=512)

    def test_decode_steps(self):
        cmd = dp.ncu_command("ncu", "rep", self.args(), "cache", 8)
        self.assertEqual(cmd[0], "ncu")
        self.assertIn("--profile-from-start", cmd)
        self.assertEqual(cmd[cmd.index("kiln") + 1:],
                         ["generate", "cache", "--bench-decode", "--batches", "8", "--context",
                          "512", "--iters", "3", "--mode", "FULL_DECODE_ONLY"])

    def test_sizes_profile_kiln_bench(self):
        cmd = dp.ncu_command("ncu", "rep", self.args(sizes="128,512"), "cache", 512)
        self.assertEqual(cmd[cmd.index("kiln") + 1:],
                         ["bench", "cache", "--sizes", "512", "--mode", "FULL", "--warmup", "1",
                          "--iters", "3"])


if __name__ == "__main__":
    unittest.main()
