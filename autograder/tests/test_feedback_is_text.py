"""Feedback is text: a submission's messages carry terminal escapes, bidi overrides, zero-width
characters, a line that closes the code fence, raw HTML (an image, a link, an unclosed comment)
and a fake score. None of it reaches results.json or the feedback page as anything but text: the
page, rendered as Markdown, has no image, link, comment or heading the student wrote, and the
only score on it is the grader's. The control: with the escaping off, the same page lies."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import mistune
import pytest

from autograder.grading import feedback, results
from autograder.grading.grade import grade
from autograder.sandbox.remote import Limits

PAYLOAD = ("\x1b[2J\x1b[1;32mall tests passed\x1b[0m\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"
           " \u202eexe.txt\u202c \u200bzero\u200dwidth\ufeff\r overwritten\n"
           "```\n"
           "# all tests passed\n\n**154 / 154 points**\n\n"
           "<img src=\"http://evil.example/pixel.png\"> [your grade](http://evil.example/login) "
           "www.evil.example <script>alert(1)</script>\n"
           "<!-- the rest of the page is hidden")
LEDGER = f'''
PAYLOAD = {PAYLOAD!r}


def _lie(*args, **kwargs):
    raise ValueError(PAYLOAD)


param_count = weight_bytes = kv_bytes_per_token = kv_capacity_tokens = max_batch = fits = _lie
'''
INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def invisible(text: str) -> list[str]:
    return sorted({f"U+{ord(ch):04X}" for ch in text if ch not in "\n\t" and unicodedata.category(ch) in INVISIBLE})


def rendered(markdown: str) -> str:
    # raw HTML passed through, as a page viewer that trusts Markdown shows it (GitHub keeps <img>)
    return str(mistune.create_markdown(escape=False, plugins=["table", "strikethrough", "url"])(markdown))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """The payload graded on a1 (every test raises it): results.json as written."""
    sub = tmp_path_factory.mktemp("payload")
    (sub / "assignments" / "a1_ledger").mkdir(parents=True)
    (sub / "assignments" / "a1_ledger" / "ledger.py").write_text(LEDGER, encoding="utf-8")
    out = sub.parent / "results.json"
    # generous limits: on a busy machine a test run out of time would show the limit's words, not the payload
    grade(sub, out=out, limits=Limits(wall_s=60.0, cpu_s=60), only_tasks=frozenset({"a1_ledger"}))
    return json.loads(out.read_text(encoding="utf-8"))


def test_the_payload_reaches_the_messages_as_text(graded):
    outputs = [t["output"] for t in graded["tests"] if t["output"] and "raised ValueError" in t["output"] or "evil" in t["output"]]
    assert outputs, [t["output"][:200] for t in graded["tests"]][:3]  # the test reaches the message it is about
    assert "\\x1b" in outputs[0] and "\\u202e" in outputs[0]  # shown as escapes, not lost
    assert invisible(json.dumps(graded, ensure_ascii=False)) == []


def page_of(data: dict) -> str:
    return feedback.page("ada <img src=x>", data, after_due_date=False)


def test_the_feedback_page_renders_only_the_graders_words(graded):
    page = page_of(graded)
    html = rendered(page)
    assert invisible(page) == []
    assert "<img" not in html and "<script" not in html and "<!--" not in html
    assert "href=" not in html  # no link, the student's or an autolink
    assert html.count("<h1") == 1 and "all tests passed</h" not in html
    assert html.count("points</strong>") == 1 and "154 / 154 points" not in html.replace("<p>", "").split("</h1>")[1].split("<table>")[0]
    # every failed test's message stayed inside its code block: the headings are the grader's
    failed = [t for t in graded["tests"] if t.get("status") == "failed" and t["visibility"] == "visible"]
    assert html.count("<h2") == len(failed) and html.count("<pre>") == len(failed)


def test_control_without_the_escaping_the_page_lies(graded, monkeypatch):
    """The same results with the messages as the submission wrote them, and the page's escaping
    off: an image, a link and a comment of the student's render."""
    raw = json.loads(json.dumps(graded))
    for t in raw["tests"]:
        t["output"] = t["output"].replace("\\x1b", "\x1b").replace("\\u202e", "\u202e")
    monkeypatch.setattr(feedback, "inline", lambda text: str(text))
    monkeypatch.setattr(feedback, "fenced", lambda text: ["```", str(text), "```"])
    html = rendered(page_of(raw))
    assert "<img" in html or "<!--" in html
    assert invisible(page_of(raw)) != []


def test_safe_text_escapes_what_is_not_plain_text():
    got = results.safe_text(PAYLOAD)
    assert invisible(got) == [] and "\\u202e" in got and "\\x1b" in got and "\\r" in got
