"""Trick: answers too large to print (an int of 100,000 digits), and infinity, NaN and a bool
where counts are due."""


def param_count(model):
    return 10 ** 100_000


def weight_bytes(model):
    return float("inf")


def kv_bytes_per_token(model):
    return float("nan")


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    return True


def max_batch(model, gpu, context_len, mem_util=0.9):
    return 2 ** 200


def fits(model, gpu, mem_util=0.9):
    return 0
