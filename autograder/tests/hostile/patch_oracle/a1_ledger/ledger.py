"""Trick: make the oracle agree with a wrong answer (patch servelab's ModelSpec and the Rust
core to return what this module returns); the functions return 0."""
try:
    import servelab._core as core
    from servelab import hw_model

    hw_model.ModelSpec.param_count = property(lambda self: 0)
    hw_model.kv_capacity_tokens = lambda *a, **k: 0
    core.param_count = lambda *a, **k: 0
except Exception:
    pass


def param_count(model):
    return 0


def weight_bytes(model):
    return 0.0


def kv_bytes_per_token(model):
    return 0.0


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    return 0


def max_batch(model, gpu, context_len, mem_util=0.9):
    return 0


def fits(model, gpu, mem_util=0.9):
    return False
