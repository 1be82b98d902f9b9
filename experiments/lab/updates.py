"""How far an update is from orthogonal: condition numbers and singular-value entropy.

The measurements of the optimizer claims' updates (`muon`, `orthogonal-heads`): Muon fixes
the singular-value entropy of every hidden-matrix update at 1; AdamW's is far lower.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from experiments.lab.optimizers import HIDDEN
from transformer.linalg import serial


def sv_entropy(W: jax.Array) -> jax.Array:
  r"""Normalized entropy of the energy spectrum of each matrix, in `[0, 1]`.

  .. math::
    p_i = \frac{\sigma_i^2}{\sum_j \sigma_j^2}, \qquad
    H = -\frac{1}{\ln r} \sum_{i=1}^{r} p_i \ln p_i, \qquad r = \min(d_\text{in}, d_\text{out})

  `1` exactly when all `r` singular values are equal (a multiple of a semi-orthogonal matrix:
  a Muon update), `0` for rank one. A zero matrix scores `0`.

  Args:
    W: `(..., d_in, d_out)` with `min(d_in, d_out) ≥ 2`.

  Returns:
    `(...,)`.

  Example:
    >>> import jax.numpy as jnp
    >>> from experiments.lab.updates import sv_entropy
    >>> float(sv_entropy(jnp.eye(4)))
    1.0

  References:
    Liu et al., `Muon is Scalable for LLM Training`, 2025 (SVD entropy of updates).
  """
  r = min(W.shape[-2:])
  if W.ndim < 2 or r < 2:
    raise ValueError(f"sv_entropy: needs (..., m, n) matrices with min(m, n) >= 2, {W.shape=}")
  s2 = jnp.square(serial.svd(W, compute_uv=False))
  total = jnp.sum(s2, -1, keepdims=True)
  p = s2 / jnp.where(total > 0, total, 1)
  plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0)
  return -jnp.sum(plogp, -1) / np.log(r)


def update_statistics(updates, mask=HIDDEN) -> dict[str, jax.Array]:
  """Condition number and singular-value entropy of every chosen matrix of an update.

  Stacked leaves `(L, d_in, d_out)` count as `L` matrices. Scale-free, so an update and the
  parameter change it causes (`new − old`, learning rate included) score the same when no
  weight decay is applied. Jit-able (the mask is resolved from the tree's paths).

  Args:
    updates: an update (or gradient, or parameter-difference) pytree.
    mask: a bool pytree or `tree -> bool pytree` choosing the matrices; default the `hidden`
      role (`optim.select()`).

  Returns:
    Each `(n_matrices,)` in tree order: `condition_number` `σ_max/σ_min` (inf when
    `σ_min = 0`); `condition_number_p90` `σ_1/σ_k`, `k = ⌈0.9 r⌉`, which ignores the weakest
    tenth of the directions — the full κ of a gradient-based update is usually enormous
    whatever the optimizer, because inputs that went through LayerNorm are centred (the
    gradient of `w_q`, `w_k`, `w_v`, `w_1` has a null direction) and Newton–Schulz does not
    lift a null direction; and `sv_entropy`, the robust measure of orthogonality.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> from experiments.lab.updates import update_statistics
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> update_statistics(params)["sv_entropy"].shape  # 2 layers × 6 hidden matrices
    (12,)
  """
  chosen = mask(updates) if callable(mask) else mask
  leaves = [u for u, m in zip(jax.tree.leaves(updates), jax.tree.leaves(chosen), strict=True)
            if m]
  if not leaves:
    raise ValueError("update_statistics: the mask chose no leaf; pass mask= choosing matrices")
  kappa, kappa_p90, entropy = [], [], []
  for u in leaves:
    if u.ndim < 2:
      raise ValueError(f"update_statistics: chosen leaves must be matrices, got {u.shape=}")
    W = u.reshape((-1,) + u.shape[-2:]).astype(jnp.float32)
    s = serial.svd(W, compute_uv=False)
    kappa.append(s[:, 0] / s[:, -1])
    kappa_p90.append(s[:, 0] / s[:, math.ceil(0.9 * s.shape[-1]) - 1])
    entropy.append(sv_entropy(W))
  return {"condition_number": jnp.concatenate(kappa),
          "condition_number_p90": jnp.concatenate(kappa_p90),
          "sv_entropy": jnp.concatenate(entropy)}


def last_update_statistics(before, after, mask=HIDDEN) -> dict[str, float]:
  """Means over the hidden matrices of `update_statistics(after − before)` (one run's params).

  The full condition number is summarised by its median (it is often inf, see
  `update_statistics`), the others by their means.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.updates import last_update_statistics
    >>> p = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> q = transformer.init(transformer.preset("tiny"), jax.random.key(1))
    >>> 0 < last_update_statistics(p, q)["update_sv_entropy"] <= 1
    True
  """
  diff = jax.tree.map(lambda a, b: jnp.asarray(b, jnp.float32) - jnp.asarray(a, jnp.float32),
                      before, after)
  stats = {k: np.asarray(v, np.float64) for k, v in update_statistics(diff, mask).items()}
  return {"update_cond_p90": float(stats["condition_number_p90"].mean()),
          "update_cond_median": float(np.median(stats["condition_number"])),
          "update_sv_entropy": float(stats["sv_entropy"].mean())}


def last_update_entropy_float64(before, after, mask=HIDDEN) -> float:
  r"""`last_update_statistics`' singular-value entropy, computed in float64 (numpy SVD).

  The mean over the chosen matrices (a stacked leaf counts per layer) of the normalised
  entropy of `after − before` (`sv_entropy`'s formula), the difference and the SVD taken in
  float64, so no float32 rounding sits between the update and the number a verdict reads.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.updates import last_update_entropy_float64
    >>> w = {"blocks": {"attn": {"w_q": np.zeros((1, 4, 4))}}}
    >>> last_update_entropy_float64(w, {"blocks": {"attn": {"w_q": np.eye(4)[None]}}})
    1.0
  """
  chosen = mask(before) if callable(mask) else mask
  out = []
  for a, b, m in zip(jax.tree.leaves(before), jax.tree.leaves(after), jax.tree.leaves(chosen),
                     strict=True):
    if not m:
      continue
    d = np.asarray(b, np.float64) - np.asarray(a, np.float64)
    s2 = np.linalg.svd(d.reshape((-1,) + d.shape[-2:]), compute_uv=False) ** 2
    p = s2 / np.where(s2.sum(-1, keepdims=True) > 0, s2.sum(-1, keepdims=True), 1.0)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    out.append(-plogp.sum(-1) / np.log(s2.shape[-1]))
  if not out:
    raise ValueError("last_update_entropy_float64: the mask chose no leaf; pass mask= choosing "
                     "matrices")
  return float(np.concatenate(out).mean())
