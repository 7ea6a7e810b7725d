"""The staff binary: a servelab wheel whose Python library is compiled, for a student release.

Systems courses ship the reference as a binary, never as its source: a student can call the
library (the tests' oracle) but cannot read it. This module turns the abi3 wheel that
``make wheel`` builds (maturin: the Rust ``_core`` and the library's ``.py`` files) into one
wheel per Python version in which

* every module of ``servelab`` is an extension module compiled by Cython (from PyPI: the
  ``staff`` extra of pyproject.toml), its docstrings kept and its signatures embedded, so
  ``help()`` and ``inspect.signature`` work; beside each, a ``.pyi`` stub written by mypy's
  ``stubgen`` from the source (signatures and docstrings, no body), for IDEs and type checkers;
* :data:`LEFT_OUT` is absent: ``servelab.reference`` (the readable twins of the Rust core, and
  the tasks' subjects) and ``servelab.lecture_key`` (the lecture's answers to its exercises).
  The autograder was never in a wheel (pyproject.toml's ``[tool.maturin]``);
* :data:`KEPT_AS_SOURCE` stays Python: ``python -m servelab`` needs a code object, which an
  extension module has not, and pytest's hooks must be Python functions (the students' harness,
  ``servelab.harness``);
* the data files (``servelab/data/``), ``py.typed``, the Rust core and its stub are as in the
  base wheel.

Each wheel is tagged for its interpreter (``cp312-cp312-...``); its platform tag is the base
wheel's (manylinux2014) when no compiled module needs a newer glibc than 2.17, else the build
machine's (``linux_x86_64``). ``make staff-wheels`` builds Python 3.10-3.13 from pyenv;
``autograder/tests/test_staff_wheel.py`` builds the running Python's and tests it.

Usage: ``python -m autograder.release.staff_wheel BASE_WHEEL --out DIR [--jobs N] [--opt -O2]``
(run it with the Python the wheel is for).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "servelab"
# never in a student's wheel: the answers (module paths inside the wheel)
LEFT_OUT = ("servelab/reference/", "servelab/lecture_key.py")
# stays readable Python: runpy needs the code object of a package's __main__, and pytest's
# plugin manager (pluggy) takes only Python functions as hooks, so the students' harness
# (servelab.harness: the points table, the fail-fast probe, the manifest and Hypothesis profiles,
# no answer in it) ships as source; the release's similarity check reads it like every other file
KEPT_AS_SOURCE = ("servelab/__main__.py", "servelab/harness/")
# the compiler's settings (Cython's directives): functions that inspect.signature, help() and
# pickle treat as Python functions (binding), keyword arguments as in Python, annotations that
# stay annotations (Cython would otherwise turn ``x: int`` into a C-level type check that raises
# its own TypeError before servelab._checks names the argument, and ``x: float`` into a silent
# conversion), and no source line copied into the generated C's comments
DIRECTIVES = {"language_level": 3, "binding": True, "always_allow_keywords": True, "annotation_typing": False,
              "emit_code_comments": False}
MANYLINUX_GLIBC = (2, 17)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def python_tag() -> str:
    """``cp312`` for CPython 3.12: the interpreter and ABI tag of the wheel built with it."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _unpack(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into)


def _modules(tree: Path) -> list[str]:
    """The library's ``.py`` files to compile (paths relative to the wheel's root)."""
    return sorted(p.relative_to(tree).as_posix() for p in (tree / PACKAGE).rglob("*.py")
                  if not p.relative_to(tree).as_posix().startswith(KEPT_AS_SOURCE))


def _drop_left_out(tree: Path) -> None:
    for rel in LEFT_OUT:
        path = tree / rel
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def write_stubs(tree: Path, modules: list[str]) -> None:
    """A ``.pyi`` beside each module, from its source: signatures and docstrings, no bodies
    (mypy's ``stubgen``, which reads the source and imports nothing). A hand-written stub (the
    Rust core's ``_core.pyi``) is kept."""
    stubgen = shutil.which("stubgen", path=os.path.dirname(sys.executable)) or shutil.which("stubgen")
    if stubgen is None:
        raise RuntimeError("stubgen (mypy) is missing: pip install the `staff` extra (mypy, cython, setuptools)")
    with tempfile.TemporaryDirectory() as out:
        todo = [m for m in modules if not (tree / m).with_suffix(".pyi").exists()]
        # mypy's cache goes to the temporary folder, not into the wheel's tree
        env = {**os.environ, "MYPY_CACHE_DIR": str(Path(out) / ".mypy_cache")}
        subprocess.run([stubgen, "--include-docstrings", "-q", "-o", str(Path(out) / "stubs"), *todo], cwd=tree,
                       env=env, check=True)
        for rel in todo:
            stub = Path(out) / "stubs" / Path(rel).with_suffix(".pyi")
            shutil.copyfile(stub, (tree / rel).with_suffix(".pyi"))


