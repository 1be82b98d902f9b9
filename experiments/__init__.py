"""Runnable experiments: `python -m experiments NAME [--flags]` (see `experiments.__main__`)."""
