"""Progress: a `tqdm` bar on a terminal, periodic plain lines when output is a file or pipe.

A bar's carriage returns turn a log file into one unreadable line, so when stderr is not a
terminal the same calls print a line at every tenth of the work (and at least every
`interval` seconds).

Example:
  >>> import io
  >>> from experiments.console import progress
  >>> out = io.StringIO()
  >>> with progress(4, desc="demo", file=out) as bar:
  ...   for _ in range(4):
  ...     bar.update(1)
  >>> out.getvalue().splitlines()[-1]
  'demo: 4/4'
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import tqdm


class LineProgress:
  """The non-terminal progress: `update`, `set_postfix`, `close` like `tqdm`, printing lines."""

  def __init__(self, total: int, initial: int = 0, desc: str = "", file: TextIO | None = None,
               interval: float = 60.0, disable: bool = False):
    self.total, self.n, self.desc, self.file = total, initial, desc, file or sys.stderr
    self.interval, self.disable = interval, disable
    self.postfix = ""
    self._every = max(1, (total - initial) // 10)
    self._last_n, self._last_t = initial, time.monotonic()

  def set_postfix(self, **kw) -> None:
    self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

  def set_postfix_str(self, text: str) -> None:
    self.postfix = text

  def update(self, n: int = 1) -> None:
    self.n += n
    now = time.monotonic()
    if (self.n - self._last_n >= self._every or now - self._last_t >= self.interval
        or self.n == self.total):
      self._print()
      self._last_n, self._last_t = self.n, now

  def _print(self) -> None:
    if not self.disable:
      tail = f" ({self.postfix})" if self.postfix else ""
      print(f"{self.desc}: {self.n}/{self.total}{tail}", file=self.file, flush=True)

  def close(self) -> None:
    pass

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def progress(total: int, initial: int = 0, desc: str = "", disable: bool = False,
             file: TextIO | None = None, unit: str = "it"):
  """A `tqdm` bar when `file` (default stderr) is a terminal, else a `LineProgress`."""
  file = file or sys.stderr
  if hasattr(file, "isatty") and file.isatty():
    return tqdm.tqdm(total=total, initial=initial, desc=desc, disable=disable, file=file,
                     dynamic_ncols=True, unit=unit)
  return LineProgress(total, initial, desc, file, disable=disable)
