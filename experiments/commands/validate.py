"""Checks every `results.json` under a runs folder against the schema (CI, after the tour).

    python -m experiments.commands.validate [ROOT]     # default ROOT: runs

Exits non-zero if a file breaks the schema or none is found; never judges a verdict's value.
"""

from __future__ import annotations

import sys

from experiments.claims import CLAIMS
from experiments.verdict.running.schema import validate_runs


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  root = argv[0] if argv else "runs"
  try:
    n = validate_runs(list(CLAIMS), root)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  if not n:
    print(f"error: no results.json under {root}/claims or {root}/tour", file=sys.stderr)
    return 1
  print(f"{n} results.json files under {root} match the schema")
  return 0


if __name__ == "__main__":
  sys.exit(main())
