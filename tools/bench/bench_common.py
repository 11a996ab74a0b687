"""What the benchmarks in tools/bench/ share: logging, the run's state (arguments, time budget,
JSON report with its failures and notes) and running the kiln CLI with its libraries found."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def log(msg):
    print(msg, flush=True)


def tail(text, lines=12, chars=1500):
    t = "\n".join(text.strip().splitlines()[-lines:])
    return t[-chars:]


class Run:
    """Shared state: the arguments (with time_budget and json_out), the deadline, the JSON report
    (`tool`, `argv`, `started`, `models`, `failures`, `notes`, plus `extra`) and its failures."""

    def __init__(self, args, tool, **extra):
        self.args = args
        self.start = time.monotonic()
        self.report = {"tool": tool, "argv": sys.argv[1:],
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra,
                       "models": {}, "failures": [], "notes": []}

    def left_s(self):
        return self.args.time_budget - (time.monotonic() - self.start)

    def timeout(self, limit):
        """A subprocess's timeout: its own limit, cut to what is left of the budget (>= 30 s)."""
        return int(min(limit, max(30, self.left_s())))

    def fail(self, what):
        what = " | ".join(line.strip() for line in what.splitlines() if line.strip())
        log(f"FAILED: {what}")
        self.report["failures"].append(what)

    def note(self, what):
        log(f"note: {what}")
        self.report["notes"].append(what)

    def finish(self, name, parts, outputs):
        """The run's end: notes and failures listed, the one-line summary ("NAME ok|FAILED (n)
        in T s | part | ...") saved and printed last after `outputs`; the exit status (0: no
        failure, 1)."""
        rep = self.report
        if rep["notes"]:
            log("notes:")
            for n in rep["notes"]:
                log(f"  {n}")
        if rep["failures"]:
            log(f"failures ({len(rep['failures'])}):")
            for f in rep["failures"]:
                log(f"  {f}")
        status = "ok" if not rep["failures"] else f"FAILED ({len(rep['failures'])})"
        rep["summary"] = (f"{name} {status} in {time.monotonic() - self.start:.0f} s | "
                          + " | ".join(parts))
        self.save()
        log(outputs)
        log(rep["summary"])
        return 0 if not rep["failures"] else 1

    def save(self):
        """Rewrites the JSON report (atomically: a run cut short keeps what it measured)."""
        path = self.args.json_out
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.report["elapsed_s"] = round(time.monotonic() - self.start, 1)
        with open(path + ".tmp", "w") as f:
            json.dump(self.report, f, indent=1)
        os.replace(path + ".tmp", path)


def kiln_env(kiln):
    """The environment for the kiln CLI: its staged lib/ and CUDA's on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    libs = [str(Path(kiln).resolve().parent.parent / "lib"), "/usr/local/cuda/lib64"]
    libs = [p for p in libs if os.path.isdir(p)]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    return env


def run_kiln(run, cmd, timeout, log_path):
    """Runs one kiln command, its output logged at log_path; returns (rc or None on timeout,
    stdout, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=kiln_env(run.args.kiln))
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    except OSError as e:
        rc, out, err = 127, "", f"cannot run {cmd[0]}: {e}"
    seconds = time.monotonic() - t0
    with open(log_path, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n# rc={rc} {seconds:.1f}s\n---- stdout\n{out}\n"
                f"---- stderr\n{err}\n")
    return rc, out, err, seconds


def reuse_export(folder, key, keep=(".log",)):
    """An export in `folder` made with `key` (its export.json records it): that record, with
    reused=True. Otherwise None, after removing what a stale export left (every file but
    kiln.yaml and names ending in `keep`), so that external data files do not pile up."""
    folder.mkdir(parents=True, exist_ok=True)
    info_path = folder / "export.json"
    if (folder / "model.onnx").exists() and info_path.exists():
        try:
            info = json.loads(info_path.read_text())
            if info.get("key") == key:
                return dict(info, reused=True)
        except ValueError:
            pass
    for f in folder.iterdir():
        if f.is_file() and f.name != "kiln.yaml" and not f.name.endswith(keep):
            f.unlink()
    return None


def add_budget_args(p, item):
    """--time-budget, --compile-reserve-s and --tiny, as both benchmarks take them; `item` is
    what one torch.compile serves ("size", "batch")."""
    p.add_argument("--time-budget", type=float, default=540,
                   help=f"seconds; torch.compile of a {item} is skipped (a failure) when less "
                        "than --compile-reserve-s is left (default %(default)s)")
    p.add_argument("--compile-reserve-s", type=float, default=60)
    p.add_argument("--tiny", action="store_true",
                   help="2-layer hidden-64 models; runs on the CPU without a GPU")


def model_list(p, text, known):
    """--models: the comma list `text`, each a key of `known` (p.error names an unknown one)."""
    models = [m for m in text.split(",") if m]
    for m in models:
        if m not in known:
            p.error(f"--models: unknown model '{m}' ({', '.join(known)})")
    return models
