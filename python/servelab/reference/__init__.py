"""Pure-Python references of every Rust fast path: small, readable, checked against the core.

They ship with the library for students to read (none is a task's solution: calling them
passes no graded task), and they are the oracle's oracle: property tests feed the same inputs
to a reference and to ``servelab._core`` and demand the same answers and the same errors.
For instance, the reference ledger and the Rust core count Llama-3-8B alike:

>>> from servelab import hw_model
>>> from servelab.reference import step_cost
>>> step_cost.param_count(hw_model.LLAMA3_8B) == hw_model.LLAMA3_8B.param_count == 8_030_261_248
True
"""
