"""No visible test cell of a notebook gives an autograded answer away: what a student sees of a
test cell (its source without the hidden region) checks types, signs and edge cases; the values
are checked by the hidden tests, when the notebook is graded.

The answers are the names the source notebook's solution cells bind, run here with the solutions
in place. A visible test cell gives one away when

* it computes the value itself: run with the reference's answers, with every expression
  recorded, an expression that does not read an answer yields an answer's value (``want =
  hw_model.LLAMA3_70B.param_count``, ``1 - 0.99 ** 20``), or what an answer function returned
  in that cell (a twin of the function: ``_reference(x, k)`` beside ``chunked_sum(x, k)``);
* it spells the value out: a number in its code, its comments or its messages equals an answer's
  value, as printed (``about 18.2%``, ``151.0 M``, ``expected 10``), or an arithmetic in its text
  does (``1 - 0.99**20``).

Values 0 and 1 and booleans are too common to tell anything and are not looked for (nor a 2 in
the text: "two matrices"). Cheap: the
notebooks' own cells, in this process (well under a second)."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import numbers
import re
import tokenize

import numpy as np
import pytest

from autograder.grading.grade import ROOT
from autograder.markers import strip_hidden
from autograder.notebooks.nbgrader import notebooks_of

NOTEBOOKS = notebooks_of(ROOT)
# how a figure may be printed: as is, in percent, in millions, billions, KiB, MiB, GiB (not in
# thousands: 0.01 of a 10 is everywhere in these notebooks' probabilities)
SCALES = (1.0, 100.0, 1e-6, 1e-9, 1 / 1024, 1 / 2**20, 1 / 2**30)
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
ARITHMETIC = re.compile(r"\(?\d[\d.eE]*\)?(?:\s*(?:\*\*|[-+*/])\s*\(?\s*\d[\d.eE]*(?:\s*/\s*\d+)?\s*\)?)+")


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _is_test(cell: dict) -> bool:
    return cell["cell_type"] == "code" and bool(_meta(cell).get("grade")) and not _meta(cell).get("solution")


def _bound(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _answers(cells: list[dict]) -> tuple[dict, set[str]]:
    """The namespace after the constants and the solutions ran (test cells left out), and the
    names the solution cells bind."""
    scope: dict = {}
    names: set[str] = set()
    for cell in cells:
        if cell["cell_type"] != "code" or _is_test(cell):
            continue
        source = "".join(cell["source"])
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, _meta(cell).get("grade_id", "cell"), "exec"), scope)
        if _meta(cell).get("solution"):
            names |= _bound(ast.parse(source))
    return scope, names


def _telling(value) -> bool:
    """A number that says something when it shows up: not a bool, not 0 or 1, finite."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        return False
    value = float(value)
    return math.isfinite(value) and value not in (0.0, 1.0, -1.0)


def _same(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


class _Recorder(ast.NodeTransformer):
    """Wraps every expression that is read in ``__rec__(i, ...)``; ``info[i]`` says whether it
    reads an answer (directly or through a name bound from one) and whether it calls an answer."""

    def __init__(self, tainted: set[str], functions: set[str]) -> None:
        self.tainted, self.functions = tainted, functions
        self.info: list[tuple[bool, bool, str]] = []  # (reads an answer, calls one, the expression)

    def _reads_answer(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.tainted for n in ast.walk(node))

    def visit(self, node):
        if (not isinstance(node, ast.expr) or isinstance(node, (ast.Constant, ast.FormattedValue, ast.Slice,
                                                                 ast.Starred, ast.JoinedStr))
                or not isinstance(getattr(node, "ctx", ast.Load()), ast.Load)):
            return super().visit(node)
        calls_answer = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions
        info = (self._reads_answer(node), calls_answer, ast.unparse(node))  # before its parts are wrapped
        node = super().visit(node)
        self.info.append(info)
        return ast.Call(ast.Name("__rec__", ast.Load()), [ast.Constant(len(self.info) - 1), node], [])


def _tainted(tree: ast.AST, answers: set[str]) -> set[str]:
    """The answers, and every name the cell binds from an expression reading one (to a fixpoint)."""
    tainted = set(answers)
    while True:
        before = len(tainted)
        for node in ast.walk(tree):
            pairs = ([(t, node.value) for t in node.targets] if isinstance(node, ast.Assign)
                     else [(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension))
                     else [(node.target, node.value)] if isinstance(node, (ast.AugAssign, ast.NamedExpr)) else [])
            for target, value in pairs:
                if any(isinstance(n, ast.Name) and n.id in tainted for n in ast.walk(value)):
                    tainted |= _bound(target) | {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if len(tainted) == before:
            return tainted


def _computed_leaks(source: str, scope: dict, names: set[str], plain: dict) -> list[str]:
    tree = ast.parse(source)
    functions = {n for n in names if callable(scope.get(n))}
    recorder = _Recorder(_tainted(tree, names), functions)
    tree = ast.fix_missing_locations(recorder.visit(tree))
    seen: list[tuple[int, object]] = []

    def record(i: int, v: object) -> object:
        seen.append((i, v))
        return v
    run = dict(scope, __rec__=record)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(tree, "<visible test>", "exec"), run)  # the reference passes its visible tests
    returned = [v for i, v in seen if recorder.info[i][1] and _telling(v)]
    leaks = []
    for i, value in seen:
        reads_answer, _, text = recorder.info[i]
        if reads_answer or not _telling(value):
            continue
        for name, want in plain.items():
            if _same(value, want):
                leaks.append(f"computes {name} = {want!r} as `{text}`")
        if any(_same(value, r) for r in returned):
            leaks.append(f"computes what an answer function returns, as `{text}` = {value!r}")
    return leaks


def _printed_as(text: str, value: float) -> bool:
    """``text`` (a number as written) is ``value`` at one of :data:`SCALES`, to its last digit."""
    written = float(text)
    digits = len(text.split(".")[1]) if "." in text and "e" not in text.lower() else 0
    ulp = 10.0 ** -digits
    return _telling(written) and any(
        abs(written - value * s) <= min(ulp * 1.0001, 0.01 * abs(value * s)) and (digits or _same(written, value * s))
        for s in SCALES)


def _arithmetic(text: str):
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    if not all(isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop))
               for n in ast.walk(tree)):
        return None
    try:
        return eval(compile(tree, "<text>", "eval"), {"__builtins__": {}})
    except (ArithmeticError, ValueError):
        return None


