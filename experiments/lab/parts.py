"""Parts of a run kept as they finish, so a crash or a second process loses nothing.

A long claim run trains several arms one after another; `kept` writes each one's result to
`run_dir/parts/<name>.json` when it finishes, with a key (what it was computed for), and reads
it back instead of computing when the file records the same key: after a crash (`--resume
RUN`), or when another process computed that part into the same folder. While a process
computes a part it holds `<part>.lock` (its pid); another process reaching the same part waits
for it, unless that pid is gone. The caller always gets the file's contents (NaN written as
`null` read back as NaN), so a reused part and a fresh one give the same findings.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from experiments import jsonio


def part_path(run_dir: str, name: str) -> str:
  """Where a run keeps one part: `run_dir/parts/<name>.json`."""
  return os.path.join(run_dir, "parts", f"{name}.json")


def _nan(tree):
  """A strict-JSON tree back as numbers: `null` (written for NaN) is NaN again."""
  if isinstance(tree, dict):
    return {k: _nan(v) for k, v in tree.items()}
  if isinstance(tree, list):
    return [_nan(v) for v in tree]
  return math.nan if tree is None else tree


def wait_for(lock: str, log: Callable[[str], None], poll_s: float = 30.0) -> None:
  """Waits while `lock` names a live process other than this one."""
  told = False
  while os.path.exists(lock):
    try:
      pid = int(open(lock).read().strip() or 0)
      os.kill(pid, 0)  # raises when no such process
    except (OSError, ValueError):
      return  # a crashed process's lock: compute the part here
    if pid == os.getpid():
      return
    if not told:
      log(f"  waiting for process {pid}, which computes this part ({lock})")
      told = True
    time.sleep(poll_s)


def kept(run_dir: str, name: str, key: dict, compute: Callable[[], dict],
         log: Callable[[str], None] = print) -> dict:
  """`compute()` (a JSON-ready dict), kept as the part `name` of `run_dir` under `key`.

  Args:
    run_dir: the run folder (`Spec.run_dir`).
    name: the part's name (e.g. an arm).
    key: what the part is computed for (seeds, sizes, ...): a file with another key is
      computed again.
    compute: computes the part.
    log: where progress lines go.

  Returns:
    The part as read back from its file.
  """
  path = part_path(run_dir, name)
  key = jsonio.strict(key)
  wait_for(path + ".lock", log)
  obj = jsonio.load_strict(path) if os.path.exists(path) else {}
  if obj.get("key") == key:
    log(f"  reusing {path}")
  else:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as f:
      f.write(str(os.getpid()))
    try:
      jsonio.dump_strict({"key": key, "part": compute()}, path)
    finally:
      os.remove(path + ".lock")
    obj = jsonio.load_strict(path)
  return _nan(obj["part"])
