"""Training with and without a spectral cap on the hidden matrices: rates, divergence, the
logit certificate.

The training side of the `eigenvalue-constrained` claim: one optimizer (`make_tx_factory`:
AdamW, cosine decay, no warm-up, no clipping, optionally followed by `optim.spectral_cap` by
exact SVD), the tuned rate of an arm on the tuning seeds under the edge rule (`tune_arm`,
through `norm_training.tune_fixed`), and `track`, which trains the reported seeds at given rates
(evaluated on the split the verdict reads) and reads, at every
evaluation, the largest attention logit against its certified bound (`analysis.logit_bound`),
and at the end the largest singular value of the hidden matrices (`sigma_max_hidden`).
Divergence is read as `layernorm-condition` reads it (`norm_training.end_loss`,
`tuning.ended_diverged`): a run *ends* diverged when its final validation loss is non-finite
or above `ln V`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

import analysis
import optim
from experiments import data
from experiments.lab.norm_training import end_loss, tune_fixed
from experiments.lab.tuning import ended_diverged
from experiments.train import sweep
from experiments.train.step import adamw

HIDDEN = ("w_q", "w_k", "w_v", "w_o", "w_1", "w_2", "w_gate")  # what the cap acts on


def make_tx_factory(steps: int, cap_names: tuple[str, ...] | None, cap: float = 1.0):
  """`make_tx(learning_rate)`: AdamW (cosine to 10%, no warm-up, no clipping) + optional cap.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from experiments.lab.cap_training import make_tx_factory
    >>> tx = make_tx_factory(10, ("w_q",))(learning_rate=1e-2)
    >>> params = {"w_q": jnp.eye(4) * 3.0}
    >>> u, _ = tx.update({"w_q": jnp.zeros((4, 4))}, tx.init(params), params)
    >>> round(float(jnp.linalg.norm(optax.apply_updates(params, u)["w_q"], 2)), 4)
    1.0
  """
  unit = optax.cosine_decay_schedule(1.0, max(steps, 1), 0.1)

  def make_tx(learning_rate):
    tx = adamw(lambda c: learning_rate * unit(c), weight_decay=0.1, decay="all")
    if cap_names is None:
      return tx
    return optax.chain(tx, optim.spectral_cap(cap, mask=optim.select(roles=None,
                                                                     names=cap_names),
                                              method="svd"))

  return make_tx


def _kw(seq_len: int, batch_size: int, steps: int, eval_batches: int) -> dict:
  return {"data": data.text_source("stdlib", seq_len), "batch_size": batch_size,
          "seq_len": seq_len, "steps": steps, "eval_batches": eval_batches}


def tune_arm(cfg, make_tx, grid, *, seeds, steps: int, batch_size: int, seq_len: int,
             eval_batches: int, extend: int = 0) -> dict:
  """Every rate of `grid` on every tuning seed (final `val` loss only); the arm's tuned rate.

  The tuned rate has the lowest mean final validation loss over `seeds` among the rates no
  seed ended diverged at (`norm_training.tune_fixed`, around `edge.Search`, the one tuner); while
  it is the first or last rate run, one rate a step of the grid's ratio beyond that edge is run
  too, at most `extend` times.

  Returns:
    The one tuning record, `edge.Tuned.to_dict()` (`grid`: the rates run, increasing;
    `losses` (mean over seeds), `losses_by_seed`, `excluded`: ended diverged on a seed,
    `spiked`, per rate; `at_edge`, ...); raises `ValueError` when every rate ended diverged.

  Example:
    >>> import transformer
    >>> from experiments.lab.cap_training import make_tx_factory, tune_arm
    >>> t = tune_arm(transformer.preset("tiny", d_model=16, n_layers=1),
    ...              make_tx_factory(4, None), (1e-4, 3e-4), seeds=(110, 111), steps=4,
    ...              batch_size=2, seq_len=8, eval_batches=1, extend=1)
    >>> len(t["grid"]), t["learning_rate"] in t["grid"]  # the best of two is at an edge: +1
    (3, True)
  """
  return tune_fixed(cfg, make_tx, grid, seeds=seeds, steps=steps, batch_size=batch_size,
                    seq_len=seq_len, eval_batches=eval_batches, extend=extend,
                    name="cap_training.tune_arm")


def sigma_max_hidden(params, names=HIDDEN) -> np.ndarray:
  """Largest singular value over the named hidden matrices, per run: leading axes kept.

  Every leaf whose last path key is in `names` is a stack `(..., L, d_in, d_out)`; the
  leading axes are the runs' (`train_many`'s `(R, S)`).

  Example:
    >>> import numpy as np
    >>> from experiments.lab.cap_training import sigma_max_hidden
    >>> p = {"blocks": {"attn": {"w_q": np.stack([np.eye(3)[None] * 2, np.eye(3)[None]])}}}
    >>> sigma_max_hidden(p).tolist()  # two runs, one layer each
    [2.0, 1.0]
  """
  tops = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if getattr(path[-1], "key", None) in names:
      x = np.asarray(leaf, np.float64)
      s = np.linalg.svd(np.where(np.isfinite(x), x, 0.0), compute_uv=False)[..., 0]
      s = np.where(np.isfinite(x).all((-1, -2)), s, np.inf)
      tops.append(s.max(-1))  # over layers
  return np.max(tops, axis=0)


def track(cfg, make_tx, seeds, learning_rates, *, steps: int, batch_size: int, seq_len: int,
          eval_every: int, eval_batches: int, eval_split: str = "val") -> dict:
  """Trains at `learning_rates` × `seeds`, reading the logit certificate at every evaluation
  on the first batch of `eval_split` (`val`, or `test` for a verdict's reported runs).

  Returns:
    `val_RSE`, `steps_E`, `final_RS`, `ended_diverged_RS`, `spiked_RS` (flagged by
    `train_many` but not ended diverged), `ratio_ERS` (largest measured logit / certified
    bound over layers and heads; NaN where non-finite), `sigma_max_RS` (largest singular value
    of the hidden matrices at the end).
  """
  ratios = []
  bound_fn = jax.jit(jax.vmap(jax.vmap(lambda p: analysis.logit_bound(p, cfg))))

  def callback(step, params, inter):
    del step
    measured_RSLH = analysis.max_logit(inter["blocks"]["attn"]["scores"][0])
    ratios.append(np.asarray(jnp.max(measured_RSLH / bound_fn(params), axis=(-1, -2))))

  r = sweep.train_many(cfg, make_tx, seeds=seeds, learning_rates=tuple(learning_rates),
                       eval_every=eval_every, callback=callback, eval_split=eval_split,
                       **_kw(seq_len, batch_size, steps, eval_batches))
  final = r.val_loss[:, :, -1]
  bad = ended_diverged(final, cfg.vocab_size)
  ratio = np.stack(ratios).astype(np.float64)
  return {"val_RSE": r.val_loss, "steps_E": np.asarray(r.steps), "final_RS": final,
          "ended_diverged_RS": bad, "spiked_RS": r.diverged & ~bad,
          "ratio_ERS": np.where(np.isfinite(ratio), ratio, np.nan),
          "sigma_max_RS": sigma_max_hidden(r.params)}


def seed_metrics(tr: dict, rates: dict[str, int], j: int, vocab_size: int) -> dict[str, float]:
  """One arm's metrics for seed index `j`; `rates` maps a tag to its rate index in `tr`.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.cap_training import seed_metrics
    >>> tr = {"final_RS": np.array([[2.0], [np.nan]]), "ended_diverged_RS": np.array(
    ...     [[False], [True]]), "spiked_RS": np.zeros((2, 1), bool), "ratio_ERS": np.full(
    ...     (3, 2, 1), 0.5), "sigma_max_RS": np.ones((2, 1))}
    >>> m = seed_metrics(tr, {"tuned": 0, "stress": 1}, 0, 256)
    >>> m["end_loss_tuned"], round(m["end_loss_stress"], 3), m["diverged_stress"]
    (2.0, 5.545, 1.0)
  """
  m: dict[str, float] = {}
  for tag, i in rates.items():
    m[f"end_loss_{tag}"] = float(end_loss(tr["final_RS"][i, j], vocab_size))
    m[f"diverged_{tag}"] = float(tr["ended_diverged_RS"][i, j])
    m[f"spiked_{tag}"] = float(tr["spiked_RS"][i, j])
    ratio = tr["ratio_ERS"][:, i, j]
    m[f"cert_ratio_{tag}"] = float(np.nanmax(ratio)) if np.isfinite(ratio).any() else math.nan
    m[f"sigma_max_{tag}"] = float(tr["sigma_max_RS"][i, j])
  return m
