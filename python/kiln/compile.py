"""kiln.compile: runs the `kiln compile` CLI (no GPU needed) and returns the artifact directory."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import _lib
from .errors import CompileError, KilnError


def cli_candidates():
    """(where, path) pairs tried after $KILN_CLI: beside the runtime library (build/tools/kiln
    of a build, .stage/bin/kiln of a staged tree), in the package's checkout and the current
    directory."""
    out = []
    lib = _lib.find_library_path()
    if lib is not None:
        lib = Path(lib).resolve().parent
        out += [("next to the library", lib / "kiln"),
                ("next to the library", lib.parent / "tools" / "kiln"),
                ("next to the library", lib.parent / "bin" / "kiln")]
    for where, base in (("checkout", _lib.REPO_DIR), ("cwd", Path.cwd())):
        out += [(where, base / "build" / "tools" / "kiln"), (where, base / ".stage" / "bin" / "kiln")]
    seen, unique = set(), []
    for w, p in out:
        if str(p) not in seen:
            seen.add(str(p))
            unique.append((w, p))
    return unique


def find_cli():
    """The kiln CLI: $KILN_CLI, then next to the runtime library, the checkout's build/tools/
    and .stage/bin/, then PATH. KilnError naming what was tried when there is none."""
    env = os.environ.get("KILN_CLI")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise KilnError(f"KILN_CLI is '{env}', which is not an executable file",
                        status="NOT_FOUND")
    tried = []
    for where, p in cli_candidates():
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
        tried.append(f"{p} ({where})")
    on_path = shutil.which("kiln")
    if on_path:
        return on_path
    tried.append("kiln on PATH")
    raise KilnError("cannot find the kiln CLI; set KILN_CLI to its path. Tried:\n  "
                    + "\n  ".join(tried), status="NOT_FOUND")


def cli_env(cli):
    """The environment for the CLI: a staged tree's lib/ (beside bin/) on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    lib = Path(cli).resolve().parent.parent / "lib"
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = ":".join(
            [str(lib)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


_ARTIFACT_RE = re.compile(r"^\s*artifact\s*:\s*(\S.*?)\s*$", re.M)
_HIT_RE = re.compile(r"^cache hit: (\S+) \(key", re.M)


def artifact_from_output(text):
    """The artifact directory `kiln compile` printed ("artifact : DIR" or "cache hit: DIR")."""
    m = _ARTIFACT_RE.search(text) or _HIT_RE.search(text)
    return m.group(1) if m else None


def compile(model, config, out, *, force=False, tuning_db=None, dump_sources=None, level=None,
            timeout=None, cli=None, extra_args=()):
    """Compiles an ONNX model with the kiln CLI into the cache directory `out`; returns the
    artifact directory (a str; kiln.load takes it, or `out` itself while it holds one artifact).

    config: a path to a kiln.yaml, a dict of its keys (schemas/config.md; written as YAML), or
    YAML text (a str with a newline). force: recompile even when cached. tuning_db: a tuning
    database file (--tuning-db). level: the compilation level 0-3 (-O; default the config's:
    0 is one kernel per op, the baseline to bisect a wrong answer against). timeout: seconds. cli: the kiln executable (default: find_cli()).
    Raises CompileError (a KilnError) with the CLI's stderr when it fails."""
    cli = cli or find_cli()
    model, out = os.fspath(model), os.fspath(out)
    tmp = None
    try:
        if isinstance(config, dict):
            tmp = _write_temp(json.dumps(config, indent=1))  # JSON is valid YAML
            config_path = tmp
        elif isinstance(config, str) and "\n" in config:
            tmp = _write_temp(config)
            config_path = tmp
        else:
            config_path = os.fspath(config)
        cmd = [cli, "compile", model, "-c", config_path, "-o", out]
        if force:
            cmd.append("--force")
        if tuning_db:
            cmd += ["--tuning-db", os.fspath(tuning_db)]
        if level is not None:
            cmd += ["-O", str(int(level))]
        if dump_sources is not None:
            cmd += ["--dump-sources"] + ([os.fspath(dump_sources)] if dump_sources else [])
        cmd += list(extra_args)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env=cli_env(cli))
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (
                e.stderr or "")
            raise CompileError(f"kiln compile timed out after {timeout} s: {' '.join(cmd)}\n"
                               f"{err.strip()}", stderr=err) from None
        except OSError as e:
            raise CompileError(f"cannot run {cli}: {e}") from None
        if p.returncode != 0:
            raise CompileError(f"kiln compile failed (exit {p.returncode}): "
                               f"{(p.stderr or p.stdout).strip()}", stderr=p.stderr,
                               returncode=p.returncode)
        art = artifact_from_output(p.stdout + "\n" + p.stderr)
        if art is None:
            raise CompileError("kiln compile succeeded but printed no artifact directory:\n"
                               + p.stdout + p.stderr, stderr=p.stderr, returncode=0)
        return art
    finally:
        if tmp:
            os.unlink(tmp)


def _write_temp(text):
    fd, path = tempfile.mkstemp(prefix="kiln_", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
