#!/usr/bin/env python3
"""Which build runs which test when tools/test.sh runs them all (each test runs once).

  test_plan.py BUILD_DIR sanitized|regular TESTS_OUT [--no-gpu-tests]

`sanitized`: the CPU tests (suite cpu) except those named in tools/regular_only_tests.txt; they
run in build-san/ under ASan + UBSan. `regular`: the rest (the GPU tests and the regular-only
ones); they run in build/. Writes the test names to TESTS_OUT, one per line, and prints the
build targets to make (paths relative to BUILD_DIR): for `sanitized` those the selected tests
depend on; for `regular` every target except the test executables only the sanitized pass
runs, so no test is compiled twice. `--no-gpu-tests` (regular only; tools/test.sh passes it on
a machine without a GPU, as CI is) leaves out the GPU tests (suite gpu) and the executables only
they run: there they would only skip, and tools/run_gpu.sh builds and runs them on a GPU machine.
"""
import json
import os
import subprocess
import sys


def regular_only(root):
    names = set()
    with open(os.path.join(root, "tools", "regular_only_tests.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def main():
    args = sys.argv[1:]
    no_gpu = "--no-gpu-tests" in args
    args = [a for a in args if a != "--no-gpu-tests"]
    if len(args) != 3 or args[1] not in ("sanitized", "regular") or (
            no_gpu and args[1] != "regular"):
        sys.exit(__doc__)
    build, mode, out = args
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    info = json.loads(
        subprocess.check_output(["meson", "introspect", build, "--tests", "--targets"]))
    keep = regular_only(root)
    known = {t["name"] for t in info["tests"]}
    if keep - known:
        sys.exit(f"tools/regular_only_tests.txt: no such test: {', '.join(sorted(keep - known))}")

    def sanitized(t):
        return any(s.endswith(":cpu") for s in t["suite"]) and t["name"] not in keep

    def gpu(t):
        return any(s.endswith(":gpu") for s in t["suite"])

    def wanted(t):
        if mode == "sanitized":
            return sanitized(t)
        return not sanitized(t) and not (no_gpu and gpu(t))

    chosen = [t for t in info["tests"] if wanted(t)]
    other = [t for t in info["tests"] if not wanted(t)]
    real = os.path.realpath(build)
    if mode == "sanitized":
        ids = {d for t in chosen for d in t["depends"]}
        files = {f for t in info["targets"] if t["id"] in ids for f in t["filename"]}
    else:
        # Everything but the executables that only tests not chosen here run.
        skip = {os.path.realpath(t["cmd"][0]) for t in other}
        skip -= {os.path.realpath(t["cmd"][0]) for t in chosen}
        files = {f for t in info["targets"] for f in t["filename"]}
        files = {f for f in files if os.path.realpath(f) not in skip}
    targets = sorted(os.path.relpath(f, real) for f in files)
    with open(out, "w") as f:
        f.write("".join(t["name"] + "\n" for t in chosen))
    print("\n".join(targets))


if __name__ == "__main__":
    main()
