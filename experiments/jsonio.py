"""Strict JSON, the one implementation: `null` where a number is NaN or infinite.

`json.dump` writes `NaN`, which is not JSON (browsers, `jq` and most other languages refuse
it). Every results file of the experiments (runs, claims, the tour, the atlas) goes through
`dump_strict`, which writes a temporary file and renames it into place, so a crash never
leaves half a file; `load_strict` reads one back and refuses `NaN` literals; every
`metrics.jsonl` is read by `read_jsonl`, whose one rule for a torn file is: stop at the first
line that is unterminated or does not parse (a killed writer leaves at most one such line).

Example:
  >>> import io, math
  >>> from experiments.jsonio import dump_strict, strict
  >>> strict({"loss": math.nan, "steps": [1, math.inf]})
  {'loss': None, 'steps': [1, None]}
  >>> f = io.StringIO(); dump_strict({"x": float("nan")}, f); f.getvalue()
  '{\\n  "x": null\\n}\\n'
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, TextIO

import numpy as np


def strict(tree: Any) -> Any:
  """`tree` with arrays as lists, numpy scalars as Python numbers, NaN/±inf as `None`."""
  if isinstance(tree, dict):
    return {str(k): strict(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [strict(v) for v in tree]
  if isinstance(tree, (bool, int, str)) or tree is None:
    return tree
  if isinstance(tree, (np.ndarray, np.generic)) or hasattr(tree, "__array__"):
    return strict(np.asarray(tree).tolist())
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree


def dump_strict(obj: Any, dest: str | os.PathLike | TextIO, indent: int | None = 2) -> None:
  """Writes `strict(obj)` as JSON to the path or open file `dest` (never `NaN`).

  A path is written as `dest.tmp` and renamed into place (atomic on POSIX).
  """
  text = json.dumps(strict(obj), indent=indent, allow_nan=False) + "\n"
  if hasattr(dest, "write"):
    dest.write(text)
    return
  tmp = f"{os.fspath(dest)}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, dest)


def load_strict(path: str | os.PathLike) -> Any:
  """Reads a JSON file, refusing `NaN`/`Infinity` literals (which `json.load` would accept).

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "bad.json")
    >>> with open(path, "w") as f:
    ...   _ = f.write('{"x": NaN}')
    >>> load_strict(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...bad.json: NaN is not strict JSON (write null)
  """
  def refuse(token):
    raise ValueError(f"{os.fspath(path)}: {token} is not strict JSON (write null)")

  with open(path) as f:
    return json.load(f, parse_constant=refuse)


def dumps_line(obj: Any) -> str:
  """One strict JSON object on one line (for a `.jsonl` log or a last stdout line)."""
  return json.dumps(strict(obj), allow_nan=False)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """The rows of a JSON-lines file, up to the first torn (unterminated or unparsable) line.

  Returns `[]` when the file does not exist.

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> with open(path, "w") as f:
    ...   _ = f.write('{"step": 1}\\n{"step": 2}\\n{"st')
    >>> read_jsonl(path)
    [{'step': 1}, {'step': 2}]
  """
  if not os.path.exists(path):
    return []
  rows = []
  with open(path) as f:
    for line in f:
      if not line.endswith("\n"):
        break
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        break
  return rows
