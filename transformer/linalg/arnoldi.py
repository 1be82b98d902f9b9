"""Arnoldi: dominant eigenvalues of a square, non-symmetric operator given only as a closure.

The shared Krylov machinery (full re-orthogonalization, growth until every value converges,
bounds per value) is `transformer.linalg.krylov`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from transformer.linalg import serial
from transformer.linalg.krylov import (
    DEFAULT_TOL,
    Operator,
    _grow,
    _orthogonalize,
    _safe_normalize,
    _square_sizes,
)


class EigResult(NamedTuple):
  """Dominant eigenvalues from `arnoldi_eig`, largest modulus first.

  Attributes:
    values: `(k,)` complex Ritz values `θ_i`.
    bounds: `(k,)` backward errors: `θ_i` is an exact eigenvalue of `A + E_i` with
      `‖E_i‖₂ ≤ bounds[i]` (`= ‖A x_i − θ_i x_i‖ + j·ε·|θ_1|` for the unit Ritz vector `x_i`,
      the second term for rounding). For a normal `A` this bounds the distance from `θ_i` to
      the nearest eigenvalue; for a non-normal `A` (e.g. a causal Jacobian) the forward error
      can be larger by that eigenvalue's condition number (Bauer–Fike).
    converged: `(k,)` bool, `bounds[i] ≤ tol · |θ_1|`.
    krylov_dim: `()` int, the Krylov dimension the values come from.
  """

  values: jax.Array
  bounds: jax.Array
  converged: jax.Array
  krylov_dim: jax.Array


def arnoldi_eig(matvec: Operator, v0: jax.Array, k: int, *, krylov_dim: int | None = None,
                tol: float = DEFAULT_TOL, check_every: int | None = None) -> EigResult:
  r"""Dominant (largest-modulus) eigenvalues of a square, non-symmetric operator by Arnoldi.

  .. math::
    A Q_j = Q_j H_j + h_{j+1,j} q_{j+1} e_j^\top,

  `Q_j` orthonormal (fully re-orthogonalized), `H_j` upper Hessenberg; the eigenvalues of the
  small `H_j` (Ritz values) converge to the outer eigenvalues of `A` first. The Ritz pair
  `(θ_i, Q_j y_i)` has residual `|h_{j+1,j}| |e_jᵀ y_i|` (see `EigResult.bounds`). The space
  grows until every requested value meets `tol` or reaches `krylov_dim`. Uses
  `jnp.linalg.eig`, which XLA provides on CPU.

  Args:
    matvec: `v (n,) -> A v (n,)`.
    v0: `(n,)` start vector.
    k: how many eigenvalues to return.
    krylov_dim: cap on the Krylov dimension (default `default_krylov_dim(k)`), clipped to `n`.
    tol: stop as soon as every `bounds[i] ≤ tol · |θ_1|`.
    check_every: Krylov vectors added between convergence checks (default
      `check_interval(krylov_dim, n)`).

  Returns:
    `EigResult(values, bounds, converged, krylov_dim)`: complex Ritz values sorted by
    decreasing modulus.

  Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> A = jax.random.normal(jax.random.key(0), (40, 40))
    >>> res = arnoldi_eig(lambda v: A @ v, jnp.ones(40), k=2)
    >>> bool(res.converged.all())
    True
    >>> lam = np.linalg.eigvals(np.asarray(A, np.float64))
    >>> bool(np.isclose(abs(complex(res.values[0])), np.abs(lam).max(), rtol=1e-4))
    True

  References:
    Arnoldi, "The principle of minimized iterations in the solution of the matrix eigenvalue
    problem" (1951); Saad, "Numerical Methods for Large Eigenvalue Problems" (2011).
  """
  n, cap, check_every = _square_sizes("arnoldi_eig", matvec, v0, k, krylov_dim, tol, check_every)
  dtype = v0.dtype
  eps = jnp.finfo(dtype).eps
  q, _ = _safe_normalize(v0)
  Q = jnp.zeros((cap + 1, n), dtype).at[0].set(q)
  H = jnp.zeros((cap + 1, cap), dtype)
  rows = jnp.arange(cap)

  def step(j, carry):
    Q, H = carry
    w, h = _orthogonalize(Q, matvec(Q[j]), j + 1)
    q, h_next = _safe_normalize(w)
    return Q.at[j + 1].set(q), H.at[:, j].set(h.at[j + 1].set(h_next))

  def ritz(j, carry):
    _, H = carry
    active = (rows[:, None] < j) & (rows[None, :] < j)
    lam, Y = serial.eig(jnp.where(active, H[:cap], 0))
    order = jnp.argsort(-jnp.abs(lam))[:k]
    Y_k = Y[:, order] / jnp.linalg.norm(Y[:, order], axis=0, keepdims=True)
    lam_k = lam[order]
    bounds = (jnp.abs(H[j, j - 1]) * jnp.abs(Y_k[j - 1])
              + j.astype(dtype) * eps * jnp.abs(lam_k[0])).astype(dtype)
    return (lam_k, bounds), jnp.all(bounds <= tol * jnp.abs(lam_k[0]))

  j, _, (lam_k, bounds) = _grow(step, ritz, (Q, H), cap, k, check_every)
  return EigResult(lam_k, bounds, bounds <= tol * jnp.abs(lam_k[0]), j)
