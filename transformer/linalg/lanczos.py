"""Krylov methods for linear operators given only as closures: Lanczos SVD and Arnoldi.

Both routines see the operator `A: ℝⁿ → ℝᵖ` only through `matvec(v) = A v` (and, for the
SVD, `rmatvec(u) = Aᵀ u`), so `A` may be a Jacobian that is never formed (`jax.jvp` /
`jax.vjp`). They keep the whole Krylov basis and re-orthogonalize every new vector against
it twice ("twice is enough", Giraud et al.), which costs `O(m·n)` memory for `m` steps and
removes the ghost eigenvalues of plain Lanczos. Everything is `jax.lax.fori_loop` over
fixed-size buffers: jit-able, and batched by `jax.vmap` over the closures' inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Operator = Callable[[jax.Array], jax.Array]


class SVDResult(NamedTuple):
  """Top singular triplets from `lanczos_svd`, largest first.

  Attributes:
    values: `(k,)` singular values `σ_1 ≥ … ≥ σ_k`.
    right: `(k, n)` right singular vectors (rows), `A right[i] ≈ σ_i left[i]`.
    left: `(k, p)` left singular vectors (rows).
    residuals: `(k,)` the computable bound `‖Aᵀ left[i] − σ_i right[i]‖`; a value is
      converged when its residual is small relative to `σ_1`.
  """

  values: jax.Array
  right: jax.Array
  left: jax.Array
  residuals: jax.Array


class EigResult(NamedTuple):
  """Dominant eigenvalues from `arnoldi_eig`, largest modulus first.

  Attributes:
    values: `(k,)` complex Ritz values.
    residuals: `(k,)` `‖A x_i − λ_i x_i‖` of the unit Ritz vectors `x_i`.
  """

  values: jax.Array
  residuals: jax.Array


def _safe_normalize(w: jax.Array) -> tuple[jax.Array, jax.Array]:
  norm = jnp.linalg.norm(w)
  return w / jnp.where(norm == 0, 1, norm), norm


def _orthogonalize(basis_MN: jax.Array, w_N: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Remove from `w` its components along the rows of `basis` (unfilled rows are zero), twice.

  Returns the orthogonalized vector and the total coefficients `basis @ w_original`.
  """
  h1_M = basis_MN @ w_N
  w_N = w_N - h1_M @ basis_MN
  h2_M = basis_MN @ w_N
  return w_N - h2_M @ basis_MN, h1_M + h2_M


def lanczos_svd(matvec: Operator, rmatvec: Operator, v0: jax.Array, k: int,
                steps: int | None = None) -> SVDResult:
  """Top-`k` singular values of a linear operator by Golub–Kahan–Lanczos bidiagonalization.

  Golub–Kahan is Lanczos on `AᵀA` written with both `A` and `Aᵀ`, so the singular values come
  from a bidiagonal matrix `B` instead of being square-rooted from eigenvalues of `AᵀA`:

  .. math::
    A V_m = U_m B_m, \\qquad A^\\top U_m = V_m B_m^\\top + \\beta_m v_{m+1} e_m^\\top,

  with `V_m`, `U_m` orthonormal (fully re-orthogonalized) and `σ_i(B_m) → σ_i(A)` from the top.
  One `matvec` and one `rmatvec` per step.

  Args:
    matvec: `v (n,) -> A v (p,)`.
    rmatvec: `u (p,) -> Aᵀ u (n,)`.
    v0: `(n,)` start vector (random is best; it must not be orthogonal to the top directions).
    k: how many singular values to return.
    steps: Krylov dimension `m ≥ k` (default `min(n, p, max(2k + 10, 24))`), clipped to
      `min(n, p)`. With `m = min(n, p)` the result is exact up to rounding.

  Returns:
    `SVDResult(values, right, left, residuals)`.

  Example:
    >>> W = jax.random.normal(jax.random.key(0), (50, 30))
    >>> res = lanczos_svd(lambda v: W @ v, lambda u: W.T @ u, jnp.ones(30), k=3, steps=30)
    >>> res.values  # == jnp.linalg.svd(W)[1][:3]

  References:
    Golub & Kahan, "Calculating the singular values and pseudo-inverse of a matrix" (1965).
  """
  n = v0.shape[-1]
  p = jax.eval_shape(matvec, v0).shape[-1]
  m = min(n, p, max(2 * k + 10, 24) if steps is None else steps)
  if not 1 <= k <= m:
    raise ValueError(f"lanczos_svd: need 1 <= k <= steps (clipped to min(n, p)={min(n, p)}), "
                     f"got {k=} and steps={m}.")
  dtype = v0.dtype
  v_N, _ = _safe_normalize(v0)
  V_MN = jnp.zeros((m + 1, n), dtype).at[0].set(v_N)
  U_MP = jnp.zeros((m, p), dtype)
  alpha_M = jnp.zeros((m,), dtype)
  beta_M = jnp.zeros((m,), dtype)

  def body(j, carry):
    V_MN, U_MP, alpha_M, beta_M = carry
    u_P = matvec(V_MN[j])
    u_P, _ = _orthogonalize(U_MP, u_P)
    u_P, alpha = _safe_normalize(u_P)
    U_MP = U_MP.at[j].set(u_P)
    w_N = rmatvec(u_P)
    w_N, _ = _orthogonalize(V_MN, w_N)
    v_N, beta = _safe_normalize(w_N)
    return V_MN.at[j + 1].set(v_N), U_MP, alpha_M.at[j].set(alpha), beta_M.at[j].set(beta)

  V_MN, U_MP, alpha_M, beta_M = jax.lax.fori_loop(0, m, body, (V_MN, U_MP, alpha_M, beta_M))
  # Full re-orthogonalization already removed the `β_{j-1} u_{j-1}` term of the recurrence,
  # so the coupling is read off as the superdiagonal: `B[j, j+1] = β_j`.
  B_MM = jnp.diag(alpha_M) + jnp.diag(beta_M[:-1], 1)
  P_MM, s_M, QT_MM = jnp.linalg.svd(B_MM)
  right_KN = QT_MM[:k] @ V_MN[:m]
  left_KP = P_MM[:, :k].T @ U_MP
  residuals_K = beta_M[-1] * jnp.abs(P_MM[-1, :k])
  return SVDResult(s_M[:k], right_KN, left_KP, residuals_K)


