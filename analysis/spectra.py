"""Spectra of weight matrices: singular values, ranks, heavy tails, the Marchenko–Pastur edge.

The power-law fits of the heavy tails live in `analysis.powerlaw` and are re-exported here.

Every function takes `W: (..., m, n)` and treats the leading axes as a batch (stacked layers,
heads). `spectrum` is jit-able and computes in the input dtype; the `*_certificate` functions
decide a yes/no property, so they run in float64 and return the tolerance that decided it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from analysis.inputs import as_matrix_batch, check_finite_weights, check_range
from analysis.powerlaw import power_law_alpha, power_law_fit
from transformer.linalg import serial
from transformer.linalg.axes import MatrixAxes, as_matrices, ask_matrix_axes
from transformer.linalg.checks import check_flag


def singular_values(W: jax.Array) -> jax.Array:
  """`σ_1 ≥ … ≥ σ_min(m,n)` of each matrix in the batch, `(..., min(m, n))`."""
  if W.ndim < 2:
    raise ValueError(f"singular_values: W must be a matrix or a batch of them, got {W.ndim=}.")
  return serial.svd(W, compute_uv=False)


def default_rank_tol(s: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """The numerical-rank tolerance `max(m, n) · eps · σ_1` (as `numpy.linalg.matrix_rank`)."""
  return max(shape[-2:]) * jnp.finfo(s.dtype).eps * s[..., 0]


def stable_rank(s: jax.Array) -> jax.Array:
  """`‖W‖_F² / ‖W‖₂² = Σ σ_i² / σ_1²` from singular values `s (..., r)`, sorted descending."""
  return jnp.sum(s * s, -1) / jnp.maximum(s[..., 0] ** 2, jnp.finfo(s.dtype).tiny)


def effective_rank(s: jax.Array) -> jax.Array:
  """`exp(H(p))` with `p_i = σ_i / Σ σ_j`: the entropy (Roy–Vetterli) effective rank.

  Equals `r` for `r` equal singular values and tends to 1 as one value dominates.

  References:
    Roy & Vetterli, "The effective rank: a measure of effective dimensionality" (2007).
  """
  p = s / jnp.maximum(jnp.sum(s, -1, keepdims=True), jnp.finfo(s.dtype).tiny)
  return jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0), -1))


def mp_edge(W: jax.Array) -> jax.Array:
  """Marchenko–Pastur bulk edge of the singular values for `W`'s shape and energy.

  If `W (m, n)` had i.i.d. entries of variance `s²`, its singular values would fill
  `[s|√m − √n|, s(√m + √n)]` as `m, n → ∞`. The scale is fitted from the energy,
  `s² = ‖W‖_F² / (m n)`, so outliers (learned structure) inflate it slightly and make the
  edge conservative.

  Returns:
    `(...,)` the upper edge `s (√m + √n)`.
  """
  m, n = W.shape[-2:]
  s2 = jnp.sum(jnp.square(W.astype(jnp.float32)), (-2, -1)) / (m * n)
  return (jnp.sqrt(s2) * (np.sqrt(m) + np.sqrt(n))).astype(W.dtype)


def spectrum(W: jax.Array, *, tol: float | None = None,
             matrix_axes: MatrixAxes | tuple | None = None,
             check_finite: bool = True) -> dict[str, jax.Array]:
  """The spectral summary of each matrix in a batch.

  Args:
    W: a matrix `(m, n)`, or an array of three or more axes whose matrix `matrix_axes` names.
    tol: absolute singular-value threshold of the numerical rank (a number `>= 0`); default
      `max(m, n) · eps · σ_1` in `W`'s dtype (returned as `rank_tol`).
    matrix_axes: which axes of `W` are its matrix (`transformer.linalg.MatrixAxes`, the type
      `optim.MatrixAxes` is; a plain pair `(reduction, output)` is read as one); every other
      axis is a batch axis, kept in order. A 2-D `W` needs none. An array of three or more axes
      needs it, as every `optim` transform asks for a foreign leaf's (only its author knows
      which axes are the matrix): `(-2, -1)` for stacked layers `(L, d_in, d_out)` such as
      ours, `MatrixAxes(0, (2, 3))` for a fused qkv kernel `(D, 3, H, Dh)` (three `(D, H·Dh)`
      matrices), `MatrixAxes(0, 2)` for an `nn.Einsum` kernel `(D, H, Dh)` (`H` per-head
      `(D, Dh)` ones).
    check_finite: raise (one line) when `W` holds a NaN or an infinity, before any SVD. Only
      outside `jit`: under `jit` the values are not known while tracing, the check is skipped,
      and a NaN comes out in the results (NaN singular values). `False` skips it (it costs one
      reduction and a host read).

  Returns:
    A dict of arrays with leading shape the batch shape (`W.shape[:-2]` by default):
    `singular_values (..., min(m,n))`,
    `condition_number` `σ_1/σ_min` (inf when `σ_min = 0`), `stable_rank`, `effective_rank`,
    `numerical_rank`, `rank_tol`, `alpha` (`power_law_alpha` of the eigenvalues `σ²` of
    `WᵀW`: Hill's estimator on the top half), `alpha_clauset` (`power_law_fit` of the same
    eigenvalues: the Clauset–Shalizi–Newman fit, WeightWatcher's `alpha`), `mp_edge`, and
    `n_outliers` (singular values above `mp_edge`).

  Raises:
    ValueError: (one line) when `W` is a dict or other tree (map `spectrum` over its leaves),
      has fewer than two axes or an integer dtype, holds NaN or inf (`check_finite`), has three
      or more axes and no `matrix_axes`, when `matrix_axes` is malformed or out of range, or
      `tol` is not a number `>= 0`.

  Example:
    >>> import jax, transformer
    >>> params = transformer.init(transformer.preset("tiny", n_layers=2), jax.random.key(0))
    >>> w_q = params["blocks"]["attn"]["w_q"]  # (L, d, H·dh): one matrix per layer
    >>> spec = spectrum(w_q, matrix_axes=(-2, -1))
    >>> spec["stable_rank"].shape
    (2,)
    >>> qkv = jax.random.normal(jax.random.key(1), (16, 3, 2, 8))  # (D, 3, H, Dh), fused
    >>> spectrum(qkv, matrix_axes=(0, (2, 3)))["singular_values"].shape  # 3 of (16, 16)
    (3, 16)
  """
  caller = "analysis.spectrum"
  W = as_matrix_batch(W, caller)
  check_range(tol, "tol", caller, low=0, allow_none=True, example="1e-6")
  check_flag(check_finite, "check_finite", caller)
  if check_finite:
    check_finite_weights(W, caller)
  if matrix_axes is None and W.ndim > 2:
    ask_matrix_axes([f"W {tuple(W.shape)}"], "", caller)
  if matrix_axes is not None:
    W, _ = as_matrices(W, matrix_axes, "analysis.spectrum's W")
  s = singular_values(W)
  rank_tol = default_rank_tol(s, W.shape) if tol is None else jnp.full(s.shape[:-1], tol, s.dtype)
  edge = mp_edge(W)
  return {
      "singular_values": s,
      "condition_number": s[..., 0] / s[..., -1],
      "stable_rank": stable_rank(s),
      "effective_rank": effective_rank(s),
      "numerical_rank": jnp.sum(s > rank_tol[..., None], -1),
      "rank_tol": rank_tol,
      "alpha": power_law_alpha(s * s),
      "alpha_clauset": power_law_fit(s * s)["alpha"],
      "mp_edge": edge,
      "n_outliers": jnp.sum(s > edge[..., None], -1),
  }


def eigenvalues(W: jax.Array) -> jax.Array:
  """Complex eigenvalues of square matrices `(..., n, n)`, sorted by decreasing modulus."""
  if W.ndim < 2 or W.shape[-1] != W.shape[-2]:
    raise ValueError(f"eigenvalues: need square matrices, got {W.shape=}.")
  lam = serial.eigvals(W)
  return jnp.take_along_axis(lam, jnp.argsort(-jnp.abs(lam), axis=-1), -1)


def factored_singular_values(left: jax.Array, right: jax.Array) -> jax.Array:
  """Singular values of `left @ rightᵀ` from the factors alone.

  With `left (..., m, r)`, `right (..., n, r)` and `r ≪ m, n` (a head circuit
  `W_QK = W_Q^h W_K^hᵀ` has `r = dh`): `left = Q_1 R_1`, `right = Q_2 R_2` (thin QR), so
  `left rightᵀ = Q_1 (R_1 R_2ᵀ) Q_2ᵀ` has the singular values of the `r × r` core. The other
  `min(m, n) − r` singular values are exactly zero and are not returned.
  """
  R1 = serial.qr(left, mode="r")
  R2 = serial.qr(right, mode="r")
  return singular_values(R1 @ jnp.swapaxes(R2, -1, -2))


def input_eps(W) -> float:
  """Machine epsilon of `W`'s dtype (float64's for non-float input): the data's precision."""
  dtype = np.dtype(getattr(W, "dtype", np.float64))
  return float(np.finfo(dtype if np.issubdtype(dtype, np.floating) else np.float64).eps)


