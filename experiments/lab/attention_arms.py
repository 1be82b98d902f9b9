"""Training arms of the attention claims: one small model, one optimizer, rates tuned apart.

Shared by `psd-attention`, `sliding-window` and `dynamic-sparsity`, so their arms differ only
in the attention they configure: every arm is `base_config(**changes)` (the `tiny` preset),
or `config_at(T, model=NAME, **changes)` at a shared model's shape (a claim's scale axis),
trained by `train_arm` with `make_tx` (AdamW, clipping at 1), through the one training step
(`experiments.train.sweep.train_many`). `tuned_arm` chooses an arm's rate on tuning seeds
only, then trains the reported seeds at that one rate: reported seeds never choose anything.
`within` gives the conditions of the non-inferiority thresholds they share ("costs less than
a margin").
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

import transformer
from experiments import data as data_lib
from experiments import models
from experiments.lab import edge
from experiments.lab.tuning import ended_diverged  # one rule: ended non-finite or above ln V
from experiments.train import sweep
from experiments.train.step import adamw

LEARNING_RATES = (1e-3, 3e-3)


def base_config(**overrides) -> transformer.Config:
  """The claims' small model: the `tiny` preset (d 64, L 2, H 4), vocabulary 256."""
  return transformer.preset("tiny", **overrides)


def config_at(seq_len: int, *, model: str | None = None, **overrides) -> transformer.Config:
  """An arm's model whose `max_len` (rows of the learned positions) reaches `seq_len`.

  The shape is `base_config()` (the `tiny` preset), or with `model` the shape of that shared
  model or claim shape (`experiments.models.config`: `mini` is the `tiny` preset, `llama-mini`
  its Llama twin); `overrides` (the arm's attention) are applied to it. Up to that shape's
  `max_len` (256) the config is that shape itself, so a run at the preset's lengths keeps its
  model; beyond it `max_len = seq_len` (the context axis of the attention claims; with RoPE
  no parameter depends on it).

  Example:
    >>> from experiments.lab.attention_arms import base_config, config_at
    >>> config_at(256) == base_config(), config_at(1024).max_len
    (True, 1024)
    >>> cfg = config_at(512, model="llama-small", attention="local", window=32, block_size=32)
    >>> cfg.d_model, cfg.n_kv_heads, cfg.positions, cfg.window, cfg.max_len
    (128, 2, 'rope', 32, 512)
  """
  cfg = base_config(**overrides) if model is None else models.config(model).replace(**overrides)
  return cfg if seq_len <= cfg.max_len else cfg.replace(max_len=seq_len)


def make_tx(learning_rate):
  """AdamW with global-norm clipping at 1 (weight decay 0.01), one rate per run."""
  import optax

  return optax.chain(optax.clip_by_global_norm(1.0),
                     adamw(learning_rate, weight_decay=0.01, decay="all", b2=0.98))


def within(margin: float, direction: str = "<") -> dict:
  """The conditions of a non-inferiority threshold: a cost that stays inside a practical margin.

  Returns the keyword arguments `supports`, `refutes`, `margin` of a `Threshold`. With
  `direction="<"` (a cost that should be small, e.g. extra loss): supported when the whole
  95% interval lies below `+margin`, refuted when it lies above it, inconclusive when it
  straddles it. `">"` mirrors it for a score that should not drop by more than `margin`
  (e.g. exact match): supported above `−margin`, refuted below. `Threshold.beyond` states a
  gain *beyond* a margin; this states a cost *within* one, by the same rule.

  Example:
    >>> from experiments.lab.attention_arms import within
    >>> within(0.02)
    {'supports': '< 0.02', 'refutes': '> 0.02', 'margin': 0.02}
    >>> within(0.1, ">")["supports"]
    '> -0.1'
  """
  if not margin > 0:
    raise ValueError(f"within: margin={margin} must be > 0. Fix: state the largest cost that "
                     "still counts as small, e.g. within(0.02).")
  if direction not in ("<", ">"):
    raise ValueError(f"within: direction={direction!r} is unknown. Fix: '<' for a cost that "
                     "must stay small, '>' for a score that must not drop.")
  edge = margin if direction == "<" else -margin
  other = ">" if direction == "<" else "<"
  return {"supports": f"{direction} {edge:.12g}", "refutes": f"{other} {edge:.12g}",
          "margin": float(margin)}


