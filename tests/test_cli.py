"""``servelab``'s command line: each case that used to crash or
mislead now stops before any work with one line naming the flag and exit status 2; tables fit
the terminal or print in full when piped; long steps say what they are doing."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from rich.console import Console as RichConsole
from rich.table import Table

import servelab
from servelab import cli
from servelab import sweep as sw
from servelab.demos import available, demo03, load


def run(argv, capsys):
    """(exit status, stdout, stderr) of ``servelab argv`` run in this process."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # --help and --version: argparse's exit
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


def test_version(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"servelab {servelab.__version__}"


@pytest.mark.parametrize("command", [["demo", "01"], ["sweep", "--n", "20"]])
def test_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, command):
    existing = tmp_path / "a_file"
    existing.write_text("keep me")
    code, out, err = run([*command, "--out", str(existing)], capsys)
    assert code == 2 and out == ""  # nothing ran, nothing printed
    line = one_line_error(err)
    assert re.fullmatch(rf"servelab {command[0]}: error: --out '{re.escape(str(existing))}' exists and is not "
                        "a folder", line), line
    assert existing.read_text() == "keep me"


def test_out_under_a_file_is_refused(capsys):
    code, out, err = run(["sweep", "--out", "/dev/null/x"], capsys)
    assert code == 2 and out == ""
    assert one_line_error(err) == "servelab sweep: error: --out '/dev/null/x': '/dev/null' is not a folder"


def test_no_traceback_from_the_real_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "servelab", "sweep", "--out", "/dev/null/x"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line_error(proc.stderr).endswith("'/dev/null' is not a folder")


