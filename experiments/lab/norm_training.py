"""Training with and without a norm, read for conditioning: rates, divergence, `κ_eff` over time.

The training side of the `layernorm-condition` claim: one optimizer (`make_tx_factory`: AdamW,
cosine decay, no warm-up, no clipping, so nothing but the norm keeps a run stable), what counts
as a run that ended diverged (`ended_diverged`, `end_loss`), the tuned and stress rates
(`tune_arm`, with the edge rule; `stress_rate`), and `track`, which trains the seeds and reads
the effective condition number of the normalized projection inputs (`NORMED`) at every
evaluation (`input_conditions`, `kappa_ceiling`, `kappa_max`, `seed_metrics`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import data
from experiments.lab import edge, stability
from experiments.lab.tuning import ended_diverged
from experiments.train import sweep
from experiments.train.step import adamw

EPS_F32 = float(jnp.finfo(jnp.float32).eps)
NORMED = ("attn_in", "ffn_in")  # the inputs a pre-norm produces: what the claim is about


def make_tx_factory(steps: int):
  """`make_tx(learning_rate)`: AdamW, cosine decay to 10%, no warm-up, no clipping.

  Example:
    >>> from experiments.lab.norm_training import make_tx_factory
    >>> tx = make_tx_factory(10)(learning_rate=1e-2)
  """
  unit = optax.cosine_decay_schedule(1.0, max(steps, 1), 0.1)
  return lambda learning_rate: adamw(lambda c: learning_rate * unit(c), weight_decay=0.1,
                                     decay="all")


def end_loss(final_loss, vocab_size: int) -> np.ndarray:
  """The final loss, with a run that ended diverged counted as its initial loss `ln V`.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.norm_training import end_loss
    >>> end_loss(np.array([2.5, np.nan]), 256).round(3).tolist()
    [2.5, 5.545]
  """
  x = np.asarray(final_loss, np.float64)
  return np.where(ended_diverged(x, vocab_size), math.log(vocab_size), x)


def stress_rate(grid, none_ended_diverged) -> tuple[float, bool]:
  """The smallest grid rate at which the un-normed model ended diverged (else the largest).

  Returns:
    `(rate, found)`; `found` is False when no rate diverged (the largest is used).

  Example:
    >>> from experiments.lab.norm_training import stress_rate
    >>> stress_rate((1e-3, 1e-2, 1e-1, 1.0), [False, False, True, True])
    (0.1, True)
  """
  hit = np.flatnonzero(np.asarray(none_ended_diverged, bool))
  if hit.size:
    return float(grid[int(hit[0])]), True
  return float(grid[-1]), False


def input_conditions(inter, center: bool = True,
                     names=NORMED) -> dict[str, dict[str, np.ndarray]]:
  """`stability.input_conditions` of sown `intermediates`, per layer, as numpy arrays.

  Args:
    inter: the model's `intermediates` collection (leading axes, e.g. `(R, S)` from
      `train_many`, then the layer axis `L`, then `B, T, width`).
    center: centre the rows first (`analysis.effective_condition`).
    names: the projection inputs to read (`stability.PROJECTION_INPUTS`).

  Returns:
    `{input: {"kappa": (..., L), "n_dropped": (..., L)}}` for each of `names`.
  """
  blocks = jax.tree.map(lambda x: x[0], inter["blocks"], is_leaf=lambda x: isinstance(x, tuple))
  conds = jax.device_get(stability.input_conditions(blocks, center=center, names=names))
  return {name: {"kappa": np.asarray(conds[name]["kappa_eff"], np.float64),
                 "n_dropped": np.asarray(conds[name]["n_dropped"])} for name in names}


def kappa_ceiling(n_rows: int, width: int) -> float:
  """The largest `κ_eff` float32 can report for `X (n_rows, width)`: `1/(max(N, D)·eps₃₂)`.

  Singular values below `max(N, D)·eps₃₂·σ_1` count as zeros (`analysis.default_rank_tol`), so a
  reading at this ceiling, with more values dropped, is an input that lost rank in float32.

  Example:
    >>> from experiments.lab.norm_training import kappa_ceiling
    >>> round(kappa_ceiling(16 * 128, 32))  # `layernorm-condition`: N = B·T rows, D = 32
    4096
  """
  return 1 / (max(n_rows, width) * EPS_F32)


def kappa_max(kappa) -> float:
  """Largest finite value (over evaluations, layers, inputs); NaN if there is none.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.norm_training import kappa_max
    >>> kappa_max(np.array([[2.0, 30.0], [np.nan, np.inf]]))
    30.0
  """
  k = np.asarray(kappa, np.float64)
  k = k[np.isfinite(k)]
  return float(k.max()) if k.size else math.nan


def tune_arm(cfg, grid, *, seed: int, steps: int, batch_size: int, seq_len: int,
             eval_batches: int, extend: int = 0) -> dict:
  """Every rate of `grid` on the tuning seed (final loss only); the arm's tuned rate.

  The tuned rate has the lowest final validation loss among the runs that did not end
  diverged (`edge.tune`, the one tuner). The edge rule (issue 38): while it is the first or
  last rate run, one rate a step of the grid's ratio `grid[1] / grid[0]` beyond that edge is run
  too, at most `extend` times. `tuning.tune_on_seeds` states the same rule but trains under its
  warm-up schedule (`tuning.on_budget`); this arm's runs have none (`make_tx_factory`), so
  the tuning runs use that optimizer, as the reported runs do.

  Returns:
    The one tuning record, `edge.Tuned.to_dict()` (`grid`: the rates run, increasing,
    extensions included; `losses`, `excluded`: ended diverged, `spiked`, per rate; `at_edge`:
    the tuned rate is the first or last of that grid, ...); raises `ValueError` when every
    rate ended diverged.

  Example:
    >>> import transformer
    >>> from experiments.lab.norm_training import tune_arm
    >>> t = tune_arm(transformer.preset("tiny", d_model=16, n_layers=1), (1e-4, 3e-4), seed=100,
    ...              steps=4, batch_size=2, seq_len=8, eval_batches=1, extend=1)
    >>> len(t["grid"]), t["learning_rate"] in t["grid"]  # the best of two is at an edge: +1
    (3, True)
  """
  if len(grid) < 2:
    raise ValueError(f"tune_arm: grid={tuple(grid)} must hold two or more increasing rates "
                     "(its ratio is the edge rule's step). Fix: e.g. (1e-3, 3e-3, 1e-2, 3e-2).")
  flagged: dict[float, bool] = {}

  def run(rates):
    r = sweep.train_many(cfg, make_tx_factory(steps), seeds=(seed,), learning_rates=tuple(rates),
                         steps=steps, data=data.text_source("stdlib", seq_len),
                         batch_size=batch_size, seq_len=seq_len, eval_every=steps,
                         eval_batches=eval_batches)
    val = r.val_loss[:, 0, -1]
    flagged.update({lr: bool(r.diverged[k, 0]) for k, lr in enumerate(rates)})
    return val, ended_diverged(val, cfg.vocab_size)

  return edge.on_one_seed(edge.tune(run, grid, extend=extend, name="tune_arm"), seed, flagged)


def track(cfg, seeds, learning_rates, *, steps: int, batch_size: int, seq_len: int,
          eval_every: int, eval_batches: int) -> dict:
  """Trains at `learning_rates` × `seeds`, reading `κ_eff` of the normalized inputs each eval.

  Returns:
    `kappa_ERSL` per input of `NORMED` (NaN where the validation loss is non-finite),
    `n_dropped_ERSL` (largest over inputs), `val_RSE`, `steps_E`, `final_RS`,
    `ended_diverged_RS`, `spiked_RS`.
  """
  readings: list[dict] = []
  r = sweep.train_many(cfg, make_tx_factory(steps), seeds=seeds,
                       learning_rates=tuple(learning_rates), steps=steps,
                       data=data.text_source("stdlib", seq_len), batch_size=batch_size,
                       seq_len=seq_len, eval_every=eval_every, eval_batches=eval_batches,
                       callback=lambda step, params, inter: readings.append(
                           input_conditions(inter)))
  finite_RSE = np.isfinite(r.val_loss)
  kappa = {name: np.stack([h[name]["kappa"] for h in readings]) for name in NORMED}
  for name in NORMED:  # a model whose loss is non-finite has no input to condition
    kappa[name] = np.where(np.moveaxis(finite_RSE, -1, 0)[..., None], kappa[name], np.nan)
  final = r.val_loss[:, :, -1]
  bad = ended_diverged(final, cfg.vocab_size)
  return {"kappa_ERSL": kappa, "val_RSE": r.val_loss, "steps_E": np.asarray(r.steps),
          "n_dropped_ERSL": np.max([np.stack([h[n]["n_dropped"] for h in readings])
                                    for n in NORMED], axis=0),
          "final_RS": final, "ended_diverged_RS": bad, "spiked_RS": r.diverged & ~bad}


def seed_metrics(tr: dict, j: int, vocab_size: int) -> dict[str, float]:
  """One arm's metrics for seed index `j`: rate 0 of `tr` is the tuned one, rate 1 the stress."""
  m: dict[str, float] = {}
  for i, tag in enumerate(("tuned", "stress")):
    k = kappa_max([tr["kappa_ERSL"][n][:, i, j] for n in NORMED])
    m[f"kappa_{tag}"] = k
    m[f"log10_kappa_{tag}"] = math.log10(k) if k > 0 else math.nan
    for n in NORMED:
      m[f"{n}/kappa_{tag}"] = kappa_max(tr["kappa_ERSL"][n][:, i, j])
    m[f"kappa_{tag}_final"] = kappa_max([tr["kappa_ERSL"][n][-1, i, j] for n in NORMED])
    m[f"end_loss_{tag}"] = float(end_loss(tr["final_RS"][i, j], vocab_size))
    m[f"diverged_{tag}"] = float(tr["ended_diverged_RS"][i, j])
    m[f"spiked_{tag}"] = float(tr["spiked_RS"][i, j])
    m[f"n_dropped_{tag}"] = float(tr["n_dropped_ERSL"][:, i, j].max())
  return m
