"""Trick: exceptions whose messages hold lone surrogates (and a name and path that do too):
results.json cannot encode them as UTF-8."""


def _raise(*args, **kwargs):
    raise ValueError("no answer \ud800 from /tmp/\udcff/x.py")


class Weird(Exception):
    pass


def fits(*args, **kwargs):
    raise Weird("\udfff" * 10_000)


param_count = weight_bytes = kv_bytes_per_token = kv_capacity_tokens = max_batch = _raise
