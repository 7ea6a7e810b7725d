"""``release OUT``: the student repository, written from the course copy.

What changes on the way (each rule is here, nowhere else):

* every file a task lists under ``edit``: ``### BEGIN SOLUTION`` regions become
  ``raise NotImplementedError(...)`` (:func:`autograder.markers.strip_solutions`);
  notebooks (the manifest's ``[[notebook]]`` entries) are replaced by the student versions that
  nbgrader's ``generate_assignment`` writes (:func:`stub_notebook`): solutions stubbed, hidden
  tests removed, cells locked and checksummed;
* test files under ``assignments/``: ``### BEGIN HIDDEN TESTS`` regions are removed, and the
  manifest forgets the tests that were in them;
* tasks whose visibility is not ``visible``: their test files are left out, and their tests too;
* left out entirely (:data:`PRIVATE`): the autograder's mutants, hostile submissions, answer key
  and its exercise scripts, the developers' ``ARCHITECTURE.md``, and the tests that grade the reference solutions (with any test or
  benchmark importing one of those). The pure-Python references (``servelab.reference``, the
  readable twins of the Rust core) ship: none is a task's solution
  (``autograder/tests/test_reference_is_no_solution.py``);
* the Makefile learns that failing assignments are expected (``ASSIGNMENTS_MAY_FAIL = 1``), that
  ``make build WHEEL=...`` installs a wheel (``make wheel``) instead of compiling, loses
  the instructors' targets (:data:`INSTRUCTOR_TARGETS`) and gains ``make check``, the students'
  one way to run their tests (:func:`student_makefile`);
* ``README.md`` is the students' (:data:`STUDENT_README`, its task, notebook and hidden-test
  lists filled in from the manifest: :func:`student_readme`), and
  ``.github/workflows/classroom.yml`` is added: GitHub Classroom's autograding, one step per task
  of the released manifest with its points (:func:`autograder.ci.workflow.classroom_workflow`).

A file outside the edit list that still holds a solution region stops the release (a leak).

Two kinds of release (the instructors' guide, autograder/README.md, says when to pick which):

* the default, a **staff binary**: the library ships compiled, never as source. Left out as well
  (:data:`SOURCE_ONLY`): the library's sources and tests (``python/``, ``rust/``, ``tests/``,
  ``benchmarks/``, Cargo's files), the whole autograder (its Classroom workflow included: it runs
  the grader) and the instructors' CI. Added: the wheels (``wheels/``, from
  :mod:`autograder.release.staff_wheel`), which ``make build`` installs for the student's Python
  without Rust, and ``.devcontainer/`` (Linux, Python, the wheel: macOS and Windows students
  open the repository in it). ``autograder/tests/test_release_similarity.py`` checks that no
  readable file of such a release holds a task's solution;
* ``readable=True`` (``release --readable``): the readable library, as the lecture itself works,
  for courses without grades: sources, references and tests ship; ``make build`` compiles the
  Rust core (cargo needed).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from autograder.files import normal_mode
from autograder.grading import grading_secret
from autograder.notebooks import nbgrader
from autograder.ci.workflow import classroom_workflow
from autograder.grading.grade import hidden_tests, manifest_of
from autograder.markers import SOLUTION, count_regions, strip_hidden, strip_solutions
from servelab.harness.manifest import Manifest

PRIVATE = (
    "autograder/mutants/", "autograder/tests/", "autograder/answers/", "autograder/exercises/",
    "tests/test_assignments_grading.py",
    "ARCHITECTURE.md",  # the developers' map: it names the mutants, the answer key, the self-check
)
# what only a readable release ships: a staff binary's student gets the compiled library from
# wheels/ instead, and no grader (its Classroom workflow needs the whole autograder)
SOURCE_ONLY = ("python/", "rust/", "tests/", "benchmarks/", "autograder/", ".ci/", "docs/", "Cargo.toml", "Cargo.lock")
WHEELS = "wheels/"
DEVCONTAINER = Path(__file__).with_name("devcontainer")  # written as .devcontainer/ into a staff release
STUDENT_README = "autograder/release/README.student.md"  # in the course copy; read from the grader's folder, like CLASSROOM
STUDENT_README_TEMPLATE = Path(__file__).with_name("README.student.md")
MAKEFILE_FLAG = "ASSIGNMENTS_MAY_FAIL ?="
# make targets that need what a release leaves out (the autograder's tests, mutants, answer key)
INSTRUCTOR_TARGETS = ("test-autograder", "test-python-other", "selfcheck", "release", "release-check", "grade",
                      "staff-wheels")
# make targets that need the library's sources (rust/, python/, tests/, benchmarks/): a staff
# release has none of them; its `make test` runs the assignments
SOURCE_TARGETS = ("test-rust", "test-python", "stubtest", "typecheck", "bench", "fuzz", "wheel", "sdist",
                  "drop-stale-core")


def course_files(root: Path) -> list[str]:
    """Files of the course copy: the files git tracks, as they are in the work tree, when it is a
    git checkout (as ``gradescope/make_zip.sh``: an untracked file, such as a solution draft or a
    submission unpacked for a look, never ships; ``git add`` what must), else every file outside
    the usual build folders."""
    try:
        run = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=root,
                             capture_output=True, check=True)
        names = [n for n in run.stdout.decode().split("\0") if n]
        return sorted(n for n in names if (root / n).is_file())
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "target", "__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", "out"}
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if p.is_file() and not skip & set(p.relative_to(root).parts))


def _secret(root: Path, rel: str) -> bool:
    """A grading secret never ships: a recorded one (``*.grading-secret``, written beside a
    results.json) or the file ``$SERVELAB_GRADING_SECRET_FILE`` names, should either sit in the
    course copy (:mod:`autograder.grading.grading_secret`)."""
    named = os.environ.get(grading_secret.ENV_SECRET_FILE)
    return rel.endswith(grading_secret.SIDECAR_SUFFIX) or bool(
        named and Path(named).resolve() == (root / rel).resolve())


def stub_notebook(path: str, versions: dict[str, str]) -> str:
    """A notebook's student version, as nbgrader's ``generate_assignment`` wrote it
    (:func:`autograder.notebooks.nbgrader.student_versions`); a notebook under ``assignments/`` that the
    manifest does not list stops the release rather than ship its solutions."""
    if path not in versions:
        raise ValueError(f"{path} is a notebook under assignments/ that no [[notebook]] of the manifest lists: "
                         "it would ship unstubbed")
    return versions[path]


def plan(root: Path, readable: bool = False) -> dict[str, str | None]:
    """rel path -> new text (None: copy the bytes unchanged); left-out files are absent.
    ``readable``: the readable library ships (else :data:`SOURCE_ONLY` is left out, and the
    wheels are the caller's: :func:`release`)."""
    manifest = manifest_of(root)
    hidden = hidden_tests(root, manifest)
    edit = {f"assignments/{rel}" for t in manifest.tasks for rel in t.edit}
    hidden_files = {f"assignments/{test.split('::')[0]}" for t in manifest.tasks if t.visibility != "visible"
                    for test in t.tests}
    drop_tests = hidden | {test for t in manifest.tasks if t.visibility != "visible" for test in t.tests}
    out: dict[str, str | None] = {}
    versions: dict[str, str] | None = None
    for rel in course_files(root):
        path = root / rel
        if rel.startswith(PRIVATE) or rel in hidden_files or rel == STUDENT_README or _secret(root, rel):
            continue
        if not readable and rel.startswith(SOURCE_ONLY):
            continue
        if rel.endswith(".ipynb") and rel.startswith("assignments/"):
            if versions is None:  # nbgrader runs once, for every notebook
                versions = nbgrader.student_versions(root) if nbgrader.notebooks_of(root) else {}
            out[rel] = stub_notebook(rel, versions)
            continue
        if not rel.endswith((".py", ".toml", ".md", ".txt", ".cfg", ".yml", ".yaml", ".ipynb")) and rel != "Makefile":
            out[rel] = None
            continue
        text = path.read_text(encoding="utf-8")
        if rel in edit:
            text = strip_solutions(text, rel.removeprefix("assignments/"))
        elif count_regions(text, SOLUTION):
            raise ValueError(f"{rel} holds a solution region but is not an edit file of any task: it would leak")
        if rel.startswith("assignments/"):
            text = strip_hidden(text, rel)
        if rel == "assignments/manifest.toml":
            text = _drop_manifest_tests(text, drop_tests)
        if rel == "Makefile":
            if MAKEFILE_FLAG not in text:
                raise ValueError(f"Makefile lacks the line {MAKEFILE_FLAG!r} that a release sets")
            text = re.sub(r"^ASSIGNMENTS_MAY_FAIL \?=.*$", "ASSIGNMENTS_MAY_FAIL ?= 1", text, count=1, flags=re.M)
        out[rel] = text
    _drop_dependents(root, out)
    makefile = out.get("Makefile")  # always read as text above (None: a file copied as bytes)
    if makefile is not None:
        out["Makefile"] = student_makefile(makefile, kept=set(out) | {"README.md"},
                                           drop=() if readable else SOURCE_TARGETS)
    if "pyproject.toml" in out:
        out["pyproject.toml"] = student_pyproject((root / "pyproject.toml").read_text(encoding="utf-8"))
    out["README.md"] = student_readme(root, manifest, drop_tests, readable)
    if readable:
        out[".github/workflows/classroom.yml"] = _classroom(root, out)
    else:
        for path in sorted(DEVCONTAINER.iterdir()):
            out[f".devcontainer/{path.name}"] = path.read_text(encoding="utf-8")
    return out


def student_pyproject(text: str) -> str:
    """The course's pyproject.toml without what only the instructors' copy needs: mypy's
    exclusion of the hostile submissions (a release has none).

    >>> course = 'features = ["python"]\\n\\n[tool.mypy]\\nexclude = ["^autograder/tests/hostile/"]\\n'
    >>> student_pyproject(course)
    'features = ["python"]\\n\\n[tool.mypy]\\n'
    """
    return re.sub(r"^exclude = \[\"\^autograder/tests/hostile/\"\]\n", "", text, flags=re.M)


def student_makefile(text: str, kept: set[str] | None = None, drop: "tuple[str, ...]" = ()) -> str:
    """The course Makefile without :data:`INSTRUCTOR_TARGETS`, nor the targets whose paragraph
    names a ``tests/`` or ``benchmarks/`` file missing from ``kept`` (the release's files; e.g.
    ``fuzz`` runs a test of the references), nor the targets named in ``drop``: each paragraph
    that defines one goes, and their names in ``.PHONY``, in ``test``'s prerequisites and in a
    ``for step in ...`` list of targets. (``make check``, the students' way to run
    their tests, stays: ``autograder/tests/test_release_is_the_students.py`` checks it is there.)

    >>> course = ".PHONY: test check grade\\n\\ntest: build\\n\\t@true\\n\\ncheck: build\\n\\tpytest\\n\\n"
    >>> course += "# make grade SUBMISSION=...\\ngrade: build\\n\\tgrade it\\n"
    >>> mine = student_makefile(course)
    >>> mine.splitlines()[:3], "grade" in mine
    (['.PHONY: test check', '', 'test: build'], False)
    """
    target = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)", re.M)
    gone = set(INSTRUCTOR_TARGETS) | set(drop)
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        names = set(target.findall(paragraph)) - {"PHONY"}
        # (a file named in a comment, or only in $(wildcard ...), is no need: LIBRARY_STEPS tests
        # whether the course's own grading test is there)
        code = "\n".join(line for line in paragraph.splitlines() if not line.lstrip().startswith("#"))
        needed = re.sub(r"\$\(wildcard [^)]*\)", "", code)
        missing = kept is not None and any(f not in kept for f in re.findall(r"\b(?:tests|benchmarks)/[\w/]+\.py\b",
                                                                               needed))
        if names & gone or (names and missing):
            gone |= names
        else:
            paragraphs.append(paragraph)
    text = "\n\n".join(paragraphs)
    text = re.sub(r" *\\?\n?\t?\$\(if \$\(wildcard autograder/tests\),[^)]*\)", "", text)
    text = re.sub(r"^# the autograder's own tests and self-check exist only in the instructors' copy.*\n"
                  r"(?:# .*\n)*", "", text, flags=re.M)

    def phony(match: re.Match) -> str:
        names = [n for n in match.group(1).replace("\\\n", " ").split() if n not in gone]
        return ".PHONY: " + " ".join(names)
    text = re.sub(r"^\.PHONY:((?:[^\n]*\\\n)*[^\n]*)", phony, text, count=1, flags=re.M)

    def steps(match: re.Match) -> str:
        return match.group(1) + " ".join(n for n in match.group(2).split() if n not in gone) + match.group(3)
    text = re.sub(r"(for step in )([\w\s-]+?)(;)", steps, text)
    # a list of steps kept in a variable (LIBRARY_STEPS := ...): its gone targets leave it too
    text = re.sub(r"^(\w+_STEPS\s*:?=\s*)(.*)$()", steps, text, flags=re.M)
    return text


