"""A threshold's condition, `">= 0.9"`, read as an operator and a number.

Example:
  >>> from experiments.verdict.arithmetic.conditions import parse_condition
  >>> parse_condition("> 0.25")
  ('>', 0.25)
"""

from __future__ import annotations

import re

_CONDITION = re.compile(r"^\s*(<=|>=|<|>|==)\s*([-+0-9.eE]+|inf|-inf)\s*$")


def parse_condition(text: str) -> tuple[str, float]:
  """`">= 0.9"` -> `(">=", 0.9)`; raises `ValueError` naming the accepted forms."""
  match = _CONDITION.match(text)
  if not match:
    raise ValueError(f"condition {text!r} cannot be read. Fix: write an operator (<, <=, >, >=, "
                     "==) and a number, e.g. '>= 0.9'.")
  return match.group(1), float(match.group(2))
