"""Every one of the lecture's ten exercises (§12) is asked of students: the manifest maps each
to a task or a notebook (``lecture = "...; ex. N"``), and servelab.lecture_key answers each."""

from __future__ import annotations

import re
from pathlib import Path

from servelab import lecture_key

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

MANIFEST = Path(__file__).resolve().parents[1] / "assignments" / "manifest.toml"


def _exercises(lecture: str) -> set[int]:
    """``"§2.4; ex. 1, 3"`` -> {1, 3}; ``"§8.1 (milestone 1); ex. 1(d)"`` -> {1}."""
    m = re.search(r"ex\. ([\d(), a-z]+)$", lecture)
    return {int(n) for n in re.findall(r"\d+", re.sub(r"\([a-z]\)", "", m.group(1)))} if m else set()


def test_the_manifest_asks_every_exercise():
    manifest = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
    asked = set()
    for item in [*manifest["task"], *manifest.get("notebook", [])]:
        asked |= _exercises(item["lecture"])
    assert asked == set(range(1, 11)), f"exercises asked of no student: {sorted(set(range(1, 11)) - asked)}"


def test_the_lecture_key_answers_every_exercise():
    assert {r.exercise for r in lecture_key.rows()} == set(range(1, 11))


def test_exercise_lists_parse():
    assert _exercises("§2.4, §3.5; ex. 1, 3") == {1, 3}
    assert _exercises("§8.1 (milestone 1); ex. 1(d)") == {1}
    assert _exercises("§4.1-§4.4") == set()
