"""``servelab demo validation``: its parts, the peers' table beside ours, and its two plots."""

from __future__ import annotations

import io
import re

from rich.console import Console

from servelab.demos import demo_validation


def test_demo_validation_prints_its_parts_and_plots(tmp_path):
    buf = io.StringIO()
    demo_validation.run(tmp_path, Console(file=buf, width=220))
    text = buf.getvalue()
    heads = re.findall(r"^\s*(\d)\. ", text, flags=re.M)
    assert heads == ["1", "2", "3", "4", "5"]
    for name, *_ in demo_validation.PEERS:
        assert name in text
    assert "servelab, paper GPU" in text and "servelab, fitted" in text
    assert "held out" in text and "overloaded" in text
    for key in ("paper", "fitted"):
        assert (tmp_path / f"demo_validation_{key}.png").stat().st_size > 10_000
