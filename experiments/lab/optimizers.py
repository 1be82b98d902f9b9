"""The optimizer claims' arms (`muon`, `condition-lr`, `orthogonal-heads`) and what they read
back from a trained arm.

The arm builders live in `experiments.train.arms`, beside the step they feed, and are
re-exported here (the same objects): `adamw_arm`, `muon_arm`, `orthogonal_heads_arm`,
`condition_arm`, `frozen_condition_arm`, `lr_cut_arm` (`make_tx(learning_rate)`), and the
two-rate `split_adamw_arm`, `optim_muon_arm` (`make_tx(hidden_rate, other_rate)`, tuned apart
by `experiments.lab.tuning.tune_apart`). This module adds

- `condition_multipliers`: the rate multipliers `scale_by_condition` applied, read from an
  optimizer state (the size of the plain learning-rate cut of the `condition-lr` control);
- `hidden_condition_multipliers`: the same multipliers, exact (SVD), from the params.

Tuning on a rate grid lives in `experiments.lab.tuning`, update statistics in
`experiments.lab.updates`, head redundancy in `analysis.heads`.

Example:
  >>> import jax, optax, transformer
  >>> from experiments.lab import optimizers
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> make_tx = optimizers.muon_arm(n_heads=cfg.n_heads)
  >>> tx = optax.inject_hyperparams(make_tx)(learning_rate=1e-3)
  >>> state = tx.init(params)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import optim
from experiments.train.arms import (
    HIDDEN,
    NEVER,
    MakeTx,
    MakeTx2,
    adamw_arm,
    condition_arm,
    frozen_condition_arm,
    lr_cut_arm,
    muon_arm,
    optim_muon_arm,
    orthogonal_heads_arm,
    split_adamw_arm,
)

__all__ = ["HIDDEN", "NEVER", "MakeTx", "MakeTx2", "adamw_arm", "condition_arm",
           "condition_multipliers", "frozen_condition_arm", "hidden_condition_multipliers",
           "lr_cut_arm", "muon_arm", "optim_muon_arm", "orthogonal_heads_arm", "split_adamw_arm"]


# ------------------------------------------------------------------ read from a trained arm


def condition_multipliers(opt_state, alpha: float = 0.5, kappa_ref: float = 10.0) -> jax.Array:
  r"""The multipliers `m(κ̂)` that the `scale_by_condition` in `opt_state` applied last update.

  Finds every `optim.ConditionState` in the state (inside chains, masks, partitions or
  `inject_hyperparams`), and concatenates `condition_multiplier(κ̂)` of each chosen matrix
  (one per layer of a stacked weight), in tree order, on the last axis.

  Args:
    opt_state: an optimizer state holding a `ConditionState`; leading axes of its leaves
      (runs of a vmapped sweep) are kept.
    alpha: the arm's `α`.
    kappa_ref: the arm's `κ_ref`.

  Returns:
    `(..., n_matrices)`; `.mean(-1)` is the average multiplier of a run, the `factor` of
    `lr_cut_arm`.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.optimizers import condition_arm, condition_multipliers
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> condition_multipliers(condition_arm()(1e-3).init(params)).shape  # 2 layers × 6
    (12,)
  """
  states = [s for s in jax.tree.leaves(opt_state,
                                       is_leaf=lambda x: isinstance(x, optim.ConditionState))
            if isinstance(s, optim.ConditionState)]
  if not states:
    raise ValueError("condition_multipliers: no optim.ConditionState in opt_state; pass the state "
                     "of an optimizer built with optim.scale_by_condition (e.g. condition_arm)")
  kappas = [k for s in states for k in jax.tree.leaves(s.kappa)]
  return optim.condition_multiplier(jnp.concatenate(kappas, -1), alpha, kappa_ref)


def hidden_condition_multipliers(params, alpha: float = 0.5,
                                 kappa_ref: float = 10.0) -> np.ndarray:
  r"""`condition_multiplier(σ_max/σ_min)` of every hidden matrix of `params`, exact (SVD).

  What `scale_by_condition` applies when its estimate has converged; one value per matrix
  (per layer of a stacked weight), in tree order.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.optimizers import hidden_condition_multipliers
    >>> p = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> hidden_condition_multipliers(p).shape  # 2 layers × 6 hidden matrices
    (12,)
  """
  chosen = HIDDEN(params)
  kappas = []
  for w, m in zip(jax.tree.leaves(params), jax.tree.leaves(chosen), strict=True):
    if m:
      s = np.linalg.svd(np.asarray(w, np.float64).reshape((-1,) + w.shape[-2:]),
                        compute_uv=False)
      kappas.append(s[:, 0] / np.maximum(s[:, -1], np.finfo(np.float64).tiny))
  kappa = np.concatenate(kappas)
  return np.asarray(optim.condition_multiplier(jnp.asarray(kappa), alpha, kappa_ref), np.float64)
