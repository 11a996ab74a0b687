"""The example apps (tools/examples) on a real export, checked against onnxruntime's outputs.

Runs on the GPU machine (run_gpu.sh `tests`): compiles a backend-test model folder with the kiln
CLI, converts a data set's TensorProto inputs to .npy, runs run_model_c and run_model_cpp on them
with --out, and compares every saved output with the data set's stored output (onnxruntime's)
at the end-to-end tolerance of tests/README.md for the artifact's precision (fp32 unless the folder's
kiln.yaml says otherwise). Exits non-zero on any mismatch, failed run or missing output.

  python3 examples_gpu_check.py KILN EXAMPLES_BIN_DIR MODEL_DIR [DATA_SET ...]
"""
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

TOLERANCE = {"fp32": (1e-3, 1e-5), "tf32": (1e-2, 1e-3), "fp16": (1e-2, 1e-3), "bf16": (3e-2, 1e-2)}


def precision_of(model_dir: pathlib.Path) -> str:
    for line in (model_dir / "kiln.yaml").read_text().splitlines():
        if line.strip().startswith("precision:"):
            return line.split(":", 1)[1].split("#")[0].strip()
    return "fp32"


def load_set(data_set: pathlib.Path, prefix: str) -> dict:
    out = {}
    for f in sorted(data_set.glob(f"{prefix}_*.pb")):
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        out[t.name] = numpy_helper.to_array(t)
    return out


def main() -> int:
    kiln, bin_dir, model_dir = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    sets = [pathlib.Path(s) for s in sys.argv[4:]] or sorted(model_dir.glob("test_data_set_*"))
    rtol, atol = TOLERANCE[precision_of(model_dir)]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        cache = tmp / "cache"
        subprocess.run([kiln, "compile", str(model_dir / "model.onnx"), "-c",
                        str(model_dir / "kiln.yaml"), "-o", str(cache)], check=True,
                       stdout=subprocess.DEVNULL)
        for data_set in sets:
            inputs, expected = load_set(data_set, "input"), load_set(data_set, "output")
            args = []
            for name, value in inputs.items():
                path = tmp / f"{data_set.name}_{name}.npy"
                np.save(path, value)
                args.append(f"{name}={path}")
            for app in ("run_model_c", "run_model_cpp"):
                out_dir = tmp / f"{data_set.name}_{app}"
                p = subprocess.run([str(bin_dir / app), str(cache), *args, "--out", str(out_dir)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"FAIL {app} {data_set.name}: rc {p.returncode}\n{p.stdout}{p.stderr}")
                    failures += 1
                    continue
                for name, want in expected.items():
                    got_path = out_dir / f"{name}.npy"
                    if not got_path.exists():
                        print(f"FAIL {app} {data_set.name}: no output {name}")
                        failures += 1
                        continue
                    got = np.load(got_path).astype(np.float64)
                    ok = got.shape == want.shape and np.allclose(got, want.astype(np.float64),
                                                                 rtol=rtol, atol=atol)
                    err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("nan")
                    print(f"{'MATCH' if ok else 'FAIL '} {app:14} {data_set.name} {name} "
                          f"{list(got.shape)} max|err| {err:.3g} (rtol {rtol:g}, atol {atol:g})")
                    failures += not ok
    print(f"examples_gpu_check: {'FAILED' if failures else 'OK'} ({failures} failure(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
