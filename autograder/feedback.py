"""``feedback GRADEBOOK_DIR --out FOLDER``: one Markdown page per student from grade-all's
results, showing what Gradescope would show: visible tests always, ``after_due_date`` tests only
with ``--after-due-date``, ``hidden`` tests never (their points still count in the total)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SHOWN = {False: {"visible"}, True: {"visible", "after_due_date", "after_published"}}


def page(name: str, data: dict, after_due_date: bool) -> str:
    lines = [f"# servelab feedback: {name}", "", f"**{data['score']} / {data['max_score']} points**", "",
             "| test | points | status |", "|---|---|---|"]
    shown = [t for t in data["tests"] if t["visibility"] in SHOWN[after_due_date]]
    lines += [f"| {t['name']} | {t['score']} / {t['max_score']} | {t['status']} |" for t in shown]
    for t in shown:
        if t["status"] != "passed":
            lines += ["", f"## {t['name']}", "", "```", t["output"], "```"]
    unseen = len(data["tests"]) - len(shown)
    if unseen:
        lines += ["", f"({unseen} more tests are shown after the due date.)"]
    return "\n".join(lines) + "\n"


def publish(gradebook: Path, out: Path, after_due_date: bool = False) -> list[Path]:
    results = sorted((Path(gradebook) / "results").glob("*.json"))
    if not results:
        raise FileNotFoundError(f"feedback GRADEBOOK_DIR must hold grade-all's results/*.json, got {str(gradebook)!r}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in results:
        dst = out / f"{path.stem}.md"
        fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=out)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page(path.stem, json.loads(path.read_text(encoding="utf-8")), after_due_date))
        os.replace(tmp, dst)
        written.append(dst)
    print(f"wrote {len(written)} feedback pages to {out}")
    return written