def test_n_0_is_refused_and_writes_nothing(tmp_path, capsys):
    code, out, err = run(["sweep", "--n", "0", "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and out == ""
    assert one_line_error(err).startswith("servelab sweep: error: argument --n: must be a positive integer, got '0'")
    assert not (tmp_path / "s").exists()


def test_a_huge_rate_range_is_refused_at_once_with_its_count(tmp_path):
    # in a child with a timeout: the old code built a billion-element list and never returned
    proc = subprocess.run([sys.executable, "-m", "servelab", "sweep", "--rates", "0.001:1e6:0.001",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line_error(proc.stderr) == ("servelab sweep: error: --rates 0.001:1e6:0.001 make 1,000,000,000 "
                                           f"rates, more than the limit of {sw.MAX_POINTS:,}")


def test_a_grid_too_big_is_refused_with_its_count(tmp_path, capsys):
    sizes = [str(b) for b in range(1, 41)]
    code, _, err = run(["sweep", "--policy", "static", "--batch-size", *sizes, "--max-wait", "0", "0.1", "0.2",
                        "--rates", "0.01:1:0.01", "--out", str(tmp_path)], capsys)
    assert code == 2
    assert one_line_error(err).startswith("servelab sweep: error: the grid has 12,000 points (100 rates x 120 "
                                          "configurations), more than 10,000")


@pytest.mark.parametrize("flags, message", [
    (["--slo-ttft", "-1"], "argument --slo-ttft: must be a number of seconds > 0 (or inf), got '-1'"),
    (["--slo-tpot", "nan"], "argument --slo-tpot: must be a number of seconds > 0 (or inf), got 'nan'"),
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got '0'"),
    (["--max-wait", "-0.1"], "argument --max-wait: must be a number of seconds >= 0, got '-0.1'"),
    (["--jobs", "0"], "argument --jobs: must be a positive integer, got '0'"),
    (["--seed", "x"], "argument --seed: must be a non-negative integer, got 'x'"),
    (["--policy", "early_reject", "--estimator", "median"],
     "argument --estimator: estimator must be 'mean', 'oracle' or 'sigma=<number>', got 'median'"),
    (["--policy", "batch1", "--max-num-seqs", "8"],
     "--max-num-seqs applies to --policy continuous, which is not among --policy batch1"),
    (["--policy", "prefix", "--shared-fraction", "1.5"], "argument --shared-fraction: must be a number in [0, 1], got '1.5'"),
    (["--policy", "continuous", "--prefix-caching", "yes"],
     "--prefix-caching applies to --policy prefix, which is not among --policy continuous"),
    (["--rates", "0"], "--rates must be > 0 (requests/s), got '0'"),
    (["--rates", "1:0.5:0.1"], "--rates must be numbers or start:stop:step with step > 0 and stop >= start"),
    (["--model", "gpt-5"], "--model must be a preset (LLAMA3_8B, LLAMA3_70B, LLAMA2_7B, LLAMA2_13B, LLAMA2_70B, LLAMA32_1B) or a .toml/.json spec file, "
                           "got 'gpt-5'"),
    (["--gpu", "B200"], "--gpu must be a preset (H100, H200, A100_80GB, H100_FP8, H200_FP8) or a .toml/.json spec file, got 'B200'"),
    (["--model", "LLAMA3_70B"], "--model Llama-3-70B does not fit --gpu H100-SXM"),
    (["--policy", "fifo"], "argument --policy: invalid choice: 'fifo'"),
])
def test_each_bad_flag_is_one_line_naming_it(tmp_path, capsys, flags, message):
    code, out, err = run(["sweep", *flags, "--out", str(tmp_path)], capsys)
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert line.startswith(f"servelab sweep: error: {message}"), line
    assert list(tmp_path.iterdir()) == []


def test_demo_name_errors_name_the_argument(capsys):
    code, _, err = run(["demo", "99"], capsys)
    assert code == 2
    assert one_line_error(err) == ("servelab demo: error: argument name: demo must be one of "
                                   f"{', '.join(available())} or 'all', got '99'")


def test_piped_sweep_prints_full_plain_tables_and_progress_lines(tmp_path, capsys):
    code, out, err = run(["sweep", "--policy", "batch1", "early_reject", "--estimator", "sigma=0.5",
                          "--rates", "0.2", "0.4", "--n", "30", "--out", str(tmp_path)], capsys)
    assert code == 0 and err == ""
    assert out.startswith("simulating 4 points x 30 requests on 1 job(s)...\n")
    assert "drawing the plots..." in out
    assert "\x1b[" not in out and "\u2026" not in out  # no colour codes, nothing cut short
    header = next(line for line in out.splitlines() if "policy" in line)
    for column in ("policy", "rate", "attain", "goodput", "tok/s", "TTFT P50 s", "TTFT P99 s", "util", "rejected"):
        assert column in header
    assert "batch 1, early reject (sigma=0.5)" in out  # the long label whole, on one line
    assert all(ord(c) < 128 for c in out.split("wrote")[0]), "plain ASCII table"


def _wide_table() -> Table:
    t = Table(title="a wide table")
    for name in ("configuration name", "cached after prefill", "continuous batching seats", "x", "y", "z"):
        t.add_column(name, no_wrap=True)
    t.add_row("static B=128 no ride", "1,234,567", "256 of 256 in use", "1", "2", "3")
    return t


def test_terminal_tables_wrap_then_drop_columns_with_a_note():
    for width, dropped in ((200, None), (60, None), (40, "(4 column(s) left out to fit 40 columns: continuous batching seats, x, y, z;")):
        buf = io.StringIO()
        console = cli.Console(file=buf, width=width, force_terminal=True, color_system=None)
        console.print(_wide_table())
        text = buf.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width, width
        assert "\u2026" not in text, width  # no cell cut to "cached aft…"
        words = text.split()
        assert "1,234,567" in words and "B=128" in words
        if dropped:
            assert dropped in " ".join(words)
        else:
            assert "left out" not in text and {"x", "y", "z"} <= set(words)


def test_a_plain_rich_console_cuts_the_same_table():
    # the failure the fitting console exists for: rich alone truncates cells to fit
    buf = io.StringIO()
    RichConsole(file=buf, width=60, force_terminal=True, color_system=None).print(_wide_table())
    assert "\u2026" in buf.getvalue()


def test_piped_tables_are_never_cut():
    buf = io.StringIO()
    cli.Console(file=buf, width=40).print(_wide_table())
    text = buf.getvalue()
    assert "continuous batching seats" in text and "static B=128 no ride" in text and "\u2026" not in text
    assert max(len(line) for line in text.splitlines()) > 40


def test_demo_titles_are_alike():
    for name in available():
        assert re.fullmatch(rf"Demo {name}: \S.*", load(name).TITLE), load(name).TITLE


def test_demo03_numbers_its_sections_once():
    buf = io.StringIO()
    demo03.part5_trace(RichConsole(file=buf, width=200))
    heads = re.findall(r"^(\d+[a-z]?)\. ", buf.getvalue(), flags=re.M)
    assert heads == ["5a", "5b"]


def test_piped_headings_are_plain():
    buf = io.StringIO()
    cli.Console(file=buf).rule("[bold]Demo 09: a title")
    assert buf.getvalue() == "==== Demo 09: a title ====\n"