def compile_modules(tree: Path, modules: list[str], build: Path, jobs: int, opt: str) -> None:
    """Cython, then the C compiler, for every module; the ``.py`` files are replaced by the
    extension modules (stripped: no symbol table, no debug information)."""
    from Cython.Build import cythonize  # the staff extra: only the instructors' build needs it
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extensions = [Extension(rel.removesuffix(".py").replace("/", "."), [str(tree / rel)],
                            extra_compile_args=[opt, "-g0", "-w"], extra_link_args=["-s"]) for rel in modules]
    compiled = cythonize(extensions, compiler_directives=DIRECTIVES, nthreads=jobs, quiet=True,
                         build_dir=str(build / "c"))
    dist = Distribution({"name": PACKAGE, "ext_modules": compiled})
    cmd = build_ext(dist)
    cmd.build_lib, cmd.build_temp, cmd.parallel = str(build / "lib"), str(build / "tmp"), jobs
    cmd.ensure_finalized()
    cmd.run()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for rel in modules:
        so = build / "lib" / (rel.removesuffix(".py") + suffix)
        if not so.is_file():
            raise RuntimeError(f"{rel} did not compile to {so.name}")
        shutil.copyfile(so, tree / so.relative_to(build / "lib"))
        (tree / rel).unlink()


def glibc_needed(paths: list[Path]) -> tuple[int, ...] | None:
    """The newest ``GLIBC_x.y`` symbol version that the shared objects need (objdump's view),
    or None when objdump is missing."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    newest: tuple[int, ...] = (0,)
    for path in paths:
        symbols = subprocess.run([objdump, "-T", str(path)], capture_output=True, text=True, check=True).stdout
        for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", symbols):
            newest = max(newest, tuple(map(int, v.split("."))))
    return newest


def platform_tag(base_tag: str, shared_objects: list[Path]) -> str:
    """The base wheel's platform tag when the compiled modules keep its glibc promise, else this
    machine's (pip installs either on Linux; the manylinux one on older distributions too)."""
    needed = glibc_needed(shared_objects)
    if "manylinux" in base_tag and needed is not None and needed <= MANYLINUX_GLIBC:
        return base_tag
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _metadata_without_description(text: str) -> str:
    """The base wheel's METADATA without its long description (the course README: an
    instructors' text, not the students')."""
    head = text.split("\n\n", 1)[0]
    head = "\n".join(line for line in head.splitlines() if not line.startswith("Description-Content-Type:"))
    return head + "\n\n"


def _write_wheel(tree: Path, out: Path, name: str, dist_info: str, tag: str) -> Path:
    (tree / dist_info / "WHEEL").write_text(
        f"Wheel-Version: 1.0\nGenerator: servelab staff_wheel\nRoot-Is-Purelib: false\nTag: {tag}\n", encoding="utf-8")
    meta = tree / dist_info / "METADATA"
    meta.write_text(_metadata_without_description(meta.read_text(encoding="utf-8")), encoding="utf-8")
    files = sorted(p for p in tree.rglob("*") if p.is_file() and p.relative_to(tree).as_posix() != f"{dist_info}/RECORD")
    rows = []
    for p in files:
        data = p.read_bytes()
        rows.append(f"{p.relative_to(tree).as_posix()},{_record_hash(data)},{len(data)}")
    rows.append(f"{dist_info}/RECORD,,")
    (tree / dist_info / "RECORD").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{tag}.whl"
    tmp = wheel.with_suffix(".whl.part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in [*files, tree / dist_info / "RECORD"]:
            info = zipfile.ZipInfo(p.relative_to(tree).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(p, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    tmp.replace(wheel)  # never half a wheel under the final name
    return wheel


def build(base_wheel: Path, out: Path, jobs: int = 2, opt: str = "-O2") -> Path:
    """The staff wheel of ``base_wheel`` for the running Python, written into ``out``; returns
    its path."""
    base_wheel, out = Path(base_wheel).resolve(), Path(out).resolve()
    match = re.fullmatch(r"(?P<name>[^-]+-[^-]+)-cp\d+-abi3-(?P<plat>.+)\.whl", base_wheel.name)
    if match is None:
        raise ValueError(f"base_wheel must be maturin's abi3 wheel (servelab-V-cp310-abi3-PLATFORM.whl), "
                         f"got {base_wheel.name!r}")
    with tempfile.TemporaryDirectory(prefix="staff-wheel.") as tmp:
        tree, work = Path(tmp) / "tree", Path(tmp) / "build"
        _unpack(base_wheel, tree)
        _drop_left_out(tree)
        modules = _modules(tree)
        write_stubs(tree, modules)
        compile_modules(tree, modules, work, jobs, opt)
        shared = sorted(tree.rglob("*.so"))
        tag = f"{python_tag()}-{python_tag()}-{platform_tag(match['plat'], [p for p in shared if '.abi3.' not in p.name])}"
        dist_info = next(p.name for p in tree.iterdir() if p.name.endswith(".dist-info"))
        return _write_wheel(tree, out, match["name"], dist_info, tag)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.release.staff_wheel", description=__doc__.split("\n\n")[0])
    parser.add_argument("base_wheel", type=Path, help="maturin's abi3 wheel (make wheel)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the staff wheel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compilations")
    parser.add_argument("--opt", default="-O2", help="the C compiler's optimisation flag")
    args = parser.parse_args(argv)
    print(build(args.base_wheel, args.out, args.jobs, args.opt))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
