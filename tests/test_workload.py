"""servelab.workload: validation, generators, traces."""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import workload as wl
from servelab.workload import Requests

MAX = wl.MAX_REQUEST_TOKENS


# ---- Requests validation ------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (([0.0, -1.0], [1, 1], [1, 1]), r"^arrival_s\[1\] must be a finite number >= 0, got -1.0$"),
    (([math.nan], [1], [1]), r"^arrival_s\[0\] must be a finite number >= 0, got nan$"),
    (([math.inf], [1], [1]), r"^arrival_s\[0\] must be a finite number >= 0, got inf$"),
    (([2.0, 1.0], [1, 1], [1, 1]), r"^arrival_s must be sorted, got arrival_s\[1\]=1.0 after arrival_s\[0\]=2.0$"),
    (([0.0], [0], [1]), rf"^prompt_len\[0\] must be an integer in \[1, {MAX}\], got 0$"),
    (([0.0, 0.0], [3, 3], [2, -5]), rf"^output_len\[1\] must be an integer in \[1, {MAX}\], got -5$"),
    (([0.0], [1.5], [1]), r"^prompt_len\[0\] must be an integer .* got 1.5$"),
    (([0.0], [math.nan], [1]), r"^prompt_len\[0\] must be an integer .* got nan$"),
    (([0.0], [1], [MAX + 1]), rf"^output_len\[0\] must be an integer in \[1, {MAX}\], got {MAX + 1}$"),
    (([0.0], [1], [2**70]), rf"^output_len\[0\] must be an integer in \[1, {MAX}\], got {2**70}$"),
    (([0.0], [1], [True]), r"^output_len must hold integers, got dtype bool$"),
    (([0.0], [1], ["3"]), r"^output_len must hold integers"),
    (([0.0, 1.0], [1], [1]), r"^arrival_s, prompt_len and output_len must have the same length, got 2, 1 and 1$"),
    (([[0.0]], [1], [1]), r"^arrival_s must be one-dimensional"),
    ((["a"], [1], [1]), r"^arrival_s must hold numbers"),
])
def test_bad_requests_name_the_value(args, message):
    with pytest.raises(ValueError, match=message):
        Requests(*args)


def test_columns_are_read_only_copies_of_the_right_dtype():
    a = np.array([0.0, 1.0])
    r = Requests(a, np.array([3.0, 4.0]), [1, 2])
    a[0] = 5.0
    assert r.arrival_s[0] == 0.0  # a copy
    assert r.prompt_len.dtype == np.int64 and r.prompt_len.tolist() == [3, 4]
    with pytest.raises(ValueError):
        r.output_len[0] = 7
    assert len(Requests([], [], [])) == 0


def test_slicing_and_speed_up():
    r = Requests([0.0, 1.0, 4.0], [1, 2, 3], [4, 5, 6])
    assert r[1:].arrival_s.tolist() == [1.0, 4.0]
    assert r.speed_up(2.0).arrival_s.tolist() == [0.0, 0.5, 2.0]
    with pytest.raises(ValueError, match="contiguous slice"):
        r[::2]
    with pytest.raises(ValueError, match="factor must be a positive finite number, got 0"):
        r.speed_up(0)


def test_rust_agrees_with_python_validation():
    """The simulator's own checks (for callers that bypass Requests) use the same messages."""
    from servelab import _core
    from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
    for a, p, o in [([0.0, -1.0], [1, 1], [1, 1]), ([2.0, 1.0], [1, 1], [1, 1]), ([0.0], [0], [1])]:
        with pytest.raises(ValueError) as py_err:
            Requests(a, p, o)
        with pytest.raises(ValueError) as rust_err:
            unchecked = SimpleNamespace(arrival_s=np.array(a, dtype=np.float64), prompt_len=np.array(p, dtype=np.int64),
                                        output_len=np.array(o, dtype=np.int64))
            _core.sim_batch1((LLAMA3_8B, H100, DEFAULT_EFFICIENCY), unchecked, False)
        assert str(py_err.value) == str(rust_err.value)


# ---- generators ---------------------------------------------------------------------------------

