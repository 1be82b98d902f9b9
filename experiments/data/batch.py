"""What every data source returns: a `Batch`, drawn by the generator of `(seed, step, split)`.

`tokens (B, T+1)` int32 (the model reads `tokens[:, :-1]` and predicts `tokens[:, 1:]`) and
`weights (B, T)` float32 (1 where a target is scored). `batch_rng` is the only randomness a
source may use, so a batch depends on `(seed, step, split)` alone.

Training reads `train`, every tuning decision reads `val`, verdicts read `test`. Inside
`no_test(who)` (every tuner enters it: `experiments.lab.edge.tune`, `lab.tuning.tune`) a
`test` batch is refused (`check_split`), so no rate, grid or arm is chosen on the test split.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import NamedTuple

import numpy as np

VOCAB_SIZE = 256
SPLITS = {"train": 0, "val": 1, "test": 2}
# Splits that hold test bytes: `test`, and `heldout` (`experiments.data.text.Corpus.heldout`).
READS_TEST = ("test", "heldout")
_TUNER = contextvars.ContextVar("tuner", default="")


@contextlib.contextmanager
def no_test(who: str):
  """Within this block no source may draw a batch of the `test` split: `who` is tuning.

  Example:
    >>> from experiments.data.batch import batch_rng, no_test
    >>> with no_test("my tuner"):
    ...   _ = batch_rng(0, 0, "val")  # fine; batch_rng(0, 0, "test") raises ValueError
  """
  token = _TUNER.set(who)
  try:
    yield
  finally:
    _TUNER.reset(token)


def check_split(split: str) -> None:
  """Refuses a split that is unknown, or that holds test bytes while a tuner runs (`no_test`)."""
  if split not in (*SPLITS, "heldout"):
    raise ValueError(f"split={split!r} is unknown. Fix: use one of {sorted(SPLITS)}.")
  if split in READS_TEST and _TUNER.get():
    raise ValueError(f"split={split!r} read inside {_TUNER.get()}: tuning reads 'val' only, "
                     "'test' is for verdicts. Fix: evaluate the tuning runs on split 'val'.")


class Batch(NamedTuple):
  """One batch: `tokens (B, T+1)` int32 and `weights (B, T)` float32 on the targets."""

  tokens: np.ndarray
  weights: np.ndarray


def batch_rng(seed: int, step: int, split: str) -> np.random.Generator:
  """The generator of batch `(seed, step, split)`: independent streams, no shared state.

  Example:
    >>> from experiments.data.batch import batch_rng
    >>> int(batch_rng(0, 7, "val").integers(1000)) == int(batch_rng(0, 7, "val").integers(1000))
    True
  """
  check_split(split)
  if split not in SPLITS:
    raise ValueError(f"split={split!r} is unknown. Fix: use one of {sorted(SPLITS)}.")
  return np.random.default_rng(np.random.SeedSequence([seed, step, SPLITS[split]]))