def rank_certificate(W, tol: float | None = None, *,
                     check_finite: bool = True) -> dict[str, np.ndarray]:
  """Numerical rank decided in float64, with the tolerance that decided it.

  Args:
    W: `(..., m, n)` (any dtype; promoted to float64 on the host).
    tol: absolute threshold; default `max(m, n) · eps · σ_1` with `eps` of `W`'s own dtype
      (`input_eps`): the SVD runs in float64, but the data is only known to its precision.
    check_finite: refuse (one line) a `W` holding NaN or inf, which numpy's SVD would fail on
      with "SVD did not converge"; `False` skips the check (this function runs on the host,
      never under `jit`).

  Returns:
    `{"rank", "tol", "sigma_min", "condition_number"}`, numpy arrays of shape `W.shape[:-2]`.
  """
  check_range(tol, "tol", "analysis.rank_certificate", low=0, allow_none=True, example="1e-6")
  check_flag(check_finite, "check_finite", "analysis.rank_certificate")
  if check_finite:
    check_finite_weights(np.asarray(W), "analysis.rank_certificate")
  W64 = np.asarray(W, np.float64)
  s = np.linalg.svd(W64, compute_uv=False)
  t = max(W64.shape[-2:]) * input_eps(W) * s[..., 0] if tol is None else (
      np.full(s.shape[:-1], tol))
  with np.errstate(divide="ignore"):
    kappa = s[..., 0] / s[..., -1]
  return {"rank": np.sum(s > t[..., None], -1), "tol": t, "sigma_min": s[..., -1],
          "condition_number": kappa}


