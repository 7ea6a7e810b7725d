"""Trick: sleep just under the per-test time limit in every child (each test starts its own,
which imports this module), so that each test costs nearly its limit. 40 s a child stretched one
grade-all to 38 minutes. The self-check grades it with a 4 s limit; the submission's time budget
(autograder/grading/grade.py) bounds the whole grading whatever the per-test limit is."""
import time

time.sleep(3.5)


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
