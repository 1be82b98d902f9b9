"""What the claims feed the shared models: stdlib windows, and a forward pass's intermediates.

Windows are pure in `(seed, step)`, so every claim and seed reads the same text; the sown
intermediates (`q`, `k`, `scores`, `weights`, ...) come from one jitted forward pass per
config.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

import transformer


def windows(seed: int, seq_len: int, n: int, split: str, step: int = 10_000) -> np.ndarray:
  """`(n, seq_len + 1)` windows of the stdlib `split`, pure in `(seed, step)`.

  Step 10 000 lies beyond every shared model's training steps, so calibration windows of the
  training split are not the batches the model was trained on.
  """
  from experiments import data

  return data.text_source("stdlib", seq_len).batch(seed, step, n, split).tokens


def val_tokens(seq_len: int, batch_size: int, seed: int, split: str = "heldout") -> np.ndarray:
  """`(B, seq_len)` token ids: held-out windows of the stdlib corpus (pure in `seed`).

  By default they are `heldout` windows (the `val` and `test` files together, drawn as `val`
  was before the pinned corpus cut a test split out of it), so every claim registered before
  that cut measures the very windows it was registered on; a version registered after it
  reads its verdict on `split="test"` instead.
  """
  from experiments import data

  src = data.text_source("stdlib", seq_len)
  return src.batch(seed, 0, batch_size, split).tokens[:, :-1]


@functools.lru_cache(maxsize=8)
def _sown_forward(cfg: transformer.Config):
  return jax.jit(lambda p, t: transformer.Transformer(cfg).apply({"params": p}, t,
                                                                 mutable=["intermediates"]))


def intermediates(params, cfg: transformer.Config, tokens_BT) -> dict:
  """The sown intermediates of one forward pass (`blocks/attn/{q, k, scores, weights}`, ...)."""
  _, state = _sown_forward(cfg)(params, tokens_BT)
  return jax.tree.map(lambda x: x[0] if isinstance(x, tuple) else x, state["intermediates"],
                      is_leaf=lambda x: isinstance(x, tuple))
