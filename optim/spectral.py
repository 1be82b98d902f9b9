"""Spectral constraints: cap or fix each chosen matrix's largest singular value (eigenvalue topic).

Both transforms act on the parameters *after* the update (`W + u`), so they go last in a
chain: `optax.chain(optim.muon(0.02), optim.spectral_cap(1.0))`. They return the update that
lands on the projected matrix. `σ_max` comes either from power iteration whose right vectors
persist in the state (one warm-started step per update: the matrices move little per step, so
the estimate tracks `σ_max` at the cost of two mat-vecs), or from an exact SVD, for checking.
Because optax applies updates as `W + u`, the projected matrix carries an absolute rounding
error of about `ε·‖W‖`: capping a matrix far above the cap (`σ_max/c ≳ 1e4` in float32) in one
step is only as accurate as that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from optim.roles import select
from transformer.linalg.power import power_iteration

Method = Literal["power", "svd"]


class SpectralState(NamedTuple):
  """State of `spectral_cap` / `spectral_normalize`.

  Attributes:
    v: per chosen leaf `(..., d_out)` float32, the current top right singular vector estimate.
  """

  v: optax.Updates


def sigma_max(W: jax.Array, v: jax.Array, method: Method, steps: int):
  """`(σ_max (...,), v (..., d_out))` of `W`: warm-started power iteration or exact SVD."""
  if method == "svd":
    return jnp.linalg.svd(W, compute_uv=False)[..., 0], v
  if method == "power":
    sigma, _, v = power_iteration(W, v, steps=steps)
    return sigma, v
  raise ValueError(f"unknown {method=}; choose 'power' or 'svd'")


def _rescale(rule: Callable, *, method: Method, power_steps: int, init_steps: int):
  """The unmasked transform: `W + u -> (W + u)·factor(σ_max)` for every leaf it sees."""

  def init_fn(params):
    def start(p):
      if p.ndim < 2:
        raise ValueError(f"spectral constraints act on (batches of) matrices, got {p.shape=}")
      return power_iteration(p.astype(jnp.float32), steps=init_steps)[2]

    return SpectralState(v=jax.tree.map(start, params))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("spectral constraints need `params` in `update(updates, state, params)`")

    def project(u, p, v):
      W = p.astype(jnp.float32) + u.astype(jnp.float32)
      sigma, v = sigma_max(W, v, method, power_steps)
      factor, active = rule(sigma)
      projected = W * factor[..., None, None] - p.astype(jnp.float32)
      return jnp.where(active[..., None, None], projected.astype(u.dtype), u), v

    pairs = jax.tree.map(project, updates, params, state.v)
    treedef = jax.tree.structure(updates)
    updates, v = jax.tree.transpose(treedef, jax.tree.structure((0, 0)), pairs)
    return updates, SpectralState(v=v)

  return optax.GradientTransformation(init_fn, update_fn)


def spectral_cap(
    max_sigma,
    *,
    mask=None,
    method: Method = "power",
    power_steps: int = 1,
    init_steps: int = 20,
) -> optax.GradientTransformation:
  r"""Project each chosen matrix, after the update, so that `σ_max ≤ max_sigma`.

  .. math::
    W' = W + u, \qquad
    W'' = W' \cdot \min\!\big(1, c / \hat\sigma_\text{max}(W')\big), \qquad
    u'' = W'' - W

  with `c = max_sigma`. This is the radial projection onto the spectral-norm ball (as in
  spectral normalisation): it keeps the singular vectors and the ratios of the singular
  values, so the condition number is unchanged. A matrix already under the cap keeps its
  update bit for bit. With `method="power"`, `σ̂` is a power-iteration estimate (a lower
  bound, `‖W' v‖` with `‖v‖ = 1`) that tightens as the warm-started `v` tracks the top
  singular vector; `method="svd"` uses the exact `σ_max`.

  Args:
    max_sigma: the cap `c`.
    mask: which leaves to constrain: a bool pytree or `params -> bool pytree`; default
      `optim.select(roles=("hidden",))`. E.g. `select(names=("w_o", "w_2"))` for the
      residual branches only.
    method: `"power"` or `"svd"`.
    power_steps: power iterations per update.
    init_steps: power iterations at `init`, from the initial parameters.

  Returns:
    An `optax.GradientTransformation` whose state is `optax.MaskedState(SpectralState)`.

  Example:
    >>> tx = optax.chain(optax.adamw(1e-3), spectral_cap(1.0))
    >>> state = tx.init(params)
    >>> updates, state = tx.update(grads, state, params)   # `params` is required

  References:
    Miyato et al., `Spectral Normalization for Generative Adversarial Networks`, 2018.
  """

  def rule(sigma):
    active = sigma > max_sigma
    return jnp.where(active, max_sigma / jnp.where(active, sigma, 1), 1), active

  inner = _rescale(rule, method=method, power_steps=power_steps, init_steps=init_steps)
  return optax.masked(inner, select() if mask is None else mask)


def spectral_normalize(
    target=1.0,
    *,
    mask=None,
    method: Method = "power",
    power_steps: int = 1,
    init_steps: int = 20,
) -> optax.GradientTransformation:
  r"""Rescale each chosen matrix, after the update, to spectral norm `target`.

  .. math::
    W'' = (W + u) \cdot \frac{t}{\hat\sigma_\text{max}(W + u)}, \qquad u'' = W'' - W

  with `t = target`; a zero matrix is left as it is. Same estimate, mask and placement as
  `spectral_cap`: the constraint `σ_max = t` fixes the scale of every layer's map, so depth
  neither grows nor shrinks signals through that matrix.

  Args:
    target: the spectral norm `t` to keep.
    mask: which leaves (see `spectral_cap`); default the `hidden` role.
    method: `"power"` or `"svd"`.
    power_steps: power iterations per update.
    init_steps: power iterations at `init`.

  Returns:
    An `optax.GradientTransformation` whose state is `optax.MaskedState(SpectralState)`.

  Example:
    >>> tx = optax.chain(optax.sgd(0.1), spectral_normalize(1.0))

  References:
    Miyato et al., `Spectral Normalization for Generative Adversarial Networks`, 2018.
  """

  def rule(sigma):
    active = sigma > 0
    return target / jnp.where(active, sigma, 1), active

  inner = _rescale(rule, method=method, power_steps=power_steps, init_steps=init_steps)
  return optax.masked(inner, select() if mask is None else mask)