def test_poisson_is_seeded_and_scales_with_rate():
    a = wl.poisson_arrivals(1000, rate=2.0, seed=7)
    assert np.array_equal(a, wl.poisson_arrivals(1000, rate=2.0, seed=7))
    assert np.allclose(wl.poisson_arrivals(1000, rate=4.0, seed=7), a / 2, rtol=1e-15)
    assert not np.array_equal(a, wl.poisson_arrivals(1000, rate=2.0, seed=8))
    gaps = np.diff(np.concatenate([[0.0], wl.poisson_arrivals(100_000, rate=2.0, seed=1)]))
    assert abs(gaps.mean() - 0.5) < 0.01 and abs(gaps.std() - 0.5) < 0.01  # exponential: mean = sd
    assert (gaps > 0).all()


@given(rate=st.floats(0.01, 1000), n=st.integers(0, 50), seed=st.integers(0, 2**32))
def test_poisson_arrivals_are_valid_requests(rate, n, seed):
    a = wl.poisson_arrivals(n, rate, seed)
    Requests(a, np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64))


@pytest.mark.parametrize("call, message", [
    (lambda: wl.poisson_arrivals(10, rate=0), "rate must be a positive finite number, got 0"),
    (lambda: wl.poisson_arrivals(10, rate=math.nan), "rate must be a positive finite number, got nan"),
    (lambda: wl.poisson_arrivals(-1, rate=1), "n must be a non-negative integer, got -1"),
    (lambda: wl.lognormal_lengths(5, mean=-3, sigma=1), "mean must be a positive finite number, got -3"),
    (lambda: wl.lognormal_lengths(5, mean=3, sigma=-1), "sigma must be a finite number >= 0, got -1"),
    (lambda: wl.lognormal_lengths(5, mean=3, sigma=1, max_len=0), r"max_len must be an integer in \[1, "),
    (lambda: wl.piecewise_poisson_arrivals([0, 1], [1, 2]), "breaks_s must have one more entry than rates"),
    (lambda: wl.piecewise_poisson_arrivals([0, 2, 1], [1, 2]), "breaks_s must be finite, >= 0 and strictly"),
    (lambda: wl.piecewise_poisson_arrivals([0, 1], [-1]), r"rates must be finite and >= 0, got \[-1.0\]"),
    (lambda: wl.chat_requests(n=5, rate=-1.0), "rate must be a positive finite number, got -1.0"),
])
def test_bad_generator_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_lognormal_mean_sigma_and_cap():
    x = wl.lognormal_lengths(200_000, mean=512, sigma=0.8, seed=2)
    assert abs(x.mean() / 512 - 1) < 0.01
    assert abs(np.log(x).std() - 0.8) < 0.01
    assert wl.lognormal_lengths(3, mean=7.4, sigma=0).tolist() == [7, 7, 7]
    capped = wl.lognormal_lengths(10_000, mean=256, sigma=2.0, seed=0, max_len=300)
    assert capped.max() == 300 and capped.min() >= 1


def test_bursts_follow_the_piecewise_rate():
    # demo 04's CNN-era load: 60 req/s, 200 req/s during seconds 10-12
    t = wl.piecewise_poisson_arrivals([0, 10, 12, 30], [60, 200, 60], seed=3)
    assert (np.diff(t) >= 0).all() and t[0] >= 0 and t[-1] < 30
    counts = [((t >= lo) & (t < hi)).sum() for lo, hi in [(0, 10), (10, 12), (12, 30)]]
    expected = [600, 400, 1080]
    for c, e in zip(counts, expected):
        assert abs(c - e) < 4 * math.sqrt(e), (counts, expected)
    quiet = wl.piecewise_poisson_arrivals([0, 5, 6, 9], [0, 50, 0], seed=1)
    assert quiet.min() >= 5 and quiet.max() < 6
    assert np.array_equal(quiet, wl.piecewise_poisson_arrivals([0, 5, 6, 9], [0, 50, 0], seed=1))
    assert len(wl.piecewise_poisson_arrivals([0, 1], [0.0])) == 0


