"""Pure-Python references of every Rust fast path: small, readable, checked against the core.

They are what the assignments' solutions look like, and the oracle's oracle: property tests
feed the same inputs to a reference and to ``servelab._core`` and demand the same answers and
the same errors.
"""
