"""Condition-aware learning rates: a per-matrix step multiplier falling with κ = σ_max/σ_min.

The condition-number topic of the preface: a matrix whose κ is large is close to losing rank,
and a step of a given size is large *relative to its weakest direction*. `scale_by_condition`
shortens the updates of such matrices and leaves well-conditioned ones alone.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from optim import checks
from optim.axes import AxesSpec, on_matrices
from optim.roles import checked_mask, unzip_tree
from transformer.linalg.power import normalize, power_iteration
from transformer.linalg.serial import one_at_a_time

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
    converged: per chosen leaf `(...,)` bool, `ConditionEstimate.converged` of that estimate.
  """

  count: jax.Array
  v_max: optax.Updates
  v_min: optax.Updates
  kappa: optax.Updates
  converged: optax.Updates


class ConditionEstimate(NamedTuple):
  """`estimate_condition`'s result, per matrix of the batch.

  Attributes:
    kappa: `(...,)` `σ̂_max / max(σ̂_min, σ̂_max / KAPPA_MAX)`; `1` for a zero matrix.
    sigma_max: `(...,)` `σ̂_max ≤ σ_max` (power iteration: a lower bound).
    sigma_min: `(...,)` `σ̂_min = ‖M v_min‖ ≥ σ_min` (a Rayleigh quotient: an upper bound).
    sigma_max_bound: `(...,)` some singular value `σ` of `W` has `|σ − σ̂_max| ≤` this
      (`PowerResult.bound`); it is `σ_max` unless `v_max` missed the top direction.
    sigma_min_bound: `(...,)` the same for `σ̂_min`: `‖Mᵀu − σ̂_min v_min‖/√2` with
      `u = M v_min/σ̂_min`, plus `min(m, n)·ε·σ̂_max` for rounding; some singular value of
      `M` (or zero) lies within it.
    converged: `(...,)` bool: `sigma_max_bound ≤ tol·σ̂_max` and
      `sigma_min_bound ≤ tol·max(σ̂_min, σ̂_max/KAPPA_MAX)`, so `κ̂` is within about `2·tol`
      (relative) of the κ of the values found.
    v_max: `(..., d_out)` the new top right singular vector estimate (warm start).
    v_min: `(..., min(d_in, d_out))` the new bottom singular vector estimate (warm start).
  """

  kappa: jax.Array
  sigma_max: jax.Array
  sigma_min: jax.Array
  sigma_max_bound: jax.Array
  sigma_min_bound: jax.Array
  converged: jax.Array
  v_max: jax.Array
  v_min: jax.Array


