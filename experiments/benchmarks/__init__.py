"""Benchmarks: importable scripts that print ratios measured side by side in one run."""