# the README's paragraphs that differ between the two kinds of release
SETUP = {
    False: ("You need Python 3.10 to 3.13 with `venv`, and `make`; no Rust. The library comes compiled, as\n"
            "wheels in `wheels/` (one per Python version); `make build` installs the one for your Python\n"
            "and the test tools from PyPI into `.venv/`, in seconds:\n\n"
            "```sh\nmake build        # .venv/ with servelab from wheels/ (make build PYTHON=python3.12 picks a Python)\n```"),
    True: ("You need Rust (`cargo`), Python 3.10+ with `venv`, and `make`. Everything else is fetched from\n"
           "PyPI and crates.io into `.venv/` and `target/`:\n\n"
           "```sh\nmake build        # .venv/ with servelab and its Rust core (a few minutes the first time)\n```"),
}
FIRST_SCREEN = {
    False: ("**On macOS or Windows**, open this repository in its dev container (`.devcontainer/`: Linux,\n"
            "Python and the library's wheel; VS Code's \"Reopen in Container\", or a GitHub Codespace), then\n"
            "run the commands below in its terminal. On Linux, run them as they are."),
    True: ("This is the readable edition: the library's sources (`python/`, `rust/`) and tests ship with it,\n"
           "for a course without grades, and `make build` compiles the Rust core."),
}
ALSO = {
    False: ("`make demo` runs the lecture's demos (plots in `out/`); `.venv/bin/servelab --help` lists the\n"
            "command line (demos, sweeps and traces). The library ships compiled, with its documentation: its\n"
            "modules (`servelab.hw_model`, `servelab.tiny_llm`, `servelab.metrics`, ...) document\n"
            "themselves (`.venv/bin/python -c \"import servelab.hw_model as h; help(h)\"`), and `.pyi`\n"
            "stubs give your editor their signatures. The grader's sandbox lets your code import nothing of\n"
            "servelab."),
    True: ("`make demo` runs the lecture's demos (plots in `out/`); `make test` runs the library's own\n"
           "tests; `.venv/bin/servelab --help` lists the command line (demos, sweeps and traces). The library's\n"
           "modules (`servelab.hw_model`, `servelab.tiny_llm`, `servelab.metrics`, ...) document\n"
           "themselves: `.venv/bin/python -c \"import servelab.hw_model as h; help(h)\"`.\n"
           "`python/servelab/reference/` holds small, readable Python twins of the Rust core (the step\n"
           "cost, the block allocator, the simulators): read them to see how the library computes what it\n"
           "does. The grader's sandbox lets your code import nothing of servelab."),
}


