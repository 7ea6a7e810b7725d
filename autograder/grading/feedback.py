"""``feedback RESULTS --out FOLDER``: one Markdown page per student, showing what Gradescope
would show: visible tests always, ``after_due_date`` tests only with ``--after-due-date``,
``hidden`` tests never (their points still count in the total). A manually graded notebook cell
shows "pending" (results.json gives it no status: it has not failed, it waits for the
instructor).

RESULTS is grade-all's ``--out`` folder (``results/<student>.json``: one page each), or the
results.json that ``grade --out`` wrote, or the folder holding it (one page, named after the
file's folder when the file is ``results.json``).

>>> data = {"score": 1, "max_score": 3, "tests": [
...     {"name": "a1: t", "score": 1, "max_score": 1, "status": "passed", "output": "passed", "visibility": "visible"},
...     {"name": "nb: q (manually graded)", "score": 0, "max_score": 2, "output": "manually graded: 2 point(s) pending", "visibility": "visible"}]}
>>> print(page("ada", data, after_due_date=False).splitlines()[7])
| nb: q (manually graded) | 0 / 2 | pending |
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from autograder.files import write_text_atomic
from autograder.grading.results import plain_points, plain_text, status_of

SHOWN = {False: {"visible"}, True: {"visible", "after_due_date", "after_published"}}


def inline(text: str) -> str:
    r"""``text`` as Markdown that renders as exactly that text on one line: plain text
    (:func:`autograder.grading.results.plain_text`), HTML's characters as entities (no tag, no
    comment, no image), and every character that starts Markdown inside a line behind a
    backslash (no link, emphasis, table cell or code of the student's making).

    >>> inline("a | <img src=x> [x](http://e) **b** <!-- www.e.com (manually graded)")
    'a \\| &lt;img src=x&gt; \\[x\\](http\\://e) \\*\\*b\\*\\* &lt;\\!-- www\\.e.com (manually graded)'
    """
    text = plain_text(str(text)).replace("\n", " ").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = "".join("\\" + ch if ch in MARKDOWN_PUNCTUATION else ch for ch in text)
    # a bare address would become a link (GitHub's autolinks): broken by an escape that renders as nothing
    return text.replace("://", "\\://").replace("www.", "www\\.")


# what starts a link, an image, emphasis, code, a table cell or strikethrough inside a line (a
# line of the page never starts with the text, so the characters of headings and lists are inert)
MARKDOWN_PUNCTUATION = frozenset("\\`*_[]|~!")


def fenced(text: str) -> list[str]:
    r"""``text`` as a fenced code block: its fence longer than any run of backticks inside, so
    that no line of it closes the block (CommonMark shows what a fence holds as text, HTML
    included).

    >>> fenced("x\n```\ny")
    ['````', 'x', '```', 'y', '````']
    """
    text = plain_text(str(text))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *text.split("\n"), fence]


def page(name: str, data: dict, after_due_date: bool) -> str:
    # the total a student may see now: the visible tests' points before the due date, every
    # test's after it (hidden tests count then, unshown), whatever results.json's score held
    counted = [t for t in data["tests"] if after_due_date or t["visibility"] == "visible"]
    got, out_of = (plain_points(sum(t[k] for t in counted)) for k in ("score", "max_score"))
    lines = [f"# servelab feedback: {inline(name)}", "", f"**{got} / {out_of} points**", "",
             "| test | points | status |", "|---|---|---|"]
    shown = [t for t in data["tests"] if t["visibility"] in SHOWN[after_due_date]]
    lines += [f"| {inline(t['name'])} | {plain_points(t['score'])} / {plain_points(t['max_score'])} | {status_of(t)} |"
              for t in shown]
    for t in shown:
        if status_of(t) == "failed":
            lines += ["", f"## {inline(t['name'])}", "", *fenced(t["output"])]
    unseen = len(data["tests"]) - len(shown)
    if unseen:
        lines += ["", f"({unseen} more tests are shown after the due date.)"]
    return "\n".join(lines) + "\n"


def results_files(source: Path) -> dict[str, Path]:
    """Page name -> results file, for any RESULTS the module docstring lists."""
    source = Path(source)
    if source.is_dir() and (source / "results").is_dir():  # grade-all's --out folder
        found = {p.stem: p for p in sorted((source / "results").glob("*.json"))}
        if found:
            return found
    if source.is_dir() and (source / "results.json").is_file():  # the folder of one `grade --out`
        source = source / "results.json"
    if source.is_file() and source.suffix == ".json":
        name = source.parent.resolve().name if source.name == "results.json" else source.stem
        return {name or "results": source}
    raise FileNotFoundError(f"feedback RESULTS must be grade-all's --out folder (results/*.json), grade's "
                            f"results.json or the folder holding it; got {str(source)!r}")


def publish(gradebook: Path, out: Path, after_due_date: bool = False) -> list[Path]:
    """Writes ``out/<name>.md`` for each results file of ``gradebook`` (see
    :func:`results_files`); returns the pages, in name order."""
    written = []
    for name, path in results_files(gradebook).items():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            text = page(name, data, after_due_date)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{str(path)!r} is not a results.json written by the grader: {type(exc).__name__}: {exc}") from None
        written.append(write_text_atomic(Path(out) / f"{name}.md", text))
    print(f"wrote {len(written)} feedback pages to {out}")
    return written
