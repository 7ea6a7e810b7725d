"""The hostile submissions are data, not tests: pytest must never load their conftest.py files."""

collect_ignore = ["hostile"]
