"""Every plot, checked the way a reader looks at it (tests/plot_checks.py): a title that states
facts computed from the data, axis labels with units, a legend holding every series, no
series hidden behind another, tick labels in plain decimals; no plot at all for no data."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from rich.console import Console

from plot_checks import hidden_pairs, legend_labels, problems, series, tick_texts, titles
from servelab import hw_model as hw
from servelab import plots
from servelab import sweep as sw
from servelab import tiny_llm
from servelab.demos import demo01, demo02, demo03

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch):
    """``{file name: Figure}`` of every plot saved while the test runs."""
    figs: dict[str, plt.Figure] = {}
    save = plots._save

    def record(fig, path):
        figs[Path(path).name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", record)
    return figs


def _all_titles(fig) -> str:
    return " ".join(" ".join(titles(fig)).split())  # titles wrap: compare words, not lines


def _series_labels(fig) -> list[str]:
    return [ln.get_label() for ax in fig.axes for ln in series(ax)]


def _assert_readable(fig, path: Path) -> None:
    assert problems(fig) == [], path.name
    assert path.read_bytes().startswith(PNG_MAGIC)
    ticks = tick_texts(fig)
    assert ticks, "no tick labels"
    # plain decimals: no mathtext powers (2x10^-1), no e-notation
    assert not [t for t in ticks if "$" in t or "\u00d7" in t or "10^" in t or "e+" in t or "e-" in t], ticks


# ---- the checker itself must be able to fail ------------------------------------------------

def test_the_checks_catch_an_unreadable_plot():
    fig, ax = plt.subplots()
    x = np.array([1.0, 2.0, 3.0])
    ax.plot(x, x, "o-", label="a")
    ax.plot(x, x, "o-", label="b")  # exactly on top of a, drawn alike
    ax.plot(x, 2 * x, "s--", label="c")
    ax.set_xlabel("rate")  # no unit
    ax.legend(handles=ax.get_lines()[:2])  # c has no legend entry
    found = problems(fig)
    plt.close(fig)
    assert "no title" in found
    assert any("x axis" in p for p in found) and any("y axis" in p for p in found)
    assert "series 'c' has no legend entry" in found
    assert "series 'a' and 'b': one hides the other" in found


def test_a_series_partly_on_another_is_not_hidden_if_it_looks_different():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 2, 3], marker="o", linestyle="-", label="a")
    ax.plot([1, 2], [1, 2], marker="s", linestyle="--", label="b")  # on a, but other marker and line
    ax.plot([2, 3], [2, 3], marker="o", linestyle="-", label="c")  # on a, drawn alike: hidden
    assert hidden_pairs(ax) == [("a", "c")]
    plt.close(fig)


# ---- each plot the demos and sweeps draw ----------------------------------------------------

def test_demo01_plot(tmp_path, drawn):
    cmp = demo01.part2(tiny_llm.TinyLLM(tiny_llm.TINY))
    path = demo01.make_plot(tmp_path, cmp)
    fig = drawn["demo01_tokens_processed.png"]
    _assert_readable(fig, path)
    assert sorted(_series_labels(fig)) == ["with cache", "without cache"]
    # the title's facts are the data's: 26,300 vs 231 tokens processed, 114x
    title = _all_titles(fig)
    assert f"{cmp.without_cache.tokens_processed:,}" in title and f"{cmp.with_cache.tokens_processed:,}" in title
    assert f"({cmp.token_ratio:.0f}x)" in title


def test_demo02_plots(tmp_path, drawn):
    console = Console(file=io.StringIO())
    points = demo02.part3_prefill(console)
    decode_points, decode_png = demo02.part4_decode(console, tmp_path)
    roof_png = plots.roofline(tmp_path / "demo02_roofline.png", [demo02.GPU, hw.A100_80GB], points + decode_points)
    roof, decode = drawn["demo02_roofline.png"], drawn["demo02_decode_batch.png"]
    _assert_readable(roof, roof_png)
    _assert_readable(decode, decode_png)
    assert {"H100-SXM roof (ridge 295 FLOP/byte)", "A100-80GB roof (ridge 153 FLOP/byte)"} <= legend_labels(roof)
    assert "decode B=1 runs at" in _all_titles(roof) and "below the ridge point (295)" in _all_titles(roof)
    cap = hw.max_batch(demo02.MODEL, demo02.GPU, 1024)
    assert f"B={cap}" in _all_titles(decode) and f"KV memory full: B = {cap}" in legend_labels(decode)


@pytest.fixture(scope="module")
def demo03_plots(tmp_path_factory):
    """Demo 03's data, its plot files and their figures (drawn once for the module: slow)."""
    sweep = demo03.compute_sweep()
    cont = demo03.compute_continuous(sweep)
    figs: dict[str, plt.Figure] = {}
    save = plots._save
    def record(fig, path):
        figs[Path(path).name] = fig
        return save(fig, path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_save", record)
        paths = demo03.make_plots(tmp_path_factory.mktemp("demo03"), sweep, cont)
    return sweep, cont, paths, figs


def test_demo03_plots_show_every_policy_and_continuous_batching_where_it_peaks(demo03_plots):
    sweep, cont, paths, drawn = demo03_plots
    assert [p.name for p in paths] == ["demo03_ttft_vs_rate.png", "demo03_goodput_vs_rate.png"]
    policies = ["batch 1", "static B=8", "static B=32", "static B=128", "continuous"]
    for path in paths:
        fig = drawn[path.name]
        _assert_readable(fig, path)
        for ax in fig.axes:  # both panels of both figures: every policy, each its own series
            assert [ln.get_label() for ln in series(ax)] == policies, path.name
            lines = {ln.get_label(): ln for ln in series(ax)}
            x = np.asarray(lines["continuous"].get_xdata())
            assert cont.max_goodput_rate in x and x.max() > cont.max_goodput_rate  # past its peak
            assert ax.get_xscale() == "log"
            # B=32 and B=128 share their low-rate points but are drawn differently
            b32, b128 = lines["static B=32"], lines["static B=128"]
            assert (b32.get_marker(), b32.get_linestyle()) != (b128.get_marker(), b128.get_linestyle())


def test_demo03_titles_state_what_the_data_says(demo03_plots):
    sweep, cont, _, drawn = demo03_plots
    good = _all_titles(drawn["demo03_goodput_vs_rate.png"])
    b1 = max(s.goodput_req_s for s in sweep.by_policy["batch 1"])
    b1_thr = max(s.throughput_req_s for s in sweep.by_policy["batch 1"])
    assert f"batch 1 {plots._num(b1)} req/s" in good  # goodput peak, about 0.21
    assert f"continuous {plots._num(cont.max_goodput)} req/s (rate {cont.max_goodput_rate:g})" in good
    assert f"batch 1 {plots._num(b1_thr)} req/s" in good  # batch 1's flat throughput, 0.623
    ttft = _all_titles(drawn["demo03_ttft_vs_rate.png"])
    assert "P99 TTFT within the 1 s SLO up to: continuous" in ttft and "at no rate: batch 1" in ttft
    assert "Llama-3-8B on H100-SXM, 600 chat requests" in ttft


def test_sweep_plots_take_their_titles_from_the_grid(tmp_path, drawn):
    grid = sw.Grid(policies=("batch1", "static"), rates=(0.1, 0.2, 0.4), batch_size=(32, 128), gpu="A100_80GB")
    res = sw.sweep(grid, n=40)
    paths = res.write_plots(tmp_path)
    assert [p.name for p in paths] == ["sweep_ttft_vs_rate.png", "sweep_goodput_vs_rate.png"]
    for path in paths:
        fig = drawn[path.name]
        _assert_readable(fig, path)
        assert "Sweep: Llama-3-8B on A100-80GB, 40 chat requests (seed 0) per point, 9 points" in _all_titles(fig)
        legend = " ".join(legend_labels(fig))
        for config in ("batch 1", "static B=32", "static B=128"):
            assert config in legend, (path.name, config)
    # B=32 and B=128 give identical rows at these rates: one series named after both, not two
    # lines of which one hides the other
    assert [r.ttft_p50_s for r in res.curves()["static B=32"]] == [r.ttft_p50_s for r in res.curves()["static B=128"]]
    assert "static B=32 = static B=128" in legend_labels(drawn["sweep_ttft_vs_rate.png"])


def test_sweep_rate_ticks_are_plain_decimals(tmp_path, drawn):
    res = sw.sweep(sw.Grid(policies=("batch1",), rates=(0.2, 0.3, 0.4)), n=30)
    res.write_plots(tmp_path)
    ticks = tick_texts(drawn["sweep_ttft_vs_rate.png"])
    assert {"0.2", "0.3", "0.4"} <= set(ticks)  # at the swept rates, in plain decimals


def test_titles_change_with_the_data(tmp_path, drawn):
    x = np.array([0.5, 1.0, 2.0])
    for k, p99 in enumerate(([0.2, 0.5, 3.0], [0.2, 0.5, 0.9])):
        curve = {"policy": (x, np.array(p99))}
        plots.ttft_vs_rate(tmp_path / f"t{k}.png", curve, curve, 1.0, "heading")
    assert "up to: policy 1 req/s" in _all_titles(drawn["t0.png"])
    assert "up to: policy 2 req/s" in _all_titles(drawn["t1.png"])


def test_no_plot_for_no_data(tmp_path, drawn):
    nan = {"a": (np.array([1.0, 2.0]), np.array([np.nan, np.nan]))}
    assert plots.ttft_vs_rate(tmp_path / "t.png", nan, nan, 1.0, "h") is None
    assert plots.goodput_vs_rate(tmp_path / "g.png", {}, {}, "h") is None
    assert plots.tokens_processed(tmp_path / "d.png", {}) is None
    assert list(tmp_path.iterdir()) == [] and drawn == {}


def test_a_series_without_data_is_left_out(tmp_path, drawn):
    x = np.array([1.0, 2.0])
    curves = {"some": (x, np.array([0.5, 2.0])), "none": (x, np.array([np.nan, np.nan]))}
    plots.ttft_vs_rate(tmp_path / "t.png", curves, curves, 1.0, "h")
    fig = drawn["t.png"]
    assert _series_labels(fig) == ["some", "some"] and problems(fig) == []


def test_speculative_plot(tmp_path, drawn):
    grid = np.linspace(0.0, 1.0, 11)
    predicted = {"tokens": {"k=2": (grid, 1 + grid + grid ** 2)},
                 "speedup": {"k=2": (grid, 0.7 * (1 + grid + grid ** 2))}}
    a = np.array([0.1, 0.5, 0.9])
    measured = {"tokens": {"k=2": (a, 1 + a + a ** 2)}, "speedup": {"k=2": (a, np.array([0.8, 1.2, 1.9]))}}
    path = plots.speculative_speedup(tmp_path / "spec.png", predicted, measured)
    fig = drawn["spec.png"]
    _assert_readable(fig, path)
    assert sorted(_series_labels(fig)) == ["k=2: closed form", "k=2: closed form", "k=2: measured", "k=2: measured"]
    assert "best measured: k=2, a = 0.90, 1.9x" in _all_titles(fig)
