"""Trick: answers that are generators, endless iterators and objects that claim a length, hoping
that the grader iterates them, or compares them, in its own process."""
import itertools


class Endless:
    def __iter__(self):
        return itertools.count()

    def __len__(self):
        return 10 ** 30

    def __index__(self):
        return 0


def param_count(model):
    return (x for x in itertools.count())


def weight_bytes(model):
    return Endless()


def kv_bytes_per_token(model):
    return iter([131072])


param_count = param_count
kv_capacity_tokens = max_batch = fits = lambda *a, **k: Endless()
