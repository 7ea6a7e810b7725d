"""grade-all's similarity report (autograder/grading/similarity.py): a class of four a1 submissions,
one of them a copy of another with every name changed, and two written independently. Exactly
the planted pair is listed; no honest file is listed against a classmate, the reference or the
library. No grading, copydetect alone: about 5 s (most of it pygments reading the library, once)."""

from __future__ import annotations

import csv
import re
import textwrap
import zipfile
from pathlib import Path

import pytest

from autograder.grading.grade import ROOT, manifest_of
from autograder.grading.similarity import THRESHOLD, find_pairs, write_report

pytest.importorskip("copydetect", reason="the grader's extra (pyproject.toml: notebooks) brings copydetect")

HEAD = '''"""Assignment 1: the model ledger."""

from __future__ import annotations

import math
'''

# alice: helpers for each part, an explicit loop over the attention matrices
ALICE = HEAD + textwrap.dedent('''

    def _attention_weights(model):
        widths = [model.n_heads, model.n_kv_heads, model.n_kv_heads, model.n_heads]
        total = 0
        for heads in widths:
            total += model.d_model * heads * model.d_head
        return total


    def _layer(model):
        swiglu = 3 * model.d_ff * model.d_model
        norms = 2 * model.d_model
        return _attention_weights(model) + swiglu + norms


    def param_count(model) -> int:
        table = model.vocab_size * model.d_model
        head = table if not model.tie_embeddings else 0
        return model.n_layers * _layer(model) + table + head + model.d_model


    def weight_bytes(model) -> float:
        return model.bytes_per_param * param_count(model)


    def kv_bytes_per_token(model) -> float:
        per_layer = model.n_kv_heads * model.d_head * 2
        return per_layer * model.n_layers * model.bytes_per_param


    def kv_capacity_tokens(model, gpu, mem_util: float = 0.9) -> int:
        budget = mem_util * gpu.memory_bytes
        left = budget - weight_bytes(model)
        if left < 0:
            return 0
        return int(left // kv_bytes_per_token(model))


    def max_batch(model, gpu, context_len: int, mem_util: float = 0.9) -> int:
        tokens = kv_capacity_tokens(model, gpu, mem_util)
        return tokens // context_len


    def fits(model, gpu, mem_util: float = 0.9) -> bool:
        return weight_bytes(model) < mem_util * gpu.memory_bytes
''')

# bob: alice's file with every local name and helper renamed (what a copier does first)
BOB_NAMES = {"_attention_weights": "_attn", "widths": "hs", "total": "acc", "heads": "h", "_layer": "_one_layer",
             "swiglu": "mlp", "norms": "rms", "table": "emb", "head": "lm", "per_layer": "x", "budget": "cap",
             "left": "rest", "tokens": "n"}
BOB = re.sub(r"\b(" + "|".join(BOB_NAMES) + r")\b", lambda m: BOB_NAMES[m.group(1)], ALICE)
assert BOB.count("def ") == ALICE.count("def ") and "widths" not in BOB and "n_heads" in BOB

# carol: one dictionary of matrix shapes, summed; a loop for the capacity
CAROL = HEAD + textwrap.dedent('''

    def param_count(model) -> int:
        d, hd = model.d_model, model.d_head
        shapes = {
            "wq": (d, model.n_heads * hd),
            "wk": (d, model.n_kv_heads * hd),
            "wv": (d, model.n_kv_heads * hd),
            "wo": (model.n_heads * hd, d),
            "gate": (d, model.d_ff),
            "up": (d, model.d_ff),
            "down": (model.d_ff, d),
        }
        per_layer = sum(rows * cols for rows, cols in shapes.values()) + d + d
        vocab = model.vocab_size * d * (1 if model.tie_embeddings else 2)
        return per_layer * model.n_layers + vocab + d


    def weight_bytes(model) -> float:
        n = param_count(model)
        return float(n * model.bytes_per_param)


    def kv_bytes_per_token(model) -> float:
        k_and_v = 2
        return float(k_and_v * model.n_layers * model.n_kv_heads * model.d_head * model.bytes_per_param)


    def kv_capacity_tokens(model, gpu, mem_util: float = 0.9) -> int:
        spare = gpu.memory_bytes * mem_util - weight_bytes(model)
        return max(0, math.floor(spare / kv_bytes_per_token(model)))


    def max_batch(model, gpu, context_len: int, mem_util: float = 0.9) -> int:
        return math.floor(kv_capacity_tokens(model, gpu, mem_util) / context_len)


    def fits(model, gpu, mem_util: float = 0.9) -> bool:
        needed = weight_bytes(model)
        available = gpu.memory_bytes * mem_util
        return needed < available
''')

