"""Records the a1 inputs a student would see running the grader locally with a known secret and
hash, and the reference's answers, into ledger.py beside this file (instructors only: run it
again after changing a1's tests; `.venv/bin/python autograder/tests/hostile/replayed_inputs/record_table.py`)."""
import hashlib, importlib.util, json, sys, types
from pathlib import Path
from types import SimpleNamespace
ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
from autograder.grading import testload
from autograder.sandbox import wire
from autograder.grading.judge import settings  # registers the "autograder" profile
settings.load_profile("autograder")
spec = importlib.util.spec_from_file_location("ref_ledger", ROOT / "assignments/a1_ledger/ledger.py")
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)

def key(x):
    if isinstance(x, SimpleNamespace):
        return tuple(sorted((k, key(v)) for k, v in vars(x).items()))
    if isinstance(x, (list, tuple)):
        return tuple(key(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, key(v)) for k, v in x.items()))
    return repr(x)

table = {}
class Recorder(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"): raise AttributeError(name)
        def call(*args, **kwargs):
            a, k = wire.decode(wire.encode(list(args))), wire.decode(wire.encode(kwargs))
            value = getattr(ref, name)(*a, **k)
            h = hashlib.sha256(repr((name, key(a), key(k))).encode()).hexdigest()[:20]
            table[h] = value
            return value
        return call
from autograder.grading import grading_secret
LAPTOP = grading_secret.Secret(b"the secret a student would need to know", "replay")
with testload.seeded(lambda tid: grading_secret.seed_for(LAPTOP, "replay", f"a1_ledger\0{tid}")):
  mod = testload.import_test_module(ROOT / "assignments/a1_ledger/test_a1_ledger.py", {"ledger": Recorder("ledger")}, "rec")
  for name in dir(mod):
    if name.startswith("test_"):
        getattr(mod, name)()
print(len(table), file=sys.stderr)
out = Path(__file__).resolve().parent / "a1_ledger" / "ledger.py"
out.write_text('''"""Trick: run the grader locally (the release ships it), record every input its Hypothesis
tests draw and the right answer to each (from a classmate's solution), and answer from that
table. It worked while the grader's seed shipped with it. The table below was recorded with the
seeds of the secret b"the secret a student would need to know" and the student identity "replay"
(the control in test_robustness.py grades it so, and it earns full marks); graded with the
instructors' secret under its own name, other inputs are drawn and the table has no answer."""
import hashlib
from types import SimpleNamespace


def _key(x):
    if isinstance(x, SimpleNamespace):
        return tuple(sorted((k, _key(v)) for k, v in vars(x).items()))
    if isinstance(x, (list, tuple)):
        return tuple(_key(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _key(v)) for k, v in x.items()))
    return repr(x)


def _lookup(name):
    def answer(*args, **kwargs):
        return _TABLE[hashlib.sha256(repr((name, _key(list(args)), _key(kwargs))).encode()).hexdigest()[:20]]
    return answer


param_count, weight_bytes, kv_bytes_per_token = _lookup("param_count"), _lookup("weight_bytes"), _lookup("kv_bytes_per_token")
kv_capacity_tokens, max_batch, fits = _lookup("kv_capacity_tokens"), _lookup("max_batch"), _lookup("fits")

_TABLE = ''' + repr(table) + "\n")
