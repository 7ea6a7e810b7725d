"""Trick: an honest solution that kills its process with status 0 as it is imported."""

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


import os

os._exit(0)