@functools.lru_cache(maxsize=16)
def forward(cfg: transformer.Config):
  """`apply({"params": p}, tokens) -> logits`, jitted once per config (evaluations reuse it)."""
  return jax.jit(transformer.Transformer(cfg).apply)


def task_scores(params, cfg: transformer.Config, src, seed: int, *, n_batches: int,
                batch_size: int, split: str = "val") -> dict:
  """Exact match and answer accuracy of a model on `n_batches` held-out batches of a task.

  `exact_match` is `data.exact_match` (every scored target of a sequence right); `accuracy`
  the fraction of scored targets right (for recall: of answers), pooled over the batches of
  `split` (`val` for every choice, `test` for a verdict's reported runs).
  """
  apply = forward(cfg)
  em, right, scored = [], 0.0, 0.0
  for step in range(n_batches):
    batch = src.batch(seed, 10_000 + step, batch_size, split)
    logits = apply({"params": params}, batch.tokens[:, :-1])
    em.append(data_lib.exact_match(logits, batch))
    hit = np.asarray(logits).argmax(-1) == batch.tokens[:, 1:]
    right += float((hit * batch.weights).sum())
    scored += float(batch.weights.sum())
  return {"exact_match": float(np.mean(em)), "accuracy": right / scored}


def exact_match_of(params, cfg: transformer.Config, src, seed: int, *, n_batches: int,
                   batch_size: int, split: str = "val") -> float:
  """Mean `data.exact_match` of a model on `n_batches` held-out batches of a task source."""
  return task_scores(params, cfg, src, seed, n_batches=n_batches, batch_size=batch_size,
                     split=split)["exact_match"]


def _index(tree, i: int, j: int):
  return jax.tree.map(lambda x: x[i, j], tree)


def train_arm(cfg: transformer.Config, seeds, *, data, steps: int, batch_size: int,
              seq_len: int, learning_rates=LEARNING_RATES, exact_match: bool = False,
              em_batches: int = 4, split: str = "val") -> dict:
  """Trains one arm over `seeds` × `learning_rates` (paired: same init and data per seed).

  The best rate is the lowest mean final validation loss over `seeds` among rates whose runs
  did not end diverged: pass tuning seeds here to choose a rate (as `tuned_arm` does), never
  the reported ones. `split` is where the final loss (and exact match) is read: `val` for
  tuning, `test` for a registered verdict's reported runs (`train_many(eval_split=)`; refused
  inside a tuner).

  Returns:
    `{"per_seed": {seed: {"loss", "diverged", "spiked", "exact_match"?, "accuracy"?}}, "lr":
    best rate,
    "params": per-seed params at that rate, "val_loss_grid": (n_lr, n_seeds) final losses}`.
  """
  src = data_lib.source(data, seq_len) if isinstance(data, str) else data
  r = sweep.train_many(cfg, make_tx, seeds=tuple(seeds), learning_rates=learning_rates,
                       steps=steps, data=src, batch_size=batch_size, seq_len=seq_len,
                       eval_every=steps, eval_batches=4, eval_split=split)
  val = r.val_loss[..., -1]  # (n_lr, n_seeds)
  ended = ended_diverged(val, cfg.vocab_size)
  final = np.where(ended, np.inf, val)
  best = int(np.argmin(final.mean(1)))
  per_seed, params = {}, {}
  for j, seed in enumerate(seeds):
    p = _index(r.params, best, j)
    m = {"loss": float(val[best, j]), "diverged": float(ended[best, j]),
         "spiked": float(r.diverged[best, j] and not ended[best, j])}
    if exact_match:
      m.update(task_scores(p, cfg, src, seed, n_batches=em_batches, batch_size=batch_size,
                           split=split))
    per_seed[seed], params[seed] = m, p
  return {"per_seed": per_seed, "lr": learning_rates[best], "params": params,
          "val_loss_grid": val.tolist()}


