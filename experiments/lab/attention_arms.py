"""Training arms of the attention claims: one small model, one optimizer, a rate grid.

Shared by `psd-attention`, `sliding-window` and `dynamic-sparsity`, so their arms differ only
in the attention they configure: every arm is `base_config(**changes)` (the `tiny` preset)
trained by `train_arm` with `make_tx` (AdamW, clipping at 1) over a rate grid, through the one
training step (`experiments.train.sweep.train_many`).
"""

from __future__ import annotations

import jax
import numpy as np

import transformer
from experiments import data as data_lib
from experiments.train import sweep

LEARNING_RATES = (1e-3, 3e-3)
def base_config(**overrides) -> transformer.Config:
  """The claims' small model: the `tiny` preset (d 64, L 2, H 4), vocabulary 256."""
  return transformer.preset("tiny", **overrides)


def make_tx(learning_rate):
  """AdamW with global-norm clipping at 1 (weight decay 0.01), one rate per run."""
  import optax

  return optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(learning_rate, b2=0.98, weight_decay=0.01))


def exact_match_of(params, cfg: transformer.Config, src, seed: int, *, n_batches: int,
                   batch_size: int) -> float:
  """Mean `data.exact_match` of a model on `n_batches` held-out batches of a task source."""
  apply = jax.jit(transformer.Transformer(cfg).apply)
  scores = []
  for step in range(n_batches):
    batch = src.batch(seed, 10_000 + step, batch_size, "val")
    logits = apply({"params": params}, batch.tokens[:, :-1])
    scores.append(data_lib.exact_match(logits, batch))
  return float(np.mean(scores))


def _index(tree, i: int, j: int):
  return jax.tree.map(lambda x: x[i, j], tree)


def train_arm(cfg: transformer.Config, seeds, *, data, steps: int, batch_size: int,
              seq_len: int, learning_rates=LEARNING_RATES, exact_match: bool = False,
              em_batches: int = 4) -> dict:
  """Trains one arm over `seeds` × `learning_rates` (paired: same init and data per seed).

  The best rate is chosen by the mean validation loss over `seeds`: pass tuning seeds here
  to choose a rate, then train the reported seeds at that one rate.

  Returns:
    `{"per_seed": {seed: {"loss": val loss, "exact_match"?: ...}}, "lr": best rate,
    "params": per-seed params at that rate, "diverged": ...}`.
  """
  src = data_lib.source(data, seq_len) if isinstance(data, str) else data
  r = sweep.train_many(cfg, make_tx, seeds=tuple(seeds), learning_rates=learning_rates,
                       steps=steps, data=src, batch_size=batch_size, seq_len=seq_len,
                          eval_every=steps, eval_batches=4)
  final = np.where(r.diverged, np.inf, r.val_loss[..., -1])  # (n_lr, n_seeds)
  best = int(np.argmin(final.mean(1)))
  per_seed, params = {}, {}
  for j, seed in enumerate(seeds):
    p = _index(r.params, best, j)
    m = {"loss": float(r.val_loss[best, j, -1]), "diverged": float(r.diverged[best, j])}
    if exact_match:
      m["exact_match"] = exact_match_of(p, cfg, src, seed, n_batches=em_batches,
                                        batch_size=batch_size)
    per_seed[seed], params[seed] = m, p
  return {"per_seed": per_seed, "lr": learning_rates[best], "params": params,
          "val_loss_grid": r.val_loss[..., -1].tolist()}