def causal_logdet(A) -> dict[str, np.ndarray]:
  """`log |det A|` of lower-triangular (causal) matrices from their diagonal, in float64.

  A causal softmax attention matrix is lower triangular with `A_ii = exp(s_ii)/Σ_{j≤i}
  exp(s_ij) > 0`, so `det A = Π A_ii > 0`: it is full rank in exact arithmetic, even when a
  float32 SVD reports tiny singular values (its condition number can be huge). This function
  certifies that from the diagonal, without an SVD.

  Args:
    A: `(..., T, T)` matrices that must be lower triangular.

  Returns:
    `{"logdet", "min_diag", "full_rank", "upper_max"}`: `full_rank` is `min_diag > 0`, and
    `upper_max` (the largest `|A_ij|`, `j > i`) shows that the triangular premise holds.

  Raises:
    ValueError: if an entry above the diagonal is non-zero (then the diagonal does not give
      the determinant).
  """
  A64 = np.asarray(A, np.float64)
  T = A64.shape[-1]
  upper = np.abs(np.where(np.triu(np.ones((T, T), bool), 1), A64, 0)).max(axis=(-2, -1))
  if np.any(upper > 0):
    raise ValueError(f"causal_logdet: the matrix is not lower triangular (max |A_ij| above the "
                     f"diagonal = {upper.max():.3e}); use rank_certificate instead.")
  diag = np.diagonal(A64, axis1=-2, axis2=-1)
  with np.errstate(divide="ignore"):
    logdet = np.sum(np.log(np.abs(diag)), -1)
  min_diag = np.abs(diag).min(-1)
  return {"logdet": logdet, "min_diag": min_diag, "full_rank": min_diag > 0, "upper_max": upper}
