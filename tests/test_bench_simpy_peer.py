"""The SimPy peer of ``make bench``: without SimPy the benchmark prints a note and goes on."""

import sys

from rich.console import Console

from benchmarks import bench_sim, simpy_batch1
from servelab.workload import chat_requests


def test_without_simpy_the_peer_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "simpy", None)  # makes `import simpy` raise ImportError
    assert not simpy_batch1.available()
    console = Console(record=True, width=200)
    bench_sim._simpy_peer(console, chat_requests(5, 1.0, 0))
    assert "SimPy is not installed: the SimPy peer is skipped" in console.export_text()
