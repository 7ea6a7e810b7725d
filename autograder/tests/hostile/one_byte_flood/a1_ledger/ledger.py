"""Trick: answer every call with an endless reply, one byte per write and no newline, on the
reply pipe itself (its number is in the child's command line). The grader rebuilt and rescanned
its whole reply buffer on every read: quadratic in the bytes sent, so it stayed busy until the
limit. Now each byte is looked at once, and the deadline ends the call."""
import json
import os
import sys

_REPLY_FD = json.loads(sys.argv[1])["reply_fd"]


def _flood(*args, **kwargs):
    while True:
        os.write(_REPLY_FD, b" ")


param_count = weight_bytes = kv_bytes_per_token = kv_capacity_tokens = max_batch = fits = _flood
