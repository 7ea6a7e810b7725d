"""servelab: a teaching and research kit for LLM inference systems.

The lecture's modules, by name: :mod:`servelab.hw_model` (the paper GPU, §3) and more as the
course grows. The Rust core is :mod:`servelab._core`; everything students touch is Python.
"""

from servelab._core import __version__

__all__ = ["__version__"]
