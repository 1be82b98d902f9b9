"""Power iteration for the top singular triplet of a batch of matrices."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def normalize(x, axis=-1):
  """`x / ‖x‖` along `axis`; a zero vector stays zero (no NaN)."""
  norm = jnp.linalg.norm(x, axis=axis, keepdims=True)
  return x / jnp.where(norm == 0, 1, norm)


def power_iteration(W: jax.Array, v: jax.Array | None = None, steps: int = 20):
  """Top singular value and vectors of `W` (`(..., m, n)`) by power iteration on `WᵀW`.

  .. math::
    u \\leftarrow W v / \\|W v\\|, \\quad v \\leftarrow W^\\top u / \\|W^\\top u\\|, \\quad
    \\sigma = u^\\top W v

  Args:
    W: matrices with leading batch axes.
    v: start vectors `(..., n)`; default a fixed normalized ones-plus-ramp vector (carry the
      returned `v` between calls to warm-start, as `optim.spectral_cap` does).
    steps: iterations; the error in `sigma` shrinks like `(σ₂/σ₁)^(2·steps)`.

  Returns:
    `(sigma (...,), u (..., m), v (..., n))`, with `sigma >= 0` and `W v ≈ sigma u`.
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

  v = jax.lax.fori_loop(0, steps, body, v)
  Wv = jnp.einsum("...mn,...n->...m", W, v)
  sigma = jnp.linalg.norm(Wv, axis=-1)
  return sigma, normalize(Wv), v


def spectral_norm(W: jax.Array, steps: int = 50) -> jax.Array:
  """`‖W‖₂` of each matrix in the batch, by `power_iteration`."""
  return power_iteration(W, steps=steps)[0]
