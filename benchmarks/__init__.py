"""``make bench``: side-by-side speed ratios measured in one run (never asserted in tests)."""
