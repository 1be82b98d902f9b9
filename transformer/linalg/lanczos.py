"""Krylov methods for linear operators given only as closures: Lanczos (SVD and symmetric
eigenvalues, Gauss quadrature) and Arnoldi.

The routines see the operator only through `matvec` (and, for the SVD, `rmatvec`), so it may
be a Jacobian that is never formed. The machinery they share with Arnoldi
(`transformer.linalg.arnoldi`): full re-orthogonalization, growth until every requested value
converges, a bound and a `converged` flag per value, is `transformer.linalg.krylov`.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from transformer.linalg import serial
from transformer.linalg.arnoldi import EigResult, arnoldi_eig
from transformer.linalg.krylov import (
    DEFAULT_CHECK_EVERY,
    DEFAULT_TOL,
    Operator,
    _check_sizes,
    _grow,
    _orthogonalize,
    _safe_normalize,
    _square_sizes,
    check_interval,
    default_krylov_dim,
)

__all__ = ["DEFAULT_CHECK_EVERY", "DEFAULT_TOL", "EigResult", "Operator", "SVDResult",
           "SymEigResult", "Which", "arnoldi_eig", "check_interval", "default_krylov_dim",
           "lanczos_eigh", "lanczos_quadrature", "lanczos_svd"]


class SVDResult(NamedTuple):
  """Top singular triplets from `lanczos_svd`, largest first.

  Attributes:
    values: `(k,)` Ritz values `θ_1 ≥ … ≥ θ_k`. In exact arithmetic `θ_i ≤ σ_i` for each `i`
      (they are the singular values of the compression `Uᵀ A V`: interlacing).
    right: `(k, n)` right Ritz vectors (rows); `A right[i] = θ_i left[i]` exactly.
    left: `(k, p)` left Ritz vectors (rows).
    bounds: `(k,)` `‖Aᵀ left[i] − θ_i right[i]‖ / √2 + j·ε·θ_1` (`j` the Krylov dimension
      used, `ε` the dtype's machine epsilon). Some singular value `σ` of `A` (zero counted when
      `A` is not square) has `|σ − θ_i| ≤ bounds[i]`: the first term is the residual of the
      unit vector `[left[i]; right[i]]/√2` of the symmetric `[[0, A], [Aᵀ, 0]]`, whose
      eigenvalues are `±σ` (Krylov–Bogoliubov); the second covers rounding. It is the `i`-th
      singular value unless the start vector was (nearly) orthogonal to a top direction, an
      event of probability zero for a random start.
    converged: `(k,)` bool, `bounds[i] ≤ tol · θ_1`.
    krylov_dim: `()` int, the Krylov dimension the values come from.
  """

  values: jax.Array
  right: jax.Array
  left: jax.Array
  bounds: jax.Array
  converged: jax.Array
  krylov_dim: jax.Array


class SymEigResult(NamedTuple):
  """Extreme eigenpairs of a symmetric operator from `lanczos_eigh`, in the order asked for.

  Attributes:
    values: `(k,)` real Ritz values `θ_i` (largest first for `which="largest"`).
    vectors: `(k, n)` unit Ritz vectors `x_i` (rows).
    bounds: `(k,)` `‖A x_i − θ_i x_i‖ + j·ε·s` (`j` the Krylov dimension, `ε` the dtype's
      machine epsilon, `s = max |θ|`): some eigenvalue `λ` of `A` has `|λ − θ_i| ≤ bounds[i]`
      (Krylov–Bogoliubov; the second term covers rounding). The actual error is usually far
      smaller, about `bounds[i]² / gap_i` (Kato–Temple), `gap_i` the distance from `θ_i` to
      the rest of the spectrum.
    converged: `(k,)` bool, `bounds[i] ≤ tol · max |θ|`.
    krylov_dim: `()` int, the Krylov dimension the values come from.
  """

  values: jax.Array
  vectors: jax.Array
  bounds: jax.Array
  converged: jax.Array
  krylov_dim: jax.Array


def lanczos_svd(matvec: Operator, rmatvec: Operator, v0: jax.Array, k: int, *,
                krylov_dim: int | None = None, tol: float = DEFAULT_TOL,
                check_every: int | None = None) -> SVDResult:
  r"""Top-`k` singular values of a linear operator by Golub–Kahan–Lanczos bidiagonalization.

  Golub–Kahan is Lanczos on `AᵀA` written with both `A` and `Aᵀ`, so the singular values come
  from a bidiagonal matrix `B` instead of being square-rooted from eigenvalues of `AᵀA`:

  .. math::
    A V_j = U_j B_j, \qquad A^\top U_j = V_j B_j^\top + \beta_j v_{j+1} e_j^\top,

  with `V_j`, `U_j` orthonormal (fully re-orthogonalized). For the Ritz triplet
  `B_j = P Σ Qᵀ`, `(θ_i, U_j p_i, V_j q_i)` has residual `‖Aᵀ u − θ_i v‖ = β_j |P_{j,i}|`,
  which gives `bounds` (see `SVDResult`). One `matvec` and one `rmatvec` per Krylov vector.

  Args:
    matvec: `v (n,) -> A v (p,)`.
    rmatvec: `u (p,) -> Aᵀ u (n,)`.
    v0: `(n,)` start vector (random is best; a warm start from a previous top vector is
      cheap; it must not be orthogonal to the top directions).
    k: how many singular values to return.
    krylov_dim: the cap on the Krylov dimension `j` (default `default_krylov_dim(k)`),
      clipped to `min(n, p)`; memory is `(krylov_dim + 1)·n + krylov_dim·p` numbers. At
      `min(n, p)` the values are exact up to rounding.
    tol: stop as soon as every `bounds[i] ≤ tol · θ_1`.
    check_every: Krylov vectors added between convergence checks (each check is an SVD of
      a `krylov_dim²` matrix); default `check_interval(krylov_dim, max(n, p))`: every vector
      for large operators, every 8 for small ones.

  Returns:
    `SVDResult(values, right, left, bounds, converged, krylov_dim)`.

  Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> W = jax.random.normal(jax.random.key(0), (50, 30))
    >>> res = lanczos_svd(lambda v: W @ v, lambda u: W.T @ u, jnp.ones(30), k=3)
    >>> bool(res.converged.all())
    True
    >>> s = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)[:3]
    >>> bool(np.all(np.abs(np.asarray(res.values) - s) <= np.asarray(res.bounds)))
    True

  References:
    Golub & Kahan, "Calculating the singular values and pseudo-inverse of a matrix" (1965).
  """
  n = v0.shape[-1]
  p = jax.eval_shape(matvec, v0).shape[-1]
  cap = min(n, p, default_krylov_dim(k) if krylov_dim is None else krylov_dim)
  _check_sizes("lanczos_svd", k, cap, min(n, p), tol, check_every)
  check_every = check_interval(cap, max(n, p)) if check_every is None else check_every
  dtype = v0.dtype
  eps = jnp.finfo(dtype).eps
  v, _ = _safe_normalize(v0)
  V = jnp.zeros((cap + 1, n), dtype).at[0].set(v)
  U = jnp.zeros((cap, p), dtype)
  alpha = jnp.zeros((cap,), dtype)
  beta = jnp.zeros((cap,), dtype)
  rows = jnp.arange(cap)

  def step(j, carry):
    V, U, alpha, beta = carry
    # The three-term recurrence first (`A v_j − β_{j−1} u_{j−1}`), so that Gram–Schmidt
    # only removes rounding drift instead of cancelling a large component.
    u = matvec(V[j]) - jnp.where(j > 0, beta[j - 1], 0) * U[jnp.maximum(j - 1, 0)]
    u, _ = _orthogonalize(U, u, j)
    u, alpha_j = _safe_normalize(u)
    U = U.at[j].set(u)
    w = rmatvec(u) - alpha_j * V[j]
    w, _ = _orthogonalize(V, w, j + 1)
    v, beta_j = _safe_normalize(w)
    return V.at[j + 1].set(v), U, alpha.at[j].set(alpha_j), beta.at[j].set(beta_j)

  def ritz(j, carry):
    _, _, alpha, beta = carry
    # The bidiagonal of the recurrence: `B[i, i] = α_i`, `B[i, i+1] = β_i`.
    a = jnp.where(rows < j, alpha, 0)
    b = jnp.where(rows < j - 1, beta, 0)
    P, s, QT = serial.svd(jnp.diag(a) + jnp.diag(b[:-1], 1))
    bounds = (beta[j - 1] * jnp.abs(P[j - 1, :k]) / math.sqrt(2)
              + j.astype(dtype) * eps * s[0])
    return (P, s, QT, bounds), jnp.all(bounds <= tol * s[0])

  j, (V, U, _, _), (P, s, QT, bounds) = _grow(step, ritz, (V, U, alpha, beta), cap, k,
                                              check_every)
  right = QT[:k] @ jnp.where((rows < j)[:, None], V[:cap], 0)
  left = P[:, :k].T @ U
  return SVDResult(s[:k], right, left, bounds, bounds <= tol * s[0], j)


Which = Literal["largest", "smallest", "magnitude"]


def _symmetric_step(matvec: Operator, key: jax.Array):
  """One step `j` of symmetric Lanczos on the carry `(Q, alpha, beta)`, fully re-orthogonalized.

  `Q (cap + 1, n)` holds the basis, `alpha`/`beta` the diagonal and off-diagonal of the
  tridiagonal `T`. On breakdown (`‖w‖` at rounding level: the Krylov space is invariant, e.g.
  `A = c·I` after one step) the next vector is a random one orthogonal to the basis and
  `β_j = 0`, so `T` splits into blocks and the recurrence goes on in a fresh subspace instead
  of filling `T` with spurious zeros.
  """

  def step(j, carry):
    Q, alpha, beta = carry
    Aq = matvec(Q[j])
    w = Aq - jnp.where(j > 0, beta[j - 1], 0) * Q[jnp.maximum(j - 1, 0)]
    w, h = _orthogonalize(Q, w, j + 1)
    q, beta_j = _safe_normalize(w)
    eps = jnp.finfo(w.dtype).eps
    broke = beta_j <= 100 * eps * jnp.linalg.norm(Aq)

    def fresh(_):
      r = jax.random.normal(jax.random.fold_in(key, j), w.shape, w.dtype)
      return _safe_normalize(_orthogonalize(Q, r, j + 1)[0])[0]

    q = jax.lax.cond(broke, fresh, lambda _: q, None)
    beta_j = jnp.where(broke, 0, beta_j)
    return Q.at[j + 1].set(q), alpha.at[j].set(h[j]), beta.at[j].set(beta_j)

  return step


def _tridiagonal(alpha: jax.Array, beta: jax.Array) -> jax.Array:
  return jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1)


def lanczos_eigh(matvec: Operator, v0: jax.Array, k: int, *, which: Which = "largest",
                 krylov_dim: int | None = None, tol: float = DEFAULT_TOL,
                 check_every: int | None = None, key: jax.Array | None = None) -> SymEigResult:
  r"""Extreme eigenvalues of a symmetric operator by Lanczos, fully re-orthogonalized.

  .. math::
    A Q_j = Q_j T_j + \beta_j q_{j+1} e_j^\top, \qquad
    T_j = \operatorname{tridiag}(\beta, \alpha, \beta),

  `Q_j` orthonormal; the eigenvalues of the small `T_j` (Ritz values) converge to both ends of
  the spectrum first. The Ritz pair `(θ_i, Q_j y_i)` has residual `β_j |e_jᵀ y_i|`, which gives
  `bounds` (see `SymEigResult`). The space grows until every requested value meets `tol` or
  reaches `krylov_dim`. One `matvec` per Krylov vector. Unlike `lanczos_svd` (which gives
  `|λ|`), the values keep their sign: the top of an indefinite spectrum, e.g. a Hessian's.

  Args:
    matvec: `v (n,) -> A v (n,)`, `A` symmetric.
    v0: `(n,)` start vector (random is best; it must not be orthogonal to the wanted
      eigenvectors).
    k: how many eigenvalues to return.
    which: `"largest"` (algebraic, largest first), `"smallest"` (smallest first) or
      `"magnitude"` (largest `|λ|` first).
    krylov_dim: cap on the Krylov dimension (default `default_krylov_dim(k)`), clipped to `n`.
    tol: stop as soon as every `bounds[i] ≤ tol · max |θ|`.
    check_every: Krylov vectors added between convergence checks (default
      `check_interval(krylov_dim, n)`).
    key: PRNG key of the fresh vectors drawn on breakdown (default `jax.random.key(0)`).

  Returns:
    `SymEigResult(values, vectors, bounds, converged, krylov_dim)`.

  Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> M = jax.random.normal(jax.random.key(0), (60, 60)); A = (M + M.T) / 2
    >>> res = lanczos_eigh(lambda v: A @ v, jnp.ones(60), k=2)
    >>> bool(res.converged.all())
    True
    >>> lam = np.linalg.eigvalsh(np.asarray(A, np.float64))[::-1][:2]
    >>> bool(np.all(np.abs(np.asarray(res.values) - lam) <= np.asarray(res.bounds)))
    True

  References:
    Lanczos, "An iteration method for the solution of the eigenvalue problem of linear
    differential and integral operators" (1950); Parlett, "The Symmetric Eigenvalue Problem"
    (1998).
  """
  if which not in ("largest", "smallest", "magnitude"):
    raise ValueError(f"lanczos_eigh: which={which!r} is unknown. Fix: use 'largest', "
                     "'smallest' or 'magnitude'.")
  n, cap, check_every = _square_sizes("lanczos_eigh", matvec, v0, k, krylov_dim, tol, check_every)
  key = jax.random.key(0) if key is None else key
  dtype = v0.dtype
  eps = jnp.finfo(dtype).eps
  q, _ = _safe_normalize(v0)
  Q = jnp.zeros((cap + 1, n), dtype).at[0].set(q)
  rows = jnp.arange(cap)

  def ritz(j, carry):
    _, alpha, beta = carry
    live = rows < j
    # Rows from `j` on are not part of `T_j`: give them a diagonal below Gershgorin's lower
    # bound for `T_j` and no coupling, so they come out as exactly that value and are dropped.
    b = jnp.where(rows < j - 1, beta, 0)
    radius = jnp.max(jnp.where(live, jnp.abs(alpha) + jnp.abs(b) + jnp.abs(jnp.roll(b, 1)), 0))
    floor = -2 * radius - 1
    lam, Y = serial.eigh(_tridiagonal(jnp.where(live, alpha, floor), b))
    active = lam > (floor - radius) / 2
    score = {"largest": lam, "smallest": -lam, "magnitude": jnp.abs(lam)}[which]
    order = jnp.argsort(-jnp.where(active, score, -jnp.inf))[:k]
    scale = jnp.max(jnp.where(active, jnp.abs(lam), 0))
    bounds = beta[j - 1] * jnp.abs(Y[j - 1, order]) + j.astype(dtype) * eps * scale
    return (lam[order], Y[:, order], bounds, scale), jnp.all(bounds <= tol * scale)

  alpha, beta = jnp.zeros((cap,), dtype), jnp.zeros((cap,), dtype)
  j, (Q, _, _), (values, Y_k, bounds, scale) = _grow(
      _symmetric_step(matvec, key), ritz, (Q, alpha, beta), cap, k, check_every)
  vectors = Y_k.T @ jnp.where((rows < j)[:, None], Q[:cap], 0)
  return SymEigResult(values, vectors, bounds, bounds <= tol * scale, j)


def lanczos_quadrature(matvec: Operator, v0: jax.Array, krylov_dim: int, *,
                       key: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  r"""Gauss quadrature of the spectral measure of a symmetric `A` seen from `v0`, by Lanczos.

  With `u = v0 / ‖v0‖` and `A = Σ λ_i x_i x_iᵀ`, the measure `μ = Σ (u·x_i)² δ_{λ_i}` has the
  `m`-point Gauss rule `(θ_l, w_l)`: the eigenvalues of the Lanczos tridiagonal `T_m` and the
  squared first components of its eigenvectors. So

  .. math:: u^\top f(A)\, u \approx \sum_{l=1}^{m} w_l f(\theta_l),

  exactly when `f` is a polynomial of degree `≤ 2m − 1`. Averaged over random `v0` this is
  stochastic Lanczos quadrature (`analysis.spectral_density`). Runs exactly `m` steps (fully
  re-orthogonalized); a breakdown adds nodes of weight zero.

  Args:
    matvec: `v (n,) -> A v (n,)`, `A` symmetric.
    v0: `(n,)` start (probe) vector.
    krylov_dim: `m`, the number of nodes (clipped to `n`).
    key: PRNG key of the fresh vectors drawn on breakdown (default `jax.random.key(0)`).

  Returns:
    `(nodes (m,), weights (m,))`, nodes ascending, weights `≥ 0` summing to 1.

  Example:
    >>> import jax.numpy as jnp
    >>> A = jnp.diag(jnp.arange(1.0, 6.0))
    >>> nodes, weights = lanczos_quadrature(lambda v: A @ v, jnp.ones(5), 3)
    >>> round(float(weights @ nodes**2), 4)  # uᵀ A² u = (1 + 4 + 9 + 16 + 25) / 5
    11.0
  """
  n = v0.shape[-1]
  m = min(n, krylov_dim)
  if m < 1:
    raise ValueError(f"lanczos_quadrature: krylov_dim must be >= 1, got {krylov_dim=}.")
  key = jax.random.key(0) if key is None else key
  dtype = v0.dtype
  q, _ = _safe_normalize(v0)
  carry = (jnp.zeros((m + 1, n), dtype).at[0].set(q), jnp.zeros((m,), dtype),
           jnp.zeros((m,), dtype))
  _, alpha, beta = jax.lax.fori_loop(0, m, _symmetric_step(matvec, key), carry)
  nodes, Y = serial.eigh(_tridiagonal(alpha, beta))
  return nodes, jnp.square(Y[0])