def tune_rate(cfg: transformer.Config, *, tuning_seeds, grid, extend: int = 0,
              **train_kwargs) -> dict:
  """An arm's rate chosen on `tuning_seeds` over `grid` (`train_arm`'s rule); nothing reported.

  The lowest mean final loss over the tuning seeds among rates that did not end diverged on
  any seed wins (`experiments.lab.edge.Search`). With one rate in `grid` (quick runs) nothing
  is trained and that rate is returned. With `extend > 0` (the edge rule of issue 38) a best
  rate at an edge of the geometric `grid` runs one more rate a step of its ratio beyond that
  edge, up to `extend` times; the record says whether the rate chosen still sits at an edge
  (`at_edge`: the claim's control then fails).

  Returns:
    The one tuning record, `edge.Tuned.to_dict()`: `learning_rate`, `grid` (the rates run,
    increasing), `losses` (mean final loss per rate over the tuning seeds), `losses_by_seed`,
    `excluded` (per rate: ended diverged on some seed), `seeds`, `at_edge`, ...; for a grid of
    one rate, the record of a fixed rate (`edge.untuned`: no `losses`).

  Example:
    >>> from experiments.lab.attention_arms import base_config, tune_rate
    >>> t = tune_rate(base_config(d_model=16), tuning_seeds=(100,), grid=(1e-4, 2e-4), extend=1,
    ...               data="stdlib", steps=2, batch_size=2, seq_len=8)
    >>> t["grid"], t["at_edge"]  # 2e-4 won, so 4e-4 ran and won too
    ([0.0001, 0.0002, 0.0004], True)
  """
  grid = tuple(grid)
  if len(grid) == 1:
    return edge.untuned(grid[0]).to_dict()
  if not tuning_seeds:
    raise ValueError(f"tune_rate: a grid {grid} needs tuning seeds. Fix: pass e.g. "
                     "tuning_seeds=(100,), or a grid of one rate.")
  kw = {k: v for k, v in train_kwargs.items()
        if k not in ("exact_match", "em_batches", "split")}  # tuning reads `val` only
  seeds = tuple(tuning_seeds)
  by_rate: dict[float, np.ndarray] = {}
  search = edge.Search(grid, extend=extend, name="tune_rate")
  for rates in search:
    val = np.asarray(train_arm(cfg, seeds, learning_rates=tuple(rates), **kw)["val_loss_grid"])
    by_rate.update(zip(rates, val, strict=True))
    search.record(val.mean(1), ended_diverged(val, cfg.vocab_size).any(1))
  t = search.tuned()
  return dataclasses.replace(
      t, losses=tuple(float(v) for v in t.losses), seeds=seeds,
      losses_by_seed=tuple(tuple(float(v) for v in by_rate[lr]) for lr in t.grid)).to_dict()


def tuned_arm(cfg: transformer.Config, seeds, *, tuning_seeds, grid, **train_kwargs) -> dict:
  """The arm's rate chosen on `tuning_seeds` (`tune_rate`), then the reported `seeds` at it.

  Args:
    cfg: the arm's model.
    seeds: the reported seeds (they choose nothing).
    tuning_seeds: the seeds the rate is chosen on; disjoint from `seeds`.
    grid: candidate rates (one rate: nothing is tuned).
    **train_kwargs: `data`, `steps`, `batch_size`, `seq_len`, `exact_match`, `em_batches`,
      `split` of `train_arm` (`split` applies to the reported runs only).

  Returns:
    `train_arm`'s dict for `seeds` at the chosen rate, plus `tune_rate`'s record (`"tuning"`).
  """
  overlap = set(seeds) & set(tuning_seeds)
  if overlap:
    raise ValueError(f"tuned_arm: seeds {sorted(overlap)} both tune and report. Fix: tune on "
                     "seeds that are never reported (e.g. 100).")
  rate = tune_rate(cfg, tuning_seeds=tuning_seeds, grid=grid, **train_kwargs)
  out = train_arm(cfg, tuple(seeds), learning_rates=(rate["learning_rate"],), **train_kwargs)
  return {**out, "tuning": rate}
