"""Power-law fits of eigenvalue tails: Clauset–Shalizi–Newman (as WeightWatcher) and Hill.

Heavy-tailed self-regularization (Martin & Mahoney) reads the tail of a layer's empirical
spectral density `ρ(λ) ∝ λ^{-α}` (`λ` the eigenvalues `σ²` of `WᵀW`): `α` in 2–6 for
well-trained layers, larger for random ones. The literature's numbers come from
WeightWatcher, which fits a continuous power law by maximum likelihood with the threshold
`xmin` chosen by the Kolmogorov–Smirnov distance (Clauset, Shalizi & Newman 2009); that is
`power_law_fit(eigs, method="clauset")`. `method="hill"` keeps the library's earlier
estimator (a fixed tail fraction, `analysis.power_law_alpha`).

Everything is jit-able and treats leading axes as a batch of spectra.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from analysis.inputs import check_choice, check_int, check_range

Method = Literal["clauset", "hill"]


def power_law_alpha(eigs: jax.Array, tail: float = 0.5) -> jax.Array:
  """Exponent `α` of a power-law density `ρ(λ) ∝ λ^{-α}` fitted to the largest eigenvalues.

  The estimator is Hill's maximum-likelihood estimator on the top `k = ⌈tail · N⌉` values
  `λ_(1) ≥ … ≥ λ_(k)` (threshold `λ_min = λ_(k)`):

  .. math::
    \\hat\\alpha = 1 + \\frac{k - 1}{\\sum_{i<k} \\ln(\\lambda_{(i)} / \\lambda_{(k)})}.

  Heavy-tailed self-regularization (Martin & Mahoney) reads `α ≲ 4` as a heavy tail; random
  (Marchenko–Pastur) matrices give large `α`.

  Args:
    eigs: `(..., N)` positive eigenvalues (any order), e.g. `σ²` of a weight matrix.
    tail: fraction of the largest values used for the fit.

  Returns:
    `(...,)` the estimated exponent `α`.

  References:
    Hill, "A simple general approach to inference about the tail of a distribution" (1975);
    Martin & Mahoney, "Implicit self-regularization in deep neural networks" (2021).
  """
  check_range(tail, "tail", "analysis.power_law_alpha", low=0, high=1, low_open=True, example="0.5")
  N = eigs.shape[-1]
  k = max(2, int(np.ceil(tail * N)))
  top = jnp.sort(eigs, axis=-1)[..., ::-1][..., :k]
  tiny = jnp.finfo(top.dtype).tiny
  logs = jnp.log(jnp.maximum(top[..., :-1], tiny)) - jnp.log(jnp.maximum(top[..., -1:], tiny))
  return 1 + (k - 1) / jnp.maximum(jnp.sum(logs, -1), tiny)


def _ks(log_x: jax.Array, i, alpha, n_tail) -> jax.Array:
  """`max_{j ≥ i} |F(x_j) − (j − i)/n|`, `F(x) = 1 − (x/x_i)^{1−α}`, for ascending `x`."""
  j = jnp.arange(log_x.shape[-1])
  model = 1 - jnp.exp((1 - alpha) * (log_x - log_x[i]))
  empirical = (j - i) / n_tail
  return jnp.max(jnp.where(j >= i, jnp.abs(model - empirical), 0))


def _clauset(x: jax.Array, chunk: int) -> dict[str, jax.Array]:
  """The fit of one spectrum `x (N,)`."""
  N = x.shape[-1]
  x = jnp.sort(x)
  valid = jnp.isfinite(x) & (x > 0)
  # Logs relative to the smallest valid value keep the suffix sums small (float32).
  first = jnp.argmax(valid)
  log_x = jnp.where(valid, jnp.log(jnp.where(valid, x, 1)), 0)
  log_x = jnp.where(valid, log_x - log_x[first], 0)
  i = jnp.arange(N)
  n_tail = (N - i).astype(x.dtype)
  suffix = jnp.cumsum(log_x[::-1])[::-1]  # Σ_{j ≥ i} ln x_j
  spread = suffix - n_tail * log_x  # Σ_{j ≥ i} ln(x_j / x_i)
  alpha = 1 + n_tail / jnp.where(spread > 0, spread, 1)
  candidate = valid & (i < N - 1) & (spread > 0)
  ks = jax.lax.map(lambda i: _ks(log_x, i, alpha[i], n_tail[i]), i, batch_size=chunk)
  best = jnp.argmin(jnp.where(candidate, ks, jnp.inf))
  ok = jnp.any(candidate)
  nan = jnp.asarray(jnp.nan, x.dtype)
  return {"alpha": jnp.where(ok, alpha[best], nan), "xmin": jnp.where(ok, x[best], nan),
          "ks_distance": jnp.where(ok, ks[best], nan),
          "n_tail": jnp.where(ok, N - best, 0),
          "sigma": jnp.where(ok, (alpha[best] - 1) / jnp.sqrt(n_tail[best]), nan)}


def _hill(x: jax.Array, tail: float) -> dict[str, jax.Array]:
  N = x.shape[-1]
  k = max(2, int(np.ceil(tail * N)))
  x = jnp.sort(x)
  i = N - k
  alpha = power_law_alpha(x, tail)
  log_x = jnp.log(jnp.maximum(x, jnp.finfo(x.dtype).tiny))
  return {"alpha": alpha, "xmin": x[i], "ks_distance": _ks(log_x, i, alpha, k),
          "n_tail": jnp.asarray(k), "sigma": (alpha - 1) / np.sqrt(k)}


def power_law_fit(eigs: jax.Array, method: Method = "clauset", *, tail: float = 0.5,
                  chunk: int = 256) -> dict[str, jax.Array]:
  r"""Exponent `α` and threshold `xmin` of a power-law tail `ρ(λ) ∝ λ^{-α}, λ ≥ xmin`.

  `method="clauset"`: for every candidate `xmin = λ_(i)` (ascending order, all but the
  largest) the continuous maximum-likelihood exponent of the `n = N − i` values `λ ≥ xmin`,

  .. math:: \hat\alpha(x_{\min}) = 1 + n \Big/ \sum_{\lambda_j \ge x_{\min}}
     \ln(\lambda_j / x_{\min}),

  and the Kolmogorov–Smirnov distance `D = max_j |F(λ_j) − (j − i)/n|` between the fitted
  CDF `F(λ) = 1 − (λ/xmin)^{1−α̂}` and the empirical one; the `xmin` with the smallest `D` wins.
  This is the estimator of Clauset, Shalizi & Newman and of WeightWatcher's default fit
  (`pl_package="ww"`). `O(N²)` work in chunks of `chunk` candidates (`O(chunk · N)` memory).
  Values `≤ 0` (or not finite) are left out.

  `method="hill"`: the top `⌈tail · N⌉` values, `xmin` their smallest, `α` by Hill's estimator
  (`analysis.power_law_alpha`), `D` at that `xmin`.

  Args:
    eigs: `(..., N)` eigenvalues (any order), e.g. `σ²` of a weight matrix.
    method: `"clauset"` or `"hill"`.
    tail: the tail fraction of `"hill"`.
    chunk: candidates per vectorized block of `"clauset"`.

  Returns:
    A dict of `(...,)` arrays: `alpha`, `xmin`, `ks_distance`, `n_tail` (values in the fitted
    tail) and `sigma = (α − 1)/√n_tail` (the estimator's standard error). `"clauset"` gives
    NaN (and `n_tail = 0`) for a spectrum with fewer than two distinct positive values.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> u = jax.random.uniform(jax.random.key(0), (4000,))
    >>> lam = (1 - u) ** (-1 / 1.5)  # a power law with α = 2.5 above xmin = 1
    >>> fit = power_law_fit(lam)
    >>> bool(abs(fit["alpha"] - 2.5) < 4 * fit["sigma"])
    True

  References:
    Clauset, Shalizi & Newman, "Power-law distributions in empirical data" (2009);
    Martin & Mahoney, "Heavy-tailed universality predicts trends in test accuracies for very
    large pre-trained deep neural networks" (2020).
  """
  check_range(tail, "tail", "analysis.power_law_fit", low=0, high=1, low_open=True, example="0.5")
  check_choice(method, ("clauset", "hill"), "method", "analysis.power_law_fit")
  check_int(chunk, 1, "chunk", "analysis.power_law_fit")
  if eigs.ndim < 1 or eigs.shape[-1] < 2:
    raise ValueError(f"power_law_fit: need eigs of shape (..., N) with N >= 2, got "
                     f"{eigs.shape=}.")
  if method not in ("clauset", "hill"):
    raise ValueError(f"power_law_fit: method={method!r} is unknown. Fix: use 'clauset' or "
                     "'hill'.")
  x = jnp.asarray(eigs)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  return _fit(x, method, tail, chunk)


@functools.partial(jax.jit, static_argnames=("method", "tail", "chunk"))
def _fit(x: jax.Array, method: Method, tail: float, chunk: int) -> dict[str, jax.Array]:
  """`power_law_fit`, compiled once per shape (eager calls would dispatch op by op)."""
  one = (lambda v: _clauset(v, chunk)) if method == "clauset" else (lambda v: _hill(v, tail))
  out = jax.vmap(one)(x.reshape((-1, x.shape[-1])))
  return {k: v.reshape(x.shape[:-1]) for k, v in out.items()}
