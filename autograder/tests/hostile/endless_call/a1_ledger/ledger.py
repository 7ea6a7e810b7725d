"""An honest param_count; kv_bytes_per_token loops forever when called, and the other functions
answer 0 (and fail at once: each stuck test waits out the per-test limit, so only the tests
that reach kv_bytes_per_token first do; the first test of the task is one of them, and the
grading goes on after it)."""

import math


def param_count(model):
    q = model.n_heads * model.d_head
    kv = model.n_kv_heads * model.d_head
    attention = model.d_model * q + 2 * model.d_model * kv + q * model.d_model
    per_layer = attention + 3 * model.d_model * model.d_ff + 2 * model.d_model
    embedding = model.vocab_size * model.d_model
    return model.n_layers * per_layer + model.d_model + embedding + (0 if model.tie_embeddings else embedding)


def weight_bytes(model):
    return param_count(model) * model.bytes_per_param


def kv_bytes_per_token(model):
    return 2 * model.n_layers * model.n_kv_heads * model.d_head * model.bytes_per_param


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    free = gpu.memory_bytes * mem_util - weight_bytes(model)
    return 0 if free <= 0 else math.floor(free / kv_bytes_per_token(model))


def max_batch(model, gpu, context_len, mem_util=0.9):
    return kv_capacity_tokens(model, gpu, mem_util) // context_len


def fits(model, gpu, mem_util=0.9):
    return weight_bytes(model) < gpu.memory_bytes * mem_util



def _forever(*args, **kwargs):
    while True:
        pass


def _zero(*args, **kwargs):
    return 0


kv_bytes_per_token = _forever
weight_bytes = kv_capacity_tokens = max_batch = fits = _zero
