"""``make staff-wheels``: the staff wheel (:mod:`.staff_wheel`) for each of several Pythons, built
side by side, each reused while what it is made from has not changed.

A staff wheel is made from maturin's abi3 wheel (``make wheel``), by ``staff_wheel.py`` run in a
venv of the Python it is for, with the ``staff`` extra (Cython, setuptools, stubgen). Its
**key** is a hash of all of those: the abi3 wheel's files (by content, not by the zip's bytes,
which carry times), ``staff_wheel.py``, the extra's requirements, the Python's version and the
compiler's optimisation flag. A wheel whose key is recorded beside it (``OUT/.keys/cp312.json``)
is reused as it is; the others are built, one process per Python at a time, each compiling on
its share of the cores. One Python after the other, four Pythons took about 7 minutes each on a
loaded 2-core machine; side by side they share the cores, and an unchanged library costs nothing.

Wheels in ``OUT`` for Pythons no longer asked for are removed: the folder is what a release
ships (``release --wheels``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

STAFF_WHEEL = Path(__file__).with_name("staff_wheel.py")
REPO = Path(__file__).resolve().parents[2]  # where `python -m autograder.release.staff_wheel` runs


@dataclass(frozen=True)
class Outcome:
    python: str
    tag: str
    wheel: Path | None
    reused: bool
    log: str = ""


def version_of(python: str) -> str:
    """``3.12``: the version of the interpreter ``python`` (a ValueError naming it if it does not run)."""
    try:
        run = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ValueError(f"the Python {python!r} does not run ({exc})") from None
    if run.returncode != 0:
        raise ValueError(f"the Python {python!r} does not run ({(run.stderr or run.stdout).strip()[-300:]})")
    return run.stdout.strip()


def content_hash(wheel: Path) -> str:
    """A hash of the wheel's files, names and bytes, in name order (the zip's times left out)."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            digest.update(name.encode() + b"\0" + hashlib.sha256(z.read(name)).digest())
    return digest.hexdigest()


def key_of(base_hash: str, requirements: str, version: str, opt: str) -> str:
    """The key of one staff wheel: what it is made from.

    >>> key_of("abc", "cython", "3.12", "-O2") == key_of("abc", "cython", "3.12", "-O2")
    True
    >>> key_of("abc", "cython", "3.12", "-O2") == key_of("abc", "cython", "3.13", "-O2")
    False
    """
    digest = hashlib.sha256()
    for part in (base_hash, hashlib.sha256(STAFF_WHEEL.read_bytes()).hexdigest(), requirements, version, opt):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def default_command(python: Path, base: Path, out: Path, jobs: int, opt: str) -> list[str]:
    return [str(python), "-m", "autograder.release.staff_wheel", str(base), "--out", str(out),
            "--jobs", str(jobs), f"--opt={opt}"]  # (=: argparse would take -O2 for a flag)


def _venv(python: str, version: str, venvs: Path, requirements: str, log: list[str]) -> Path:
    """``venvs/staff-3.12`` with the staff extra, made or brought up to date."""
    venv = venvs / f"staff-{version}"
    exe = venv / "bin" / "python"
    if exe.exists() and subprocess.run([str(exe), "-c", ""], capture_output=True).returncode != 0:
        shutil.rmtree(venv)  # made by a Python that is gone
    if not exe.exists():
        _run([python, "-m", "venv", str(venv)], log)
    stamp = venv / ".staff-requirements"
    if not stamp.exists() or stamp.read_text() != requirements:
        req = venv / "staff-requirements.txt"
        req.write_text(requirements)
        _run([str(exe), "-m", "pip", "install", "--quiet", "-r", str(req)], log)
        stamp.write_text(requirements)
    return exe


def _run(cmd: list[str], log: list[str]) -> str:
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    log.append(f"$ {' '.join(cmd)}\n{run.stdout}{run.stderr}")
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n" + "\n".join(log)[-4000:])
    return run.stdout


def one(python: str, base: Path, base_hash: str, out: Path, venvs: Path, requirements: str, jobs: int,
        opt: str, command: Callable[[Path, Path, Path, int, str], list[str]]) -> Outcome:
    """The staff wheel for ``python``: the recorded one when its key still holds, else built."""
    version = version_of(python)
    tag = "cp" + version.replace(".", "")
    key = key_of(base_hash, requirements, version, opt)
    keyfile = out / ".keys" / f"{tag}.json"
    if keyfile.exists():
        recorded = json.loads(keyfile.read_text())
        wheel = out / recorded.get("wheel", "")
        if recorded.get("key") == key and wheel.is_file():
            return Outcome(python, tag, wheel, reused=True)
    log: list[str] = []
    exe = _venv(python, version, venvs, requirements, log)
    with tempfile.TemporaryDirectory(prefix=f"staff-{tag}.", dir=out) as tmp:
        _run(command(exe, base, Path(tmp), jobs, opt), log)
        (built,) = Path(tmp).glob("*.whl")
        for old in out.glob(f"servelab-*-{tag}-*.whl"):
            old.unlink()
        wheel = out / built.name
        built.replace(wheel)
    keyfile.parent.mkdir(exist_ok=True)
    keyfile.write_text(json.dumps({"key": key, "wheel": wheel.name, "python": python}) + "\n")
    return Outcome(python, tag, wheel, reused=False, log="\n".join(log))


def build_all(pythons: Sequence[str], base: Path, out: Path, venvs: Path, requirements: str, opt: str = "-O2",
              cores: int | None = None, command: Callable[[Path, Path, Path, int, str], list[str]] = default_command,
              report: Callable[[str], None] = print) -> list[Outcome]:
    """A staff wheel in ``out`` for each of ``pythons``, side by side; returns what was done."""
    out.mkdir(parents=True, exist_ok=True)
    venvs.mkdir(parents=True, exist_ok=True)
    base_hash = content_hash(base)
    cores = cores or os.cpu_count() or 1
    jobs = max(1, cores // max(1, len(pythons)))  # each build's share of the compiler's cores
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(pythons))) as pool:
        futures = {pool.submit(one, p, base, base_hash, out, venvs, requirements, jobs, opt, command): p
                   for p in pythons}
        outcomes = []
        for future in concurrent.futures.as_completed(futures):
            outcome = future.result()
            report(f"staff wheel for {outcome.python} ({outcome.tag}): "
                   f"{'reused, the library has not changed' if outcome.reused else 'built'}: {outcome.wheel.name if outcome.wheel else '-'}")
            outcomes.append(outcome)
    kept = {o.wheel.name for o in outcomes if o.wheel is not None}
    for stale in out.glob("*.whl"):
        if stale.name not in kept:  # a Python no longer asked for: not shipped
            stale.unlink()
    return sorted(outcomes, key=lambda o: o.tag)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.release.staff_wheels",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("pythons", nargs="+", help="the Pythons to build for (commands or paths)")
    parser.add_argument("--base", type=Path, required=True, help="maturin's abi3 wheel (make wheel)")
    parser.add_argument("--out", type=Path, required=True, help="the staff wheels' folder")
    parser.add_argument("--venvs", type=Path, required=True, help="where each Python's build venv is kept")
    parser.add_argument("--requirements", type=Path, required=True, help="the staff extra, one requirement a line")
    parser.add_argument("--opt", default="-O2", help="the C compiler's optimisation flag")
    args = parser.parse_args(argv)
    try:
        build_all(args.pythons, args.base, args.out, args.venvs, args.requirements.read_text(), args.opt)
    except (ValueError, RuntimeError) as exc:
        print(f"staff-wheels: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
