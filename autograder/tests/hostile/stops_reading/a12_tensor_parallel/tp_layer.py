"""Trick: stop reading a request once it is large (a12's layer weights are about 1 MB), so that
the grader's write to the child's stdin blocks on a full pipe. With a plain blocking write the
grader hung for ever: no results.json, and under grade-all no gradebook. The child's request
loop iterates over ``sys.stdin``, which this module replaces at import."""
import os
import sys
import time


class _StopAtLargeRequests:
    """Hands the child's loop one request per read, as long as each fits in one read; at the
    first that does not, stops reading for an hour."""

    def __iter__(self):
        return self

    def __next__(self):
        chunk = os.read(0, 1 << 16)
        if not chunk:
            raise StopIteration
        if not chunk.endswith(b"\n"):
            time.sleep(3600)
        return chunk.decode()


sys.stdin = _StopAtLargeRequests()


def shard_attention(wqkv, wo, n_heads, n_kv_heads, d_head, t):
    return None


def shard_mlp(w_gate_up, w_down, t):
    return None


def all_reduce(partials):
    return None


def tp_layer(x, layer, n_heads, n_kv_heads, d_head, t, *args, **kwargs):
    return None
