"""Does ``wheels/`` hold a servelab wheel for this Python? If not, which Pythons on this machine
would fit one? Run by ``make build`` in a staff release, before it makes ``.venv``, with the
Python it was given (``make build PYTHON=...``): a student who picked a Python with no wheel
learns which wheels there are and which of their Pythons fit them, instead of a ``.venv`` made
with the wrong Python and pip's "not a supported wheel on this platform" on the next try.

Standard library only (it runs before anything is installed).

    python tools/python_for_wheels.py wheels/ [NAME]   # exit 0: a wheel fits; 1: the message

>>> tag_of("servelab-0.1.0-cp311-abi3-manylinux_2_17_x86_64.whl"), version_of("cp312")
('cp311', '3.12')
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys


def tag_of(wheel: str) -> str | None:
    """The CPython tag (``cp311``) a staff wheel is built for: the second field after the version."""
    found = re.match(r"servelab-[^-]+-(cp3\d+)-", os.path.basename(wheel))
    return found.group(1) if found else None


def version_of(tag: str) -> str:
    return f"3.{tag[3:]}"


def runs_as(python: str, version: str) -> bool:
    """``python`` starts and is that version (a pyenv shim of a version not installed does not)."""
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def pythons_for(version: str) -> list[str]:
    """Commands or paths of Pythons of ``version`` that run here: on PATH, then pyenv's."""
    found = []
    on_path = shutil.which(f"python{version}")
    if on_path and runs_as(on_path, version):
        found.append(f"python{version}")
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for path in sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))):
        if not found and runs_as(path, version):
            found.append(path)
    return found


def message(wheels: list[str], name: str, tag: str) -> str:
    versions = sorted({version_of(t) for t in map(tag_of, wheels) if t}, key=lambda v: int(v[2:]))
    fitting = [p for v in versions for p in pythons_for(v)]
    text = (f"make build: wheels/ has no servelab wheel for {name} (Python {version_of(tag)}); "
            f"it has wheels for Python {', '.join(versions) or 'none'} "
            f"({', '.join(os.path.basename(w) for w in wheels) or 'no wheel at all'}).")
    if fitting:
        return text + (f" Pythons here that fit: {', '.join(fitting)}. Then: make build PYTHON={fitting[0]}")
    last = versions[-1] if versions else "3.12"
    return text + (f" None of those Pythons runs here: install one (your system's packages, python.org, or "
                   f"`pyenv install {last}`), then: make build PYTHON=python{last}")


def main(argv: list[str]) -> int:
    folder = argv[1] if len(argv) > 1 else "wheels"
    name = argv[2] if len(argv) > 2 else sys.executable
    tag = "cp%d%d" % sys.version_info[:2]
    wheels = sorted(glob.glob(os.path.join(folder, "servelab-*.whl")))
    if any(tag_of(w) == tag for w in wheels):
        return 0
    print(message(wheels, name, tag), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