def arnoldi_eig(matvec: Operator, v0: jax.Array, k: int, steps: int | None = None) -> EigResult:
  """Dominant (largest-modulus) eigenvalues of a square, non-symmetric operator by Arnoldi.

  .. math::
    A Q_m = Q_m H_m + h_{m+1,m} q_{m+1} e_m^\\top,

  `Q_m` orthonormal (fully re-orthogonalized), `H_m` upper Hessenberg; the eigenvalues of the
  small `H_m` (Ritz values) converge to the outer eigenvalues of `A` first. With `k = 1` this is
  power iteration with the best use of the iterates.

  Args:
    matvec: `v (n,) -> A v (n,)`.
    v0: `(n,)` start vector.
    k: how many eigenvalues to return.
    steps: Krylov dimension `m ≥ k` (default `min(n, max(2k + 10, 24))`), clipped to `n`.

  Returns:
    `EigResult(values, residuals)`: complex Ritz values sorted by decreasing modulus and the
    residual norms `|h_{m+1,m}| · |e_mᵀ y_i|` of their unit Ritz vectors.

  Example:
    >>> A = jax.random.normal(jax.random.key(0), (40, 40))
    >>> arnoldi_eig(lambda v: A @ v, jnp.ones(40), k=2, steps=40).values

  References:
    Arnoldi, "The principle of minimized iterations in the solution of the matrix eigenvalue
    problem" (1951); Saad, "Numerical Methods for Large Eigenvalue Problems" (2011).
  """
  n = v0.shape[-1]
  out = jax.eval_shape(matvec, v0).shape[-1]
  if out != n:
    raise ValueError(f"arnoldi_eig: the operator must be square, it maps {n} -> {out}.")
  m = min(n, max(2 * k + 10, 24) if steps is None else steps)
  if not 1 <= k <= m:
    raise ValueError(f"arnoldi_eig: need 1 <= k <= steps (clipped to n={n}), got {k=}, steps={m}.")
  dtype = v0.dtype
  q_N, _ = _safe_normalize(v0)
  Q_MN = jnp.zeros((m + 1, n), dtype).at[0].set(q_N)
  H_MM = jnp.zeros((m + 1, m), dtype)

  def body(j, carry):
    Q_MN, H_MM = carry
    w_N, h_M = _orthogonalize(Q_MN, matvec(Q_MN[j]))
    q_N, h_next = _safe_normalize(w_N)
    return Q_MN.at[j + 1].set(q_N), H_MM.at[:, j].set(h_M.at[j + 1].set(h_next))

  _, H_MM = jax.lax.fori_loop(0, m, body, (Q_MN, H_MM))
  lam_M, Y_MM = jnp.linalg.eig(H_MM[:m])
  order = jnp.argsort(-jnp.abs(lam_M))[:k]
  Y_MK = Y_MM[:, order] / jnp.linalg.norm(Y_MM[:, order], axis=0, keepdims=True)
  residuals_K = jnp.abs(H_MM[m, m - 1]) * jnp.abs(Y_MK[-1])
  return EigResult(lam_M[order], residuals_K)
