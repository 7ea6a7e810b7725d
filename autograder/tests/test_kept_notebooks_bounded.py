"""The notebooks kept for the TAs: every output of every MIME type is capped before the grader
redacts it (a notebook that printed millions of lines under a made-up MIME type held the
grader's process for minutes), and nothing in them runs a script or loads a remote resource
when a TA opens them. The control: without the caps the flood and the script are kept."""

from __future__ import annotations

import json

import mistune

from autograder.notebooks import kept

PRIVATE = {"assert secret_answer == 42"}
FLOOD = "\n" * 5_000_000


def autograded() -> bytes:
    outputs = [
        {"output_type": "display_data", "metadata": {}, "data": {"application/x-flood": FLOOD}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": "<script>alert(1)</script><img src='http://evil.example/x.png'>",
                  "image/svg+xml": "<svg onload='alert(1)'/>"}},
        {"output_type": "execute_result", "metadata": {}, "execution_count": 1,
         "data": {"text/plain": "x" * 300_000 + "\nassert secret_answer == 42\n"}},
        *({"output_type": "stream", "name": "stdout", "text": "y" * 30_000} for _ in range(100)),
    ]
    cells = [{"cell_type": "code", "metadata": {}, "source": "flood()", "outputs": outputs, "execution_count": 1},
             {"cell_type": "markdown", "metadata": {"nbgrader": {"solution": True, "grade": True, "grade_id": "q",
                                                                  "points": 1}},
              "source": "My answer <img src=http://evil.example/p.png> ![x](http://evil.example/y.png) <!-- hide"}]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def html_of(nb: dict) -> str:
    """What a TA's browser would get: each output's HTML-like data and each Markdown cell, as HTML."""
    render = mistune.create_markdown(escape=False)
    parts = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            parts.append(str(render(cell["source"])))
        for out in cell.get("outputs", []):
            parts += [str(v) for mime, v in out.get("data", {}).items() if mime != "text/plain"]
    return "\n".join(parts)


def test_a_kept_notebook_is_bounded_and_holds_no_script_or_remote_resource():
    data = kept.kept_copy(autograded(), PRIVATE)
    nb = json.loads(data)
    assert len(data) < 2 * kept.MAX_KEPT_CHARS  # the flood and the long outputs were cut or dropped
    html = html_of(nb)
    assert "<script" not in html and "<img" not in html and "<svg" not in html and "<!--" not in html
    text = json.dumps(nb)
    assert "assert secret_answer == 42" not in text
    assert kept.DROPPED in text and "application/x-flood" in text  # the TA is told what went


def test_control_without_the_caps_the_flood_and_the_script_are_kept(monkeypatch):
    monkeypatch.setattr(kept, "MAX_OUTPUT_CHARS", 1 << 40)
    monkeypatch.setattr(kept, "MAX_KEPT_CHARS", 1 << 40)
    monkeypatch.setattr(kept, "MAX_PICTURE_CHARS", 1 << 40)
    monkeypatch.setattr(kept, "KEPT_MIME", ("text/plain", "text/html", "application/x-flood", "image/svg+xml"))
    monkeypatch.setattr(kept, "_plain_markdown", lambda source: source)
    data = kept.kept_copy(autograded(), PRIVATE)
    assert len(data) > 5_000_000
    assert "<script" in html_of(json.loads(data))
