"""The trace pages in a real browser: headless Chromium (Debian's ``chromium``, installed by
``.ci/run``) loads each page from a file, runs its script without an error, and draws one step
element per simulated step and one timeline row per request; the default runs show batching,
queueing and preemption; the a8 failure page draws both runs with the differing step marked;
every axis's labels differ and every colour a chart draws with is in its legend.

Without Chromium these tests are skipped, unless ``SERVELAB_REQUIRE_BROWSER=1`` (``.ci/run``
sets it), where they fail. About 20 s on one core (three page loads, the default simulator
run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.trace.runs import ENGINE_DEFAULTS, SIM_DEFAULTS

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
if BROWSER is None:
    if os.environ.get("SERVELAB_REQUIRE_BROWSER") == "1":
        raise RuntimeError("SERVELAB_REQUIRE_BROWSER=1 but no chromium on PATH "
                           "(apt-get install chromium, as .ci/run does)")
    pytest.skip("no chromium on PATH (.ci/run installs it)", allow_module_level=True)


def dom(page: Path, tmp_path: Path) -> str:
    """The page's DOM after its script ran, as Chromium serialises it."""
    # every network request would fail (a proxy that is not there): the page must not need one
    proc = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                           "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                           "--dump-dom", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def drawn_without_error(text: str, runs: int) -> None:
    errors = re.search(r'<pre id="errors">(.*?)</pre>', text, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors and errors.group(1)
    assert f'data-rendered="{runs}"' in text


def sections(text: str) -> list[str]:
    return re.split(r'<section class="run"', text)[1:]


def count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


def rgb(colour: str) -> tuple[int, ...]:
    """``#4c78a8``, ``#ddd`` or ``rgb(76, 120, 168)`` as (r, g, b)."""
    colour = colour.strip().lower()
    if colour.startswith("rgb"):
        return tuple(int(v) for v in re.findall(r"\d+", colour)[:3])
    hexes = colour.lstrip("#")
    if len(hexes) == 3:
        hexes = "".join(c * 2 for c in hexes)
    return tuple(int(hexes[i:i + 2], 16) for i in (0, 2, 4))


# what each chart draws its data with: (its svg's class, the elements' pattern, the attribute)
DRAWN = {"timeline": [r'<rect [^>]*class="(?:seg [a-z]+|slo-miss)"[^>]*>'],
         "batches": [r'<g class="step[^"]*"[^>]*>(?:<rect [^>]*>)+'],
         "kv": [r"<polygon [^>]*>", r"<polyline [^>]*>", r'<rect [^>]*>'],
         "blocks": [r'<rect [^>]*class="block"[^>]*>']}


def colours_of(elements: str) -> set[tuple[int, ...]]:
    found = re.findall(r'\b(?:fill|stroke)="([^"]+)"', elements)
    return {rgb(c) for c in found if c not in ("none", "transparent")}


def axes_and_legends_agree(run: str) -> None:
    """Every axis's labels differ from one another, and every colour a chart draws its data
    with is one its legend shows."""
    for axis in re.findall(r'<g class="axis">(.*?)</g>', run, re.S):
        labels = re.findall(r'class="tick axis-label"[^>]*>([^<]*)<', axis)
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    for chart, patterns in DRAWN.items():
        legend = re.search(rf'<div class="legend" data-chart="{chart}">(.*?)</div>', run, re.S)
        assert legend is not None, f"no legend for the {chart} chart"
        shown = {rgb(c) for c in re.findall(r"background:\s*(#[0-9a-fA-F]+|rgb\([^)]*\))", legend.group(1))}
        drawing = re.search(rf'<svg [^>]*class="{chart}"[^>]*>(.*?)</svg>', run, re.S)
        assert drawing is not None, chart
        drawn = set().union(*(colours_of(" ".join(re.findall(p, drawing.group(1)))) for p in patterns))
        if chart == "batches":  # the differing step's red outline is the page's note, not data
            drawn.discard(rgb("#d62728"))
        assert drawn and drawn <= shown, (chart, sorted(drawn - shown))


@pytest.mark.parametrize("engine", [False, True])
def test_the_default_runs_render_with_every_step_and_request(tmp_path, capsys, engine):
    out = tmp_path / "t"
    assert main(["trace", *(["--engine"] if engine else []), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    steps = int(re.search(r"([\d,]+) steps", printed).group(1).replace(",", ""))
    assert int(re.search(r"largest batch (\d+)", printed).group(1)) > 1  # batching
    n = (ENGINE_DEFAULTS if engine else SIM_DEFAULTS)["n"]
    text = dom(out / "trace.html", tmp_path)
    drawn_without_error(text, 1)
    (run,) = sections(text)
    assert count(r'<g class="step[ "]', run) == steps
    assert count(r'<g class="req[ "]', run) == n
    assert count(r'class="seg decode"', run) >= n  # every request decoded
    assert count(r'class="preempt"', run) > 0  # at least one preemption drawn
    assert count(r'class="seg waiting"', run) > 0  # a queue
    batch = re.search(r'<table class="batch">(.*?)</table>', run, re.S).group(1)
    assert "<td>" in batch  # the step under the cursor shows its batch
    axes_and_legends_agree(run)
    if engine:
        assert count(r'<td class="text">"', run) == n  # each request's generated text


def test_the_failure_page_shows_both_runs_and_the_differing_step(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import test_trace_failure_page as failing
    finally:
        sys.path.remove(str(Path(__file__).parent))
    import scheduler_harness

    monkeypatch.setenv(scheduler_harness.TRACE_DIR_VARIABLE, str(tmp_path / "pages"))
    message = failing._failure()
    step = int(re.search(r"both runs up to step (\d+)", message).group(1))
    (page,) = (tmp_path / "pages").rglob("trace.html")
    text = dom(page, tmp_path)
    drawn_without_error(text, 2)
    runs = sections(text)
    assert len(runs) == 2
    for run in runs:
        assert count(r'<g class="step[ "]', run) == step + 1
        assert count(r'<g class="step differs"', run) == 1
        axes_and_legends_agree(run)  # a few steps: the step axis once repeated its labels
        assert count(r'<g class="req[ "]', run) == len(failing.REQUESTS)
    compare = text.split('<section class="run"')[0]
    assert count(r'<tr class="differs">', compare) == 1
    assert count(r'<span class="bad">', compare) == 1  # the entry your run lacks