def _written_leaks(source: str, plain: dict) -> list[str]:
    words = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type in (tokenize.COMMENT, tokenize.STRING, tokenize.NUMBER)
             or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1)]
    leaks = []
    for word in words:
        for match in NUMBER.finditer(word):
            for name, want in plain.items():
                if not (float(want).is_integer() and abs(want) < 3) and _printed_as(match.group(), float(want)):
                    leaks.append(f"writes {match.group()!r} for {name} = {want!r}")
        for match in ARITHMETIC.finditer(word):
            value = _arithmetic(match.group())
            for name, want in plain.items():
                if _telling(value) and math.isclose(float(value), float(want), rel_tol=1e-3):
                    leaks.append(f"writes {match.group()!r}, which is {name} = {want!r}")
    return leaks


def leaks_of(cells: list[dict]) -> dict[str, list[str]]:
    """Per visible test cell (by grade id), how it gives an answer away."""
    scope, names = _answers(cells)
    plain = {n: scope[n] for n in sorted(names) if _telling(scope.get(n))}
    found = {}
    for cell in cells:
        if not _is_test(cell):
            continue
        source = strip_hidden("".join(cell["source"]), _meta(cell)["grade_id"])
        leaks = _computed_leaks(source, scope, names, plain) + _written_leaks(source, plain)
        if leaks:
            found[_meta(cell)["grade_id"]] = leaks
    return found


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_no_visible_test_cell_gives_an_answer_away(nb):
    cells = json.loads((ROOT / "assignments" / nb.file).read_text(encoding="utf-8"))["cells"]
    assert leaks_of(cells) == {}


def _notebook(answer: str, visible_test: str) -> list[dict]:
    solution = {"cell_type": "code", "source": answer,
                "metadata": {"nbgrader": {"grade": False, "solution": True, "grade_id": "answer"}}}
    test = {"cell_type": "code", "source": visible_test,
            "metadata": {"nbgrader": {"grade": True, "solution": False, "points": 1, "grade_id": "test"}}}
    return [solution, test]


@pytest.mark.parametrize("answer, visible_test", [
    ("total = 2 * 8 * 1024", "want = 2 * 8 * 2 ** 9 * 2\nassert total == want"),  # computes it
    ("total = 16384", "assert total == 16384, 'expected 16384'"),  # spells it out
    ("share = 1 - 0.99 ** 20", "# about 18.2%\nassert 0 < share < 0.5"),  # prints it rounded
    ("share = 1 - 0.99 ** 20", "assert share > 0, 'expected 1 - 0.99**20'"),  # writes its formula
    ("def twice(x):\n    return 2 * x", "def _mine(x):\n    return x + x\nassert twice(21) == _mine(21)"),  # a twin
])
def test_each_way_of_giving_an_answer_away_is_caught(answer, visible_test):
    assert list(leaks_of(_notebook(answer, visible_test))) == ["test"]


@pytest.mark.parametrize("answer, visible_test", [
    ("total = 16384", "assert isinstance(total, int) and total > 0, f'total must be a positive int, got {total!r}'"),
    ("share = 1 - 0.99 ** 20", "assert 0 <= share <= 1\n### BEGIN HIDDEN TESTS\nassert share == 1 - 0.99 ** 20\n### END HIDDEN TESTS\n"),
    ("def twice(x):\n    return 2 * x", "assert twice(0) == 0 and twice(3) > twice(2)"),
])
def test_sanity_checks_and_hidden_values_pass(answer, visible_test):
    assert leaks_of(_notebook(answer, visible_test)) == {}
