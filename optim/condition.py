"""Condition-aware learning rates: a per-matrix step multiplier falling with κ = σ_max/σ_min.

The condition-number topic of the preface: a matrix whose κ is large is close to losing rank,
and a step of a given size is large *relative to its weakest direction*. `scale_by_condition`
shortens the steps of such matrices and leaves well-conditioned ones alone.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from optim.roles import select
from transformer.linalg.power import normalize, power_iteration

# κ resolvable in float32: a QR factor carries a backward error of a few ε·σ_max, so σ_min
# below ~100·ε·σ_max is noise; κ is clamped there.
KAPPA_MAX = 1e5


class ConditionState(NamedTuple):
  """State of `scale_by_condition`.

  Attributes:
    count: updates seen, `()` int32.
    v_max: per chosen leaf `(..., d_out)`, the top right singular vector estimate.
    v_min: per chosen leaf `(..., min(d_in, d_out))`, the bottom singular vector estimate.
    kappa: per chosen leaf `(...,)`, the current κ estimate (one per stacked matrix).
  """

  count: jax.Array
  v_max: optax.Updates
  v_min: optax.Updates
  kappa: optax.Updates


def estimate_condition(W: jax.Array, v_max: jax.Array, v_min: jax.Array, steps: int):
  r"""Warm-started estimates of `σ_max`, `σ_min` and `κ` of each matrix in a batch.

  `σ_max` by `power_iteration`. `σ_min` by inverse iteration on the Gram of the tall side,
  `M = W` (or `Wᵀ` when `W` is wide), through the triangular factor of `M = Q R`:

  .. math::
    v \leftarrow \frac{(M^\top M)^{-1} v}{\|\cdot\|} = \frac{R^{-1} R^{-\top} v}{\|\cdot\|},
    \qquad \hat\sigma_\text{min} = \|M v\|,
    \qquad \hat\kappa = \hat\sigma_\text{max} / \max(\hat\sigma_\text{min},
      \hat\sigma_\text{max}/\kappa_\text{max})

  Why this estimate: inverse iteration converges like `(σ_min/σ_{min+1})^2` per step, fast even
  when the small singular values cluster (plain power iteration on a shifted Gram converges like
  `1 − (σ_{min+1}² − σ_min²)/σ_max²`, i.e. not at all in practice). Its cost is one QR,
  `2 m k²` flops for `k = min(m, n)` — a tenth of one Newton–Schulz step of Muon — plus `k²` per
  iteration, and it is paid once every `every` updates. Working on `R` (condition `κ`) rather
  than on the Gram (condition `κ²`) keeps float32 meaningful up to `KAPPA_MAX`. `‖M v‖` is a
  Rayleigh quotient, so `σ̂_min ≥ σ_min` always: κ is never over-estimated, and a rate is never
  cut for a κ the matrix does not have.

  Args:
    W: `(..., d_in, d_out)`.
    v_max: `(..., d_out)` start vectors for `σ_max`.
    v_min: `(..., min(d_in, d_out))` start vectors for `σ_min`.
    steps: iterations of each iteration.

  Returns:
    `(kappa (...,), v_max, v_min)`; `kappa = 1` for a zero matrix.
  """
  sigma, _, v_max = power_iteration(W, v_max, steps=steps)
  M = W if W.shape[-2] >= W.shape[-1] else jnp.swapaxes(W, -1, -2)
  R = jnp.linalg.qr(M, mode="r")
  # Floor |R_ii| at σ_max/KAPPA_MAX (keeping its sign) so rank-deficient M stays finite.
  diag = jnp.diagonal(R, axis1=-2, axis2=-1)
  floor = jnp.maximum(sigma, jnp.finfo(W.dtype).tiny)[..., None] / KAPPA_MAX
  safe = jnp.where(diag < 0, -1.0, 1.0) * jnp.maximum(jnp.abs(diag), floor)
  eye = jnp.eye(R.shape[-1], dtype=bool)
  R = jnp.where(eye, safe[..., None, :], R)

  def body(_, v):
    y = jax.scipy.linalg.solve_triangular(R, v[..., None], trans="T", lower=False)
    return normalize(jax.scipy.linalg.solve_triangular(R, y, lower=False)[..., 0])

  v_min = jax.lax.fori_loop(0, steps, body, normalize(v_min))
  sigma_min = jnp.linalg.norm(jnp.einsum("...mn,...n->...m", M, v_min), axis=-1)
  kappa = sigma / jnp.maximum(sigma_min, sigma / KAPPA_MAX)
  return jnp.where(sigma > 0, kappa, 1.0), v_max, v_min


def condition_multiplier(kappa, alpha=0.5, kappa_ref=10.0):
  r"""The learning-rate multiplier of a matrix with condition number `kappa`.

  .. math::
    m(\kappa) = \min\!\big(1, (\kappa_\text{ref} / \kappa)^{\alpha}\big)

  Monotone non-increasing in κ: `1` up to `κ_ref`, then falling like `κ^{-α}`. Intent: the
  relative change a step `ΔW` makes in the weakest direction is about `‖ΔW‖/σ_min =
  κ‖ΔW‖/σ_max`; `α = 1` would hold that at its `κ_ref` value (a trust region measured in
  the matrix's own smallest singular value), `α = 0` turns the rule off, and `α = 1/2`
  (the default) is a compromise that slows, but does not freeze, ill-conditioned matrices.

  Args:
    kappa: condition numbers, any shape.
    alpha: exponent `α ≥ 0`.
    kappa_ref: condition number up to which the rate is untouched.

  Returns:
    Multipliers in `(0, 1]`, the shape of `kappa`.
  """
  return jnp.minimum(1.0, (kappa_ref / kappa) ** alpha)


def _unzip(like, tree_of_tuples, n: int):
  """A pytree of `n`-tuples (structured like `like`) as `n` pytrees."""
  return jax.tree.transpose(jax.tree.structure(like), jax.tree.structure((0,) * n), tree_of_tuples)


def _estimate_tree(params, v_max, v_min, steps: int):
  """`estimate_condition` over a pytree: `(kappa, v_max, v_min)` pytrees."""
  triples = jax.tree.map(
      lambda p, a, b: estimate_condition(p.astype(jnp.float32), a, b, steps), params, v_max, v_min)
  return _unzip(params, triples, 3)


def _scale_by_condition(alpha, kappa_ref, every, power_steps, init_steps):
  """The unmasked transform: every leaf it sees is a (batch of) matrix."""

  def init_fn(params):
    def start(p):
      if p.ndim < 2:
        raise ValueError(f"scale_by_condition acts on (batches of) matrices, got {p.shape=}")
      lead, short = p.shape[:-2], min(p.shape[-2:])
      ramp = 1.0 + jnp.arange(short, dtype=jnp.float32) / short
      return jnp.ones(lead + (p.shape[-1],), jnp.float32), jnp.broadcast_to(ramp, lead + (short,))

    v_max, v_min = _unzip(params, jax.tree.map(start, params), 2)
    kappa, v_max, v_min = _estimate_tree(params, v_max, v_min, init_steps)
    return ConditionState(jnp.zeros([], jnp.int32), v_max, v_min, kappa)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("scale_by_condition needs `params` in `update(updates, state, params)`")

    def refresh(operand):
      return _estimate_tree(params, *operand, power_steps)

    kappa, v_max, v_min = jax.lax.cond(
        state.count % every == 0, refresh,
        lambda operand: (state.kappa,) + operand, (state.v_max, state.v_min))
    updates = jax.tree.map(
        lambda u, k: u * condition_multiplier(k, alpha, kappa_ref)[..., None, None].astype(u.dtype),
        updates, kappa)
    return updates, ConditionState(optax.safe_increment(state.count), v_max, v_min, kappa)

  return optax.GradientTransformation(init_fn, update_fn)


def scale_by_condition(
    alpha=0.5,
    kappa_ref=10.0,
    *,
    every: int = 10,
    power_steps: int = 4,
    init_steps: int = 30,
    mask=None,
) -> optax.GradientTransformation:
  r"""Scale each chosen matrix's update by `condition_multiplier(κ̂)` of that matrix.

  .. math::
    u_W \leftarrow m(\hat\kappa_W)\, u_W, \qquad
    m(\kappa) = \min(1, (\kappa_\text{ref}/\kappa)^\alpha)

  `κ̂_W` is `estimate_condition` of the current parameters, refreshed every `every` updates
  (`power_steps` warm-started iterations each; `init_steps` at `init`) and carried in the state
  between refreshes. Stacked weights get one multiplier per layer. Place it before the
  learning rate, e.g. `optax.chain(optax.scale_by_adam(), scale_by_condition(),
  optax.scale_by_learning_rate(1e-3))`.

  Args:
    alpha: exponent `α` of the rule (`0` disables it).
    kappa_ref: `κ_ref`, the condition number up to which rates are untouched.
    every: refresh period `k` of the estimate, in updates.
    power_steps: iterations per refresh.
    init_steps: iterations at `init`.
    mask: which leaves (a bool pytree or `params -> bool pytree`); default the `hidden` role.

  Returns:
    An `optax.GradientTransformation` with state `optax.MaskedState(ConditionState)`.

  Example:
    >>> tx = optax.chain(optax.scale_by_adam(), scale_by_condition(alpha=0.5, kappa_ref=10.0),
    ...                  optax.scale_by_learning_rate(1e-3))
  """
  inner = _scale_by_condition(alpha, kappa_ref, every, power_steps, init_steps)
  return optax.masked(inner, select() if mask is None else mask)
