"""Trick: answer a call with an endless reply, one byte per write and no newline, on the reply
pipe itself (its number is in the child's command line). The grader rebuilt and rescanned its
whole reply buffer on every read: quadratic in the bytes sent, busy until the limit. Now each
byte is looked at once, and the deadline ends the call. Only ``weight_bytes`` floods (the other
functions answer 0 and fail at once), so that one test, not six, waits out its limit."""
import json
import os
import sys

_REPLY_FD = json.loads(sys.argv[1])["reply_fd"]


def weight_bytes(model):
    while True:
        os.write(_REPLY_FD, b" ")


def param_count(model):
    return 0


def kv_bytes_per_token(model):
    return 0.0


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    return 0


def max_batch(model, gpu, context_len, mem_util=0.9):
    return 0


def fits(model, gpu, mem_util=0.9):
    return False