# how a pushed repository is graded: a readable release carries the Classroom workflow (it runs
# the grader, which only a readable release ships)
SUBMIT_REPOSITORY = {
    False: ("- **your repository**: push it; your course grades it from there (on Gradescope, or with its\n"
            "  own run of the grader), or"),
    True: ("- **your repository**: push it (a GitHub Classroom repository grades each push in its\n"
           "  `classroom` workflow, `.github/workflows/classroom.yml`, and shows the points in the run's\n"
           "  summary), or"),
}


def student_readme(root: Path, manifest, hidden: set[str], readable: bool = False) -> str:
    """The students' README.md: :data:`STUDENT_README` with its ``{{tasks}}``, ``{{notebooks}}``
    and ``{{hidden}}`` filled in from the course manifest (``hidden``: the tests a release drops),
    and its ``{{first_screen}}``, ``{{setup}}`` and ``{{also}}`` for the kind of release."""
    rows = ["| task | folder | file(s) to edit | points | lecture |", "|---|---|---|---|---|"]
    for t in manifest.tasks:
        if t.visibility != "visible":
            continue
        seen = sum(p for test, p in t.tests.items() if test not in hidden)
        folder = sorted({Path(rel).parent.as_posix() for rel in t.edit})
        rows.append(f"| {t.id}: {t.title} | `{'`, `'.join(f + '/' for f in folder)}` | "
                    f"{', '.join(f'`{Path(rel).name}`' for rel in t.edit)} | {seen} | {t.lecture} |")
    visible = sum(p for t in manifest.tasks for test, p in t.tests.items() if test not in hidden)
    rows.append(f"| total | | | {visible} | |")
    nb_rows = ["| notebook | exercise | autograded points | written answers (by hand) |", "|---|---|---|---|"]
    nb_hidden = 0
    for nb in nbgrader.notebooks_of(root):
        cells = nbgrader.cell_points(root / "assignments" / nb.file)
        nb_hidden += sum(c.hidden for c in cells)
        auto = sum(c.points for c in cells if c.kind == "auto")
        manual = sum(c.points for c in cells if c.kind == "manual")
        nb_rows.append(f"| `assignments/{nb.file}` | {nb.title} ({nb.lecture}) | {auto} | {manual} |")
    n_hidden = len(hidden)
    extra = manifest.total_points - visible
    hidden_text = (f"- **Hidden tests**: {n_hidden} more test(s) worth {extra} point(s), beyond the {visible} "
                   "points of the tests you have. They check the same functions on cases you do not see, so make "
                   "your code right, not just the visible tests green.\n" if n_hidden else
                   "- No hidden Python tests: the points of the tests you have are the tasks' points.\n")
    if nb_hidden:
        hidden_text += (f"- **Hidden checks in the notebooks**: {nb_hidden} autograded test cell(s) hold extra checks "
                        "that run only at grading: make the answer right, not just the visible asserts pass.\n")
    text = STUDENT_README_TEMPLATE.read_text(encoding="utf-8")
    for key, value in (("tasks", "\n".join(rows)), ("notebooks", "\n".join(nb_rows)), ("hidden", hidden_text.rstrip("\n")),
                       ("first_screen", FIRST_SCREEN[readable]), ("setup", SETUP[readable]), ("also", ALSO[readable]),
                       ("submit_repository", SUBMIT_REPOSITORY[readable])):
        text = text.replace("{{" + key + "}}", value)
    return text


