"""Power iteration for the top singular triplet of a batch of matrices."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


def normalize(x, axis=-1):
  """`x / ‖x‖` along `axis`; a zero vector stays zero (no NaN)."""
  norm = jnp.linalg.norm(x, axis=axis, keepdims=True)
  return x / jnp.where(norm == 0, 1, norm)


class PowerResult(NamedTuple):
  """Top singular triplet estimate from `power_iteration`, per matrix of the batch.

  Attributes:
    sigma: `(...,)` `σ̂ = ‖W v‖ ≤ σ_max` (a lower bound: `v` is a unit vector).
    u: `(..., m)` `W v / σ̂`, so `W v = σ̂ u` exactly.
    v: `(..., n)` the unit right vector; carry it to warm-start the next call.
    bound: `(...,)` `‖Wᵀ u − σ̂ v‖ / √2 + min(m, n)·ε·σ̂`: some singular value `σ` of `W`
      (zero counted when `W` is not square) has `|σ − σ̂| ≤ bound`. The first term is the
      residual of the unit eigenvector estimate `[u; v]/√2` of `[[0, W], [Wᵀ, 0]]`
      (Krylov–Bogoliubov), the second covers rounding. It is `σ_max` unless `v` is nearly
      orthogonal to the top right singular vector.
    converged: `(...,)` bool, `bound ≤ tol · σ̂`.
  """

  sigma: jax.Array
  u: jax.Array
  v: jax.Array
  bound: jax.Array
  converged: jax.Array


def power_iteration(W: jax.Array, v: jax.Array | None = None, power_steps: int = 20, *,
                    tol: float = 1e-4) -> PowerResult:
  r"""Top singular value and vectors of `W` (`(..., m, n)`) by power iteration on `WᵀW`.

  .. math::
    u \leftarrow W v / \|W v\|, \quad v \leftarrow W^\top u / \|W^\top u\|, \quad
    \hat\sigma = \|W v\|

  The error in `σ̂` shrinks like `(σ₂/σ₁)^(2·power_steps)`: slowly when the top two singular
  values are close (Gaussian matrices), which `bound` and `converged` report. For a method
  that converges on small gaps use `transformer.linalg.lanczos_svd`.

  Args:
    W: matrices with leading batch axes.
    v: start vectors `(..., n)`; default a fixed normalized ones-plus-ramp vector (carry the
      returned `v` between calls to warm-start).
    power_steps: iterations (a fixed number; the loop does not stop early).
    tol: the relative tolerance of `converged`.

  Returns:
    `PowerResult(sigma, u, v, bound, converged)`.

  Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> W = jnp.asarray(np.diag([3.0, 1.0, 0.5]))
    >>> res = power_iteration(W, power_steps=20)
    >>> round(float(res.sigma), 4), bool(res.converged)
    (3.0, True)
  """
  if W.ndim < 2:
    raise ValueError(f"power_iteration: W must be a matrix or a batch of them, got {W.ndim=}.")
  n = W.shape[-1]
  if v is None:
    v = jnp.broadcast_to(1.0 + jnp.arange(n, dtype=W.dtype) / n, W.shape[:-2] + (n,))
  v = normalize(v.astype(W.dtype))

  def body(_, v):
    u = normalize(jnp.einsum("...mn,...n->...m", W, v))
    return normalize(jnp.einsum("...mn,...m->...n", W, u))

  v = jax.lax.fori_loop(0, power_steps, body, v)
  Wv = jnp.einsum("...mn,...n->...m", W, v)
  sigma = jnp.linalg.norm(Wv, axis=-1)
  u = normalize(Wv)
  r = jnp.einsum("...mn,...m->...n", W, u) - sigma[..., None] * v
  rounding = min(W.shape[-2:]) * jnp.finfo(W.dtype).eps * sigma
  bound = jnp.linalg.norm(r, axis=-1) / math.sqrt(2) + rounding
  return PowerResult(sigma, u, v, bound, bound <= tol * sigma)
