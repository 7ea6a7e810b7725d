"""The plagiarism-style check of a release (``autograder/release/similarity.py``): identifiers,
numbers and strings normalised to token classes, runs of 12 tokens compared, so renaming fools
nothing. A staff release (the default) holds under 10% of any task's solution in every readable
file its library brings (README, Makefile, dev container, the wheels' stubs and metadata; the
installed package is checked in ``test_staff_wheel.py``); the readable release is reported, and
holds whole answers, as it is meant to.

The assignments' own files ship in either kind of release and are held to the same limit, with
no exception: a visible test calls the compiled library for its oracle (the allocator, the
model, ``servelab.tiny_llm.ordered_sum``) instead of writing the answer out, and a given helper
shares no task's formulation.
Cost: about 30 s (two release plans; nbgrader's student notebooks are generated once a session).
"""

from __future__ import annotations

import io
import tokenize

import pytest

from autograder.grading.grade import ROOT, manifest_of
from autograder.release import similarity
from autograder.release.repository import release

@pytest.fixture(scope="module")
def solutions():
    return similarity.task_solutions(ROOT)


@pytest.fixture(scope="module")
def staff_release(tmp_path_factory):
    out = tmp_path_factory.mktemp("staff") / "release"
    release(ROOT, out)
    return out


@pytest.fixture(scope="module")
def readable_release(tmp_path_factory):
    out = tmp_path_factory.mktemp("readable") / "release"
    release(ROOT, out, readable=True)
    return out


def test_no_readable_file_of_the_staff_release_holds_a_tenth_of_a_solution(solutions, staff_release):
    files = similarity.readable_files(staff_release)
    assert "README.md" in files and "Makefile" in files and ".devcontainer/devcontainer.json" in files
    found = [str(f) for f in similarity.findings(solutions, files)]
    assert found == [], "readable files of the staff release hold a task's solution:\n" + "\n".join(found)


def test_the_readable_release_is_reported_with_the_answers_it_holds(solutions, readable_release):
    found = {(f.task, f.file): f.share for f in similarity.findings(solutions, similarity.readable_files(readable_release))}
    # the readable twins and the library hold whole tasks (what the staff binary takes away)
    for key in [("a2_roofline", "python/servelab/reference/step_cost.py"), ("a5_batching", "python/servelab/reference/sim.py"),
                ("a8_continuous_batching", "python/servelab/engine/scheduler.py")]:
        assert found.get(key, 0) >= 0.2, (key, found.get(key))
    assert len([k for k in found if not k[1].startswith("assignments/")]) > 10


def _renamed(text: str) -> str:
    """``text`` with every identifier of its own renamed and every number changed: what a copier
    does (the builtins and ``self`` stay)."""
    out: list[tuple[int, str]] = []
    names: dict[str, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and tok.string not in similarity.KEPT_NAMES:
            out.append((tok.type, names.setdefault(tok.string, f"v{len(names)}")))
        elif tok.type == tokenize.NUMBER:
            out.append((tok.type, "7"))
        else:
            out.append((tok.type, tok.string))
    return tokenize.untokenize(out)


def test_renaming_a_solution_does_not_hide_it(solutions):
    task = next(t for t in manifest_of(ROOT).tasks if t.id == "a8_continuous_batching")
    copied = ""
    for rel in task.edit:
        regions = similarity.solution_regions((ROOT / "assignments" / rel).read_text(encoding="utf-8"), rel)
        copied += "".join("def f():\n" + "".join("    " + line + "\n" for line in r.splitlines()) for r in regions)
    renamed = _renamed(copied)
    assert renamed != copied
    found = similarity.findings(solutions, {"copy.py": similarity.normal_tokens(renamed)})
    share = next(f.share for f in found if f.task == "a8_continuous_batching")
    assert share > 0.9
    # and a file of other code holds nothing of it
    other = (ROOT / "autograder/release/similarity.py").read_text(encoding="utf-8")
    assert not [f for f in similarity.findings(solutions, {"other.py": similarity.normal_tokens(other)})
                if f.task == "a8_continuous_batching"]


def test_the_limit_is_a_tenth_of_the_tokens():
    solution = [[f"t{i}" for i in range(120)]]  # 120 tokens, no run repeated
    file = {"f.py": solution[0][:12]}  # one run: 12 of 120 tokens, 10%
    assert [f.share for f in similarity.findings({"t": solution}, file)] == [0.1]
    assert similarity.findings({"t": solution}, {"f.py": solution[0][:11]}) == []
