"""``servelab demo 02`` prints all six parts and writes its two plots."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servelab import cli
from servelab.demos import demo02

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_demo02_prints_every_part_and_writes_plots(tmp_path, capsys):
    assert cli.main(["demo", "02", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for part in ("1. GPUs", "2. Model ledger", "3. Prefill", "4. Decode step", "5. Decode at the largest",
                 "6. This CPU"):
        assert part in out, part
    # the 20-40 s CPU measurement says so before it starts (a plain line: the output is captured)
    assert out.index("measuring (T x 4096) @ (4096 x 4096) matmuls on this CPU") < out.index("6. This CPU")
    for number in ("426,784", "416", "6.15", "9.31", "70%", "1/64", "21.2"):
        assert number in out, number
    for name in ("demo02_roofline.png", "demo02_decode_batch.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    assert not list(tmp_path.glob("*.tmp")), "a half-written plot was left behind"


def test_batch_512_is_flagged_as_not_fitting(tmp_path, capsys):
    from rich.console import Console
    demo02.part4_decode(Console(width=200), tmp_path)
    out = capsys.readouterr().out
    assert "no (max 416)" in out


def test_unknown_demo_is_a_clear_error(capsys):
    assert cli.main(["demo", "99"]) == 2
    assert "demo must be one of" in capsys.readouterr().err


def test_demo_list_names_demo02(capsys):
    assert cli.main(["demo", "list"]) == 0
    assert "02" in capsys.readouterr().out


def test_console_script_entry_point(tmp_path):
    run = subprocess.run([sys.executable, "-m", "servelab", "demo", "list"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and "02" in run.stdout


@pytest.mark.parametrize("argv", [["demo"], ["nonsense"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "--help" in err