def _classroom(root: Path, out: dict[str, str | None]) -> str:
    """The Classroom workflow for the released manifest (hidden tests gone) and the notebooks'
    autograded points (the same in source and released notebooks: nbgrader keeps the cells)."""
    released = out["assignments/manifest.toml"]
    assert released is not None  # the manifest is text, always rewritten above
    notebook_points = {nb.id: (nb.title, sum(c.points for c in nbgrader.cell_points(root / "assignments" / nb.file)
                                            if c.kind == "auto"))
                       for nb in nbgrader.notebooks_of(root)}
    return classroom_workflow(Manifest.from_toml(released, "released manifest"), notebook_points)


def _module_of(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".")


def _imported(text: str) -> set[str]:
    """Dotted names a Python file imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _drop_dependents(root: Path, out: dict[str, str | None]) -> None:
    """Leaves out the tests and benchmarks that import a test or benchmark module the release
    already left out (one that grades the reference solutions, say), until none is left: a release whose
    own ``make test`` fails to collect would be no release."""
    kept = lambda rel: rel.startswith(("tests/", "benchmarks/")) and rel.endswith(".py")  # noqa: E731
    gone = {_module_of(rel) for rel in course_files(root) if kept(rel) and rel not in out}
    changed = True
    while changed:
        changed = False
        for rel in [r for r in out if kept(r)]:
            held = out[rel]
            text = held if held is not None else (root / rel).read_text(encoding="utf-8")
            if _imported(text) & gone:
                del out[rel]
                gone.add(_module_of(rel))
                changed = True


def _drop_manifest_tests(text: str, tests: set[str]) -> str:
    keep = [line for line in text.splitlines(keepends=True)
            if not (line.lstrip().startswith('"') and line.split('"')[1] in tests)]
    return "".join(keep)


def release(root: Path, out: Path, force: bool = False, readable: bool = False,
            wheels: "list[Path] | tuple[Path, ...]" = ()) -> list[str]:
    """Writes the release into ``out`` (created; with ``force`` replaced) and returns its files.
    Written into a temporary folder first, then renamed: never half a release.

    ``readable``: the readable library (:func:`plan`); else a staff binary, and ``wheels`` (the
    staff wheels, :mod:`autograder.release.staff_wheel`) go into ``wheels/``. (The self-check
    grades a release's assignments with the course's own library, so it passes none.)"""
    root, out = Path(root).resolve(), Path(out).resolve()
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"release OUT must be a new or empty folder, got {str(out)!r} (use --force to replace it)")
    if root == out or (root in out.parents and root / "out" not in (out, *out.parents)):
        raise ValueError(f"release OUT must lie outside the course copy (or under its out/), got {str(out)!r}")
    if readable and wheels:
        raise ValueError("release: a readable release compiles its library; it takes no wheels")
    files = plan(root, readable)
    copies = {rel: root / rel for rel, text in files.items() if text is None}
    for wheel in wheels:
        wheel = Path(wheel)
        if not (wheel.is_file() and wheel.name.endswith(".whl")):
            raise ValueError(f"release: wheels must be .whl files, got {str(wheel)!r}")
        rel = WHEELS + wheel.name
        files[rel], copies[rel] = None, wheel
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(normal_mode(file=False))  # 0755, not mkdtemp's 0700: students get this folder
        for rel, text in sorted(files.items()):
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if text is None:
                shutil.copy2(copies[rel], dst)
            else:
                dst.write_text(text, encoding="utf-8")
                if (root / rel).exists():
                    shutil.copymode(root / rel, dst)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(files)
