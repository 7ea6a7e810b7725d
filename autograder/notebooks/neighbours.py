"""Other constants for a notebook whose answers are numbers of one model: the grader's check runs
the student's cells again on a neighbouring model, so that an answer must follow from the
constants cell, not be read off the shipped library (servelab.hw_model prints every number of
the lecture's ledger, lecture §2.4, §3.5).

A *constants cell* is a locked code cell, worth no points, that only assigns numbers to
upper-case names (ex01's ``N_LAYERS, D_MODEL, ... = 80, 8192, ...``). :func:`varied` draws a
neighbour from a seed (the grading secret's, per student and notebook: a regrade draws the same):
every whole number above :data:`KEPT_BELOW` is moved by a factor of the neighbour's range in
:data:`NEIGHBOURS` (a smaller model, then a larger one: a yes/no answer such as "fits on one
GPU" then differs from the lecture's in one of them), every float by a factor in
:data:`SPREAD` (a share in (0, 1) stays in it); small whole numbers (bytes per parameter, a head
count of 8) stay, since an honest answer may write them as the lecture does.

>>> cells = [{"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "k", "locked": True}},
...           "source": "N_LAYERS, D_MODEL = 80, 8192  # the model\\nBYTES = 2\\nUTIL = 0.9\\n"}]
>>> grade_id, constants = constants_cell(cells)
>>> grade_id, constants
('k', {'N_LAYERS': 80, 'D_MODEL': 8192, 'BYTES': 2, 'UTIL': 0.9})
>>> other = varied(constants, seed=1)
>>> other["BYTES"], other["N_LAYERS"] != 80, other["D_MODEL"] != 8192, 0 < other["UTIL"] < 1
(2, True, True, True)
>>> varied(constants, seed=1) == other   # the seed decides
True
>>> print(assignments(other).splitlines()[0])
N_LAYERS = 48
"""

from __future__ import annotations

import ast
import random

KEPT_BELOW = 17  # whole numbers up to 16 stay as they are
# the factors a whole number (a model's size) is moved by: a smaller model, then a larger one,
# far enough that the lecture's yes/no answers flip in one of them
NEIGHBOURS = ((0.35, 0.65), (1.3, 1.8))
SPREAD = (0.9, 1.1)  # the factor a float (a GPU's memory, a share) is moved by, at least 2% off 1


def _literal(node: ast.expr) -> list[int | float] | None:
    """The numbers a constant expression holds (a number, a tuple of numbers), else None."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    values: list[int | float] = []
    for item in items:
        sign = 1
        if isinstance(item, ast.UnaryOp) and isinstance(item.op, ast.USub):
            sign, item = -1, item.operand
        value = item.value if isinstance(item, ast.Constant) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        values.append(sign * value)
    return values


def constants_of(source: str) -> dict[str, int | float] | None:
    """The upper-case names a cell assigns numbers to, when that is all it does; else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found: dict[str, int | float] = {}
    for statement in tree.body:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target = statement.targets[0]
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        values = _literal(statement.value)
        if values is None or len(values) != len(names) or \
                not all(isinstance(n, ast.Name) and n.id.isupper() for n in names):
            return None
        found.update({n.id: v for n, v in zip(names, values) if isinstance(n, ast.Name)})
    return found or None


def constants_cell(cells: list[dict]) -> tuple[str, dict[str, int | float]] | None:
    """(grade_id, constants) of the notebook's constants cell (the first), or None."""
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("locked") or meta.get("grade") or meta.get("solution"):
            continue
        source = cell.get("source", "")
        found = constants_of("".join(source) if isinstance(source, list) else str(source))
        if found and meta.get("grade_id"):
            return meta["grade_id"], found
    return None


def varied(constants: dict[str, int | float], seed: int, whole: tuple[float, float] = NEIGHBOURS[0]) -> dict[str, int | float]:
    """A neighbour of ``constants`` drawn from ``seed``, whole numbers moved by a factor in
    ``whole`` (see the module's docstring)."""
    rng = random.Random(seed)
    out: dict[str, int | float] = {}
    for name, value in constants.items():
        factor = rng.uniform(*SPREAD)
        factor = factor if abs(factor - 1) > 0.02 else 1.05
        if isinstance(value, int):
            moved = round(value * rng.uniform(*whole))
            out[name] = value if abs(value) < KEPT_BELOW else (moved if moved != value else value + 1)
        elif 0 < value < 1:  # a share: moved within (0, 1), halfway to 1 when the factor would pass it
            out[name] = value * factor if value * factor < 0.99 else value + (1 - value) / 2
        else:
            out[name] = value * factor
    return out


def assignments(constants: dict[str, int | float]) -> str:
    """A constants cell's source for ``constants``."""
    return "".join(f"{name} = {value!r}\n" for name, value in constants.items())


def with_constants(cells: list[dict], grade_id: str, constants: dict[str, int | float]) -> list[dict] | None:
    """``cells`` with the constants cell ``grade_id`` holding ``constants`` instead, or None
    when no cell has that id (a student who deleted it)."""
    out, found = [], False
    for cell in cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id and cell.get("cell_type") == "code":
            cell, found = {**cell, "source": assignments(constants)}, True
        out.append(cell)
    return out if found else None