def estimate_condition(W: jax.Array, v_max: jax.Array, v_min: jax.Array, power_steps: int, *,
                       tol: float = 1e-2) -> ConditionEstimate:
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
    power_steps: iterations of each of the two iterations (a fixed number).
    tol: the relative tolerance of `converged`.

  Returns:
    A `ConditionEstimate` (values, bounds, `converged`, and the vectors to warm-start with).

  Example:
    >>> import jax.numpy as jnp
    >>> W = jnp.diag(jnp.array([4.0, 2.0, 1.0]))
    >>> est = estimate_condition(W, jnp.ones(3), jnp.ones(3), power_steps=30)
    >>> round(float(est.kappa), 3), bool(est.converged)
    (4.0, True)
  """
  top = power_iteration(W, v_max, power_steps)
  sigma, v_max = top.sigma, top.v
  M = W if W.shape[-2] >= W.shape[-1] else jnp.swapaxes(W, -1, -2)

  def inverse_iteration(M, v, sigma):
    R = jnp.linalg.qr(M, mode="r")
    # Floor |R_ii| at σ_max/KAPPA_MAX (keeping its sign) so rank-deficient M stays finite.
    diag = jnp.diagonal(R, axis1=-2, axis2=-1)
    diag_floor = jnp.maximum(sigma, jnp.finfo(M.dtype).tiny)[..., None] / KAPPA_MAX
    safe = jnp.where(diag < 0, -1.0, 1.0) * jnp.maximum(jnp.abs(diag), diag_floor)
    eye = jnp.eye(R.shape[-1], dtype=bool)
    R = jnp.where(eye, safe[..., None, :], R)

    def body(_, v):
      y = jax.scipy.linalg.solve_triangular(R, v[..., None], trans="T", lower=False)
      return normalize(jax.scipy.linalg.solve_triangular(R, y, lower=False)[..., 0])

    return jax.lax.fori_loop(0, power_steps, body, normalize(v))

  # One matrix per LAPACK call on CPU: batched QRs running side by side deadlock XLA:CPU's
  # thread pool on small machines (see `transformer.linalg.serial`).
  v_min = one_at_a_time(inverse_iteration, core_ndims=(2, 1, 0))(M, v_min, sigma)
  Mv = jnp.einsum("...mn,...n->...m", M, v_min)
  sigma_min = jnp.linalg.norm(Mv, axis=-1)
  r = jnp.einsum("...mn,...m->...n", M, normalize(Mv)) - sigma_min[..., None] * v_min
  # The second term covers the float rounding of `M v` (and of the QR, through `v`).
  min_bound = (jnp.linalg.norm(r, axis=-1) / math.sqrt(2)
               + min(M.shape[-2:]) * jnp.finfo(W.dtype).eps * sigma)
  floor = sigma / KAPPA_MAX
  kappa = jnp.where(sigma > 0, sigma / jnp.maximum(sigma_min, floor), 1.0)
  converged = (top.bound <= tol * sigma) & (min_bound <= tol * jnp.maximum(sigma_min, floor))
  return ConditionEstimate(kappa, sigma, sigma_min, top.bound, min_bound, converged, v_max, v_min)


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

  Example:
    >>> import jax.numpy as jnp
    >>> condition_multiplier(jnp.array([5.0, 40.0]), alpha=0.5, kappa_ref=10.0).tolist()
    [1.0, 0.5]
  """
  checks.non_negative(alpha, "alpha", "optim.condition_multiplier", example="0.5")
  checks.positive(kappa_ref, "kappa_ref", "optim.condition_multiplier", example="10.0")
  return jnp.minimum(1.0, (kappa_ref / kappa) ** alpha)


def _estimate_tree(params, v_max, v_min, power_steps: int):
  """`estimate_condition` over a pytree: `(kappa, v_max, v_min, converged)` pytrees."""

  def one(p, a, b):
    est = estimate_condition(p.astype(jnp.float32), a, b, power_steps)
    return est.kappa, est.v_max, est.v_min, est.converged

  return unzip_tree(params, jax.tree.map(one, params, v_max, v_min), 4)


def _scale_by_condition(alpha, kappa_ref, every, power_steps, init_power_steps):
  """The unmasked transform: every leaf it sees is a (batch of) matrix."""

  def init_fn(params):
    def start(p):
      if p.ndim < 2:
        raise ValueError(f"scale_by_condition acts on (batches of) matrices, got {p.shape=}")
      lead, short = p.shape[:-2], min(p.shape[-2:])
      ramp = 1.0 + jnp.arange(short, dtype=jnp.float32) / short
      return jnp.ones(lead + (p.shape[-1],), jnp.float32), jnp.broadcast_to(ramp, lead + (short,))

    v_max, v_min = unzip_tree(params, jax.tree.map(start, params), 2)
    kappa, v_max, v_min, ok = _estimate_tree(params, v_max, v_min, init_power_steps)
    return ConditionState(jnp.zeros([], jnp.int32), v_max, v_min, kappa, ok)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("scale_by_condition needs `params` in `update(updates, state, params)`")

    def refresh(operand):
      return _estimate_tree(params, *operand, power_steps)

    kappa, v_max, v_min, ok = jax.lax.cond(
        state.count % every == 0, refresh,
        lambda operand: (state.kappa, *operand, state.converged), (state.v_max, state.v_min))
    updates = jax.tree.map(
        lambda u, k: u * condition_multiplier(k, alpha, kappa_ref)[..., None, None].astype(u.dtype),
        updates, kappa)
    return updates, ConditionState(optax.safe_increment(state.count), v_max, v_min, kappa, ok)

  return optax.GradientTransformation(init_fn, update_fn)


