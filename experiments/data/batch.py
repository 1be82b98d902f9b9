"""What every data source returns: a `Batch`, drawn by the generator of `(seed, step, split)`.

`tokens (B, T+1)` int32 (the model reads `tokens[:, :-1]` and predicts `tokens[:, 1:]`) and
`weights (B, T)` float32 (1 where a target is scored). `batch_rng` is the only randomness a
source may use, so a batch depends on `(seed, step, split)` alone.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

VOCAB_SIZE = 256
SPLITS = {"train": 0, "val": 1, "test": 2}


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
  if split not in SPLITS:
    raise ValueError(f"split={split!r} is unknown. Fix: use one of {sorted(SPLITS)}.")
  return np.random.default_rng(np.random.SeedSequence([seed, step, SPLITS[split]]))