def test_chat_workload_uses_common_random_numbers():
    a = wl.chat_requests(n=300, rate=0.5, seed=4)
    b = wl.chat_requests(n=300, rate=2.0, seed=4)
    assert np.array_equal(a.prompt_len, b.prompt_len) and np.array_equal(a.output_len, b.output_len)
    assert np.allclose(a.arrival_s, 4 * b.arrival_s, rtol=1e-15)
    c = wl.chat_requests(n=300, rate=0.5, seed=5)
    assert not np.array_equal(a.output_len, c.output_len)
    assert a.prompt_len.max() <= wl.CHAT_MAX_LEN


# ---- traces -------------------------------------------------------------------------------------

def test_shipped_azure_traces_are_the_upstream_bytes():
    """The README in the data folder records upstream's SHA-256; the package must ship those bytes
    (CRLF and all: .gitattributes keeps git from touching them)."""
    folder = resources.files("servelab") / "data" / "azure_llm_2023"
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "Splitwise" in readme
    for name in wl.AZURE_TRACES.values():
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in readme


@pytest.mark.parametrize("kind, rows, prompt_mean, output_mean, span_min", [
    ("conv", 19366, 1154.7, 211.1, 58 + 21.7 / 60),
    ("code", 8819, 2047.8, 27.9, 57 + 15.9 / 60),
])
def test_azure_traces_load_with_the_readme_statistics(kind, rows, prompt_mean, output_mean, span_min):
    r = wl.azure_trace(kind)
    assert len(r) == rows
    assert r.arrival_s[0] == 0.0
    assert round(float(r.prompt_len.mean()), 1) == prompt_mean
    assert round(float(r.output_len.mean()), 1) == output_mean
    assert abs(r.arrival_s[-1] / 60 - span_min) < 0.01
    assert len(wl.azure_trace(kind, limit=10)) == 10


def test_timestamps_keep_100ns_precision():
    r = wl.azure_trace("conv", limit=2)
    # rows 1-2 of the conv trace: 18:15:46.6805900 and the next one, exactly
    from servelab.workload import _timestamp_ticks
    assert _timestamp_ticks("2023-11-16 18:15:46.6805900") - _timestamp_ticks("2023-11-16 18:15:46.0") == 6805900
    assert r.arrival_s[1] > 0


def test_bad_kind():
    with pytest.raises(ValueError, match=r"kind must be 'code' or 'conv', got 'chat'"):
        wl.azure_trace("chat")


def _write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_bytes(text.encode())
    return p


def test_trace_csv_with_seconds_and_synonyms(tmp_path):
    p = _write(tmp_path, "arrival_s,prompt_tokens,output_tokens\r\n5.0,10,3\r\n5.5,20,1\r\n7,1,9")
    r = wl.load_trace_csv(p)
    assert r.arrival_s.tolist() == [0.0, 0.5, 2.0]
    assert r.prompt_len.tolist() == [10, 20, 1] and r.output_len.tolist() == [3, 1, 9]
    assert wl.load_trace_csv(p, start_at_zero=False).arrival_s.tolist() == [5.0, 5.5, 7.0]


@pytest.mark.parametrize("text, message", [
    ("", "is empty"),
    ("when,prompt_len,output_len\n0,1,1\n", "has no arrival time column"),
    ("arrival_s,prompt_len,output_len\n0,1,x\n", r"line 2: output length must be an integer, got 'x'"),
    ("arrival_s,prompt_len,output_len\n0,1,1\nsoon,1,1\n", r"line 3: arrival time must be seconds or a timestamp"),
    ("arrival_s,prompt_len,output_len\n0,1\n", r"line 2: expected 3 columns"),
    ("arrival_s,prompt_len,output_len\n1,1,1\n0,1,1\n", r"line 3: rows must be sorted by arrival time, got 0.0 after 1.0"),
    ("arrival_s,prompt_len,output_len\n0,0,1\n", r"prompt_len\[0\] must be an integer in \[1, "),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,-2\n", r"output_len\[0\] must be an integer"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,2\n4.0,1,1\n", "mix seconds and timestamps"),
])
def test_bad_trace_files_name_the_problem(tmp_path, text, message):
    p = _write(tmp_path, text)
    with pytest.raises(ValueError, match=message):
        wl.load_trace_csv(p)
