"""The Krylov machinery shared by Lanczos and Arnoldi: re-orthogonalization, sizes, and the
loop that grows the space until it converges.

The routines see the operator `A: ℝⁿ → ℝᵖ` only through `matvec(v) = A v` (and, for the
SVD, `rmatvec(u) = Aᵀ u`), so `A` may be a Jacobian that is never formed (`jax.jvp` /
`jax.vjp`). They keep the whole Krylov basis and re-orthogonalize every new vector against
it, which removes the ghost eigenvalues of plain Lanczos: the three-term recurrence first,
then two passes of classical Gram–Schmidt against the whole basis ("twice is enough",
Giraud et al.). The basis is one fixed-shape buffer and each pass reads all of it, so a
step costs `O(krylov_dim · n)` memory traffic besides the operator: at large `n` choose
`krylov_dim` near the dimension that converges rather than far above it. (Reading only the
filled rows would need `lax.cond` or a dynamic slice of the buffer, which XLA answers with a
copy of the buffer per step: slower, not faster.)

Converged by default: the Krylov space grows, `check_every` vectors at a time, until every
requested value meets `tol` (relative to the largest value) or the space reaches its cap
`krylov_dim`. The buffers have the cap's size, so memory is `O(krylov_dim · n)` and
everything is `jax.lax.while_loop` over fixed shapes: jit-able, and batched by `jax.vmap`
(a batch runs until its slowest member converges). Each result carries a bound per value and
a `converged` flag per value; an unconverged value is reported, not hidden.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Operator = Callable[[jax.Array], jax.Array]

DEFAULT_TOL = 1e-4
DEFAULT_CHECK_EVERY = 8


def default_krylov_dim(k: int) -> int:
  """The default cap on the Krylov dimension for `k` values: `max(20 k + 60, 160)`.

  Enough for the clustered top spectra of near-identity residual blocks (e.g. the top-8
  singular values of a `T·d = 1024` block Jacobian converge to `1e-4` at about 80).
  """
  return max(20 * k + 60, 160)


def _safe_normalize(w: jax.Array) -> tuple[jax.Array, jax.Array]:
  norm = jnp.linalg.norm(w)
  return w / jnp.where(norm == 0, 1, norm), norm


def _orthogonalize(basis: jax.Array, w: jax.Array, count) -> tuple[jax.Array, jax.Array]:
  """`w` made orthogonal to `basis[:count]` (two classical Gram–Schmidt passes), and the
  coefficients removed, one per row (zero from row `count` on)."""
  live = jnp.arange(basis.shape[0]) < count
  h1 = jnp.where(live, basis @ w, 0)
  w = w - h1 @ basis
  h2 = jnp.where(live, basis @ w, 0)
  return w - h2 @ basis, h1 + h2


def _check_sizes(name: str, k: int, cap: int, limit: int, tol: float,
                 check_every: int | None):
  if not 1 <= k <= cap:
    raise ValueError(f"{name}: need 1 <= k <= krylov_dim (clipped to {limit}), got {k=} and "
                     f"krylov_dim={cap}. Fix: lower k or raise krylov_dim.")
  if isinstance(tol, (int, float)) and not tol > 0:  # a traced tol is the caller's to check
    raise ValueError(f"{name}: tol must be > 0, got {tol=}.")
  if check_every is not None and check_every < 1:
    raise ValueError(f"{name}: check_every must be >= 1 (or None), got {check_every=}.")


def check_interval(cap: int, n: int) -> int:
  """The default `check_every` for a Krylov cap `cap` on vectors of size `n`.

  A check is a dense SVD (or eigensolve) of a `cap × cap` matrix, about `10·cap³` flops; a
  step streams the `cap × n` basis several times, at least `cap·n` flops. Checking every
  `⌈10·cap²/n⌉` vectors keeps the checks near a tenth of the work, so a large operator is
  checked after every vector (no wasted operator applications past convergence) and a small
  one every `DEFAULT_CHECK_EVERY`.

  Example:
    >>> check_interval(160, 2048 * 512), check_interval(160, 1024)
    (1, 8)
  """
  return max(1, min(DEFAULT_CHECK_EVERY, -(-10 * cap * cap // n)))


def _grow(step, ritz, carry, cap: int, k: int, check_every: int):
  """Run `step(j, carry)` for `j = 0, 1, …` in chunks of `check_every` until `cap` or until
  `ritz(j, carry) -> (out, done)` says done; returns `(j, carry, out)` of the last check."""

  def cond(state):
    j, _, _, done = state
    return (j < cap) & jnp.logical_not(done)

  def body(state):
    j, carry, _, _ = state
    j_next = jnp.minimum(jnp.maximum(j + check_every, k), cap)
    carry = jax.lax.fori_loop(j, j_next, step, carry)
    out, done = ritz(j_next, carry)
    return j_next, carry, out, done

  out_shape = jax.eval_shape(ritz, jnp.int32(k), carry)[0]
  out = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), out_shape)
  j, carry, out, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), carry, out, jnp.bool_(False)))
  return j, carry, out


def _square_sizes(name: str, matvec, v0, k: int, krylov_dim, tol, check_every):
  """`(n, Krylov cap, check interval)` of a square operator, after checking every size."""
  n = v0.shape[-1]
  out = jax.eval_shape(matvec, v0).shape[-1]
  if out != n:
    raise ValueError(f"{name}: the operator must be square, it maps {n} -> {out}.")
  cap = min(n, default_krylov_dim(k) if krylov_dim is None else krylov_dim)
  _check_sizes(name, k, cap, n, tol, check_every)
  return n, cap, check_interval(cap, n) if check_every is None else check_every
