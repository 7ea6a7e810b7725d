"""Trick: exceptions whose __str__ (and __repr__) raise, or recurse forever, so that describing
the failure fails too."""


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("you cannot print me")

    __repr__ = __str__


class Recursive(Exception):
    def __str__(self):
        return str(self)


def _unprintable(*args, **kwargs):
    raise Unprintable()


def _recursive(*args, **kwargs):
    raise Recursive()


param_count = weight_bytes = kv_bytes_per_token = _unprintable
kv_capacity_tokens = max_batch = fits = _recursive