def scale_by_condition(
    alpha=0.5,
    kappa_ref=10.0,
    *,
    every: int = 10,
    power_steps: int = 4,
    init_power_steps: int = 30,
    mask=None,
    matrix_axes: AxesSpec = None,
    check_finite: bool = False,
) -> optax.GradientTransformation:
  r"""Scale each chosen matrix's update by `condition_multiplier(κ̂)` of that matrix.

  .. math::
    u_W \leftarrow m(\hat\kappa_W)\, u_W, \qquad
    m(\kappa) = \min(1, (\kappa_\text{ref}/\kappa)^\alpha)

  `κ̂_W` is `estimate_condition` of the current parameters, refreshed every `every` updates
  (`power_steps` warm-started iterations each; `init_power_steps` at `init`) and carried in the
  state between refreshes, with its `converged` flag. Stacked weights get one multiplier per
  layer. Place it before the learning rate, e.g. `optax.chain(optax.scale_by_adam(),
  scale_by_condition(), optax.scale_by_learning_rate(1e-3))`.

  Args:
    alpha: exponent `α` of the rule (`0` disables it).
    kappa_ref: `κ_ref`, the condition number up to which rates are untouched.
    every: refresh period `k` of the estimate, in updates.
    power_steps: iterations per refresh.
    init_power_steps: iterations at `init`.
    mask: which leaves (a bool pytree or `params -> bool pytree`); default the `hidden` role,
      loud when it selects nothing (see `spectral_cap`).
    matrix_axes: which axes of each chosen leaf are its matrix (`optim.MatrixAxes`, a mapping
      path suffix -> `MatrixAxes`, or a function; see `optim.spectral_cap`): one multiplier
      per matrix of the batch this defines.
    check_finite: raise, naming the leaf, on NaN or inf in the updates or parameters (see
      `optim.scale_by_muon`).

  Returns:
    An `optax.GradientTransformation` with state `optax.MaskedState(ConditionState)`.

  Raises:
    ValueError: (one line, at construction) for `every <= 0`, `power_steps < 0`,
      `init_power_steps < 0`, `alpha < 0`, `kappa_ref <= 0` or a malformed `matrix_axes`.

  Example:
    >>> import jax, optax
    >>> from optim import MatrixAxes
    >>> params = {"w_1": jax.random.normal(jax.random.key(0), (2, 16, 16))}
    >>> stack = {"w_1": MatrixAxes(-2, -1)}  # a bare leaf: 2 layers' (16, 16) matrices
    >>> tx = optax.chain(optax.scale_by_adam(),
    ...                  scale_by_condition(alpha=0.5, kappa_ref=10.0, matrix_axes=stack),
    ...                  optax.scale_by_learning_rate(1e-3))
    >>> updates, state = tx.update(params, tx.init(params), params)
    >>> state[1].inner_state.kappa["w_1"].shape  # one κ per stacked matrix
    (2,)
  """
  caller = "optim.scale_by_condition"
  checks.non_negative(alpha, "alpha", caller)
  checks.positive(kappa_ref, "kappa_ref", caller)
  checks.at_least(every, 1, "every", caller)
  checks.at_least(power_steps, 0, "power_steps", caller)
  checks.at_least(init_power_steps, 0, "init_power_steps", caller)
  checks.mask(mask, caller)
  inner = on_matrices(_scale_by_condition(alpha, kappa_ref, every, power_steps,
                                          init_power_steps), matrix_axes, caller)
  tx = optax.masked(inner, checked_mask(mask, matrix_axes, "scale_by_condition"))
  return checks.guarded(tx, check_finite, caller)