# dave: the ledger as a table of (name, count) rows, checked as it goes
DAVE = HEAD + textwrap.dedent('''

    def _rows(model):
        q_width = model.n_heads * model.d_head
        kv_width = model.n_kv_heads * model.d_head
        yield "embedding", model.vocab_size * model.d_model
        if not model.tie_embeddings:
            yield "lm head", model.vocab_size * model.d_model
        yield "final norm", model.d_model
        for _ in range(model.n_layers):
            yield "q and o", 2 * model.d_model * q_width
            yield "k and v", 2 * model.d_model * kv_width
            yield "swiglu", 3 * model.d_model * model.d_ff
            yield "norms", 2 * model.d_model


    def param_count(model) -> int:
        count = 0
        for _name, n in _rows(model):
            assert n >= 0, _name
            count = count + n
        return count


    def weight_bytes(model) -> float:
        return param_count(model) * model.bytes_per_param


    def kv_bytes_per_token(model) -> float:
        vectors = 2 * model.n_kv_heads * model.n_layers
        return vectors * model.d_head * model.bytes_per_param


    def kv_capacity_tokens(model, gpu, mem_util: float = 0.9) -> int:
        room = gpu.memory_bytes * mem_util
        weights = weight_bytes(model)
        tokens = 0
        if weights < room:
            tokens = int((room - weights) / kv_bytes_per_token(model))
        return tokens


    def max_batch(model, gpu, context_len: int, mem_util: float = 0.9) -> int:
        seqs = kv_capacity_tokens(model, gpu, mem_util) // context_len
        return seqs


    def fits(model, gpu, mem_util: float = 0.9) -> bool:
        return gpu.memory_bytes * mem_util > weight_bytes(model)
''')


def _class(tmp_path: Path) -> Path:
    """Four submissions: folders for alice, carol and dave, a zip of a whole repository for bob."""
    subs = tmp_path / "subs"
    for name, text in (("alice", ALICE), ("carol", CAROL), ("dave", DAVE)):
        (subs / name / "a1_ledger").mkdir(parents=True)
        (subs / name / "a1_ledger" / "ledger.py").write_text(text)
    with zipfile.ZipFile(subs / "bob.zip", "w") as z:
        z.writestr("bob-repo/assignments/a1_ledger/ledger.py", BOB)
    return subs


def test_exactly_the_planted_copy_is_listed(tmp_path):
    subs = _class(tmp_path)
    path = write_report(sorted(subs.iterdir()), manifest_of(ROOT), ROOT, tmp_path / "out")
    rows = list(csv.DictReader(path.open()))
    assert [(r["task"], r["kind"], r["a"], r["b"]) for r in rows] == [("a1_ledger", "classmate", "alice", "bob")], rows
    assert min(float(rows[0]["share_a"]), float(rows[0]["share_b"])) >= 0.9, rows


def test_honest_pairs_stay_well_below_the_threshold(tmp_path):
    """Every score of the class, at threshold 0: the honest pairs, and each file against the
    reference and the library, stay clear of the threshold (the margin the module docstring states)."""
    subs = _class(tmp_path / "c")
    from autograder.grading.submission import unpack
    folders = {p.stem if p.suffix == ".zip" else p.name: unpack(p, tmp_path / "u" / p.name) for p in subs.iterdir()}
    scores = {(p.a, p.b): max(p.share_a, p.share_b) for p in find_pairs(folders, manifest_of(ROOT), ROOT, 0.0)}
    planted = scores.pop(("alice", "bob"))
    assert planted >= 0.9, planted
    # measured: the planted copy 1.0; the honest pairs 0.34 at most (a1's one-line formulas
    # coincide), each file and the reference 0.25 at most, the library 0.0
    assert scores and max(scores.values()) <= THRESHOLD - 0.1, sorted(scores.items(), key=lambda kv: -kv[1])[:5]


def test_a_copy_of_the_reference_is_listed(tmp_path):
    reference = (ROOT / "assignments" / "a1_ledger" / "ledger.py").read_text()
    renamed = reference.replace("attention", "att").replace("per_layer", "layer_total").replace("free", "spare")
    (tmp_path / "erin" / "a1_ledger").mkdir(parents=True)
    (tmp_path / "erin" / "a1_ledger" / "ledger.py").write_text(renamed)
    pairs = find_pairs({"erin": tmp_path / "erin"}, manifest_of(ROOT), ROOT)
    assert [(p.kind, p.b) for p in pairs] == [("reference", "reference")], pairs
