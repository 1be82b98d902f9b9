"""Spectral constraints: cap or fix each chosen matrix's largest singular value (eigenvalue topic).

Both transforms act on the parameters *after* the update (`W + u`), so they go last in a
chain: `optax.chain(optim.muon(0.02), optim.spectral_cap(1.0))`. They return the update that
lands on the projected matrix. `σ_max` comes, by default, from Golub–Kahan–Lanczos started at
the previous update's top right singular vector (kept in the state) and run until its bound
meets `tol` (`transformer.linalg.lanczos_svd`): the matrices move little per step, so a few
mat-vecs suffice, and unlike power iteration it converges on the small spectral gaps of
Gaussian-like matrices. `method="power"` (a fixed number of warm-started power iterations:
cheap, but it under-estimates `σ_max` when the top gap is small, so the cap is exceeded) and
`method="svd"` (exact) are there for comparison. Because optax applies updates as `W + u`, the
projected matrix carries an absolute rounding error of about `ε·‖W‖`: capping a matrix far
above the cap (`σ_max/c ≳ 1e4` in float32) in one step is only as accurate as that.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from optim import checks
from optim.axes import AxesSpec, on_matrices
from optim.roles import checked_mask, unzip_tree
from transformer.linalg import serial
from transformer.linalg.lanczos import lanczos_svd
from transformer.linalg.power import power_iteration

Method = Literal["lanczos", "power", "svd"]

# Lanczos vectors added between convergence checks: the warm start usually converges in one.
_CHECK_EVERY = 4
# The default cap on the Krylov dimension per update (`krylov_dim=None`). The default is None,
# not an int, so that `optax.inject_hyperparams` keeps it static: it sets buffer shapes.
DEFAULT_KRYLOV_DIM = 32


class SpectralState(NamedTuple):
  """State of `spectral_cap` / `spectral_normalize`.

  Attributes:
    v: per chosen leaf `(..., d_out)` float32, the current top right singular vector estimate.
    converged: per chosen leaf `(...,)` bool, whether the last `σ_max` estimate met `tol`
      (always true for `method="svd"`).
  """

  v: optax.Updates
  converged: optax.Updates


def _lanczos_sigma(W: jax.Array, v: jax.Array, tol: float, krylov_dim: int):
  """`lanczos_svd` with `k = 1` on every matrix of the batch `W (..., m, n)`."""
  lead, (m, n) = W.shape[:-2], W.shape[-2:]
  W_flat = W.reshape((math.prod(lead), m, n))

  def one(W, v):
    res = lanczos_svd(lambda x: W @ x, lambda y: W.T @ y, v, 1, krylov_dim=krylov_dim, tol=tol,
                      check_every=_CHECK_EVERY)
    return res.values[0], res.right[0], res.bounds[0], res.converged[0]

  sigma, v, bound, ok = jax.vmap(one)(W_flat, v.reshape((-1, n)))
  return (sigma.reshape(lead), v.reshape(lead + (n,)), bound.reshape(lead), ok.reshape(lead))


def sigma_max(W: jax.Array, v: jax.Array, *, method: Method = "lanczos", tol: float = 1e-3,
              krylov_dim: int | None = None, power_steps: int = 1):
  """`σ_max` of each matrix of `W (..., m, n)`, warm-started from right vectors `v (..., n)`.

  Returns:
    `(sigma (...,), v (..., n), bound (...,), converged (...,))`: the estimate, the new right
    vector, a bound on `|σ − sigma|` for the nearest singular value `σ` (see
    `transformer.linalg.SVDResult.bounds`; `0` for `"svd"`) and `bound ≤ tol · sigma`.
  """
  if method == "svd":
    sigma = serial.svd(W, compute_uv=False)[..., 0]
    return sigma, v, jnp.zeros_like(sigma), jnp.ones(sigma.shape, bool)
  if method == "power":
    res = power_iteration(W, v, power_steps, tol=tol)
    return res.sigma, res.v, res.bound, res.converged
  if method == "lanczos":
    return _lanczos_sigma(W, v, tol, DEFAULT_KRYLOV_DIM if krylov_dim is None else krylov_dim)
  raise ValueError(f"unknown {method=}; choose 'lanczos', 'power' or 'svd'")


def _rescale(rule: Callable, *, method: Method, tol: float, krylov_dim: int | None,
             power_steps: int,
             init_power_steps: int):
  """The unmasked transform: `W + u -> (W + u)·factor(σ_max)` for every leaf it sees."""
  kw = {"method": method, "tol": tol, "krylov_dim": krylov_dim}

  def init_fn(params):
    def start(p):
      if p.ndim < 2:
        raise ValueError(f"spectral constraints act on (batches of) matrices, got {p.shape=}")
      W = p.astype(jnp.float32)
      v0 = power_iteration(W, power_steps=0).v  # the fixed ones-plus-ramp start
      _, v, _, ok = sigma_max(W, v0, power_steps=init_power_steps, **kw)
      return v, ok

    pairs = jax.tree.map(start, params)
    v, ok = unzip_tree(params, pairs, 2)
    return SpectralState(v=v, converged=ok)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("spectral constraints need `params` in `update(updates, state, params)`")

    def project(u, p, v):
      W = p.astype(jnp.float32) + u.astype(jnp.float32)
      sigma, v, _, ok = sigma_max(W, v, power_steps=power_steps, **kw)
      factor, active = rule(sigma)
      projected = W * factor[..., None, None] - p.astype(jnp.float32)
      return jnp.where(active[..., None, None], projected.astype(u.dtype), u), v, ok

    triples = jax.tree.map(project, updates, params, state.v)
    updates, v, ok = unzip_tree(updates, triples, 3)
    return updates, SpectralState(v=v, converged=ok)

  return optax.GradientTransformation(init_fn, update_fn)


def spectral_cap(
    max_sigma,
    *,
    mask=None,
    method: Method = "lanczos",
    tol: float = 1e-3,
    krylov_dim: int | None = None,
    power_steps: int = 1,
    init_power_steps: int = 20,
    matrix_axes: AxesSpec = None,
    check_finite: bool = False,
) -> optax.GradientTransformation:
  r"""Project each chosen matrix, after the update, so that `σ_max ≤ max_sigma`.

  .. math::
    W' = W + u, \qquad
    W'' = W' \cdot \min\!\big(1, c / \hat\sigma_\text{max}(W')\big), \qquad
    u'' = W'' - W

  with `c = max_sigma`. This is the radial projection onto the spectral-norm ball (as in
  spectral normalisation): it keeps the singular vectors and the ratios of the singular
  values, so the condition number is unchanged. A matrix already under the cap keeps its
  update bit for bit. With `method="lanczos"` (the default) `σ̂` is within `tol·σ̂` of
  `σ_max` whenever the state's `converged` flag is set, so `σ_max(W'') ≤ c·(1 + tol)`, from
  the first update on; `method="power"` takes `power_steps` warm-started power iterations (a
  lower bound that lags on small spectral gaps: the cap can be exceeded by several percent);
  `method="svd"` uses the exact `σ_max`.

  Args:
    max_sigma: the cap `c`.
    mask: which leaves to constrain: a bool pytree or `params -> bool pytree`; default
      the `hidden` role (`optim.select()`), which raises, naming the leaves, when it selects
      nothing or a foreign leaf of three or more axes. E.g. `select(names=("w_o", "w_2"))`
      for the residual branches only.
    method: `"lanczos"`, `"power"` or `"svd"`.
    tol: (`"lanczos"`) the relative accuracy of `σ̂`.
    krylov_dim: (`"lanczos"`) cap on the Krylov dimension per update (default 32). It sets
      buffer shapes: under `optax.inject_hyperparams` name it in `static_args`.
    power_steps: (`"power"`) power iterations per update.
    init_power_steps: (`"power"`) power iterations at `init`, from the initial parameters.
    matrix_axes: which axes of each chosen leaf are its matrix, as in `optim.muon`
      (`optim.MatrixAxes`, a mapping path suffix -> `MatrixAxes`, or a function): a fused qkv
      `(D, 3, H, Dh)` with `MatrixAxes(0, (2, 3))` caps each of its three `(D, H·Dh)`
      matrices. Default: the last two axes (ours, linen/nnx `kernel`; a 2-D PyTorch/equinox
      `weight` by its convention — the same `σ_max`).
    check_finite: raise, naming the leaf, on NaN or inf in the updates or parameters (see
      `optim.scale_by_muon`).

  Returns:
    An `optax.GradientTransformation` whose state is `optax.MaskedState(SpectralState)`.

  Raises:
    ValueError: (one line, at construction) for `max_sigma <= 0`, `power_steps < 0`,
      `tol <= 0`, an unknown `method` or a malformed `matrix_axes`.

  Example:
    >>> import jax, numpy as np, optax
    >>> from optim import MatrixAxes
    >>> params = {"w_1": 3.0 * jax.random.normal(jax.random.key(0), (2, 16, 24))}
    >>> grads = {"w_1": jax.random.normal(jax.random.key(1), (2, 16, 24))}
    >>> stack = MatrixAxes(-2, -1)  # a bare leaf: say that (2, 16, 24) is 2 layers' matrices
    >>> tx = optax.chain(optax.adamw(1e-3), spectral_cap(1.0, matrix_axes=stack))
    >>> state = tx.init(params)
    >>> updates, state = tx.update(grads, state, params)   # `params` is required
    >>> W = np.asarray(optax.apply_updates(params, updates)["w_1"], np.float64)
    >>> bool(np.linalg.svd(W, compute_uv=False)[:, 0].max() <= 1.001)
    True

  References:
    Miyato et al., `Spectral Normalization for Generative Adversarial Networks`, 2018.
  """

  def rule(sigma):
    active = sigma > max_sigma
    return jnp.where(active, max_sigma / jnp.where(active, sigma, 1), 1), active

  caller = "optim.spectral_cap"
  checks.positive(max_sigma, "max_sigma", caller, example="1.0")
  return _constraint(rule, caller, mask, matrix_axes, check_finite, method=method, tol=tol,
                     krylov_dim=krylov_dim, power_steps=power_steps,
                     init_power_steps=init_power_steps)


def spectral_normalize(
    target=1.0,
    *,
    mask=None,
    method: Method = "lanczos",
    tol: float = 1e-3,
    krylov_dim: int | None = None,
    power_steps: int = 1,
    init_power_steps: int = 20,
    matrix_axes: AxesSpec = None,
    check_finite: bool = False,
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
    method: `"lanczos"`, `"power"` or `"svd"` (see `spectral_cap`).
    tol: (`"lanczos"`) the relative accuracy of `σ̂`.
    krylov_dim: (`"lanczos"`) cap on the Krylov dimension per update (default 32). It sets
      buffer shapes: under `optax.inject_hyperparams` name it in `static_args`.
    power_steps: (`"power"`) power iterations per update.
    init_power_steps: (`"power"`) power iterations at `init`.
    matrix_axes: which axes of each chosen leaf are its matrix (see `spectral_cap`).
    check_finite: raise, naming the leaf, on NaN or inf (see `spectral_cap`).

  Returns:
    An `optax.GradientTransformation` whose state is `optax.MaskedState(SpectralState)`.

  Raises:
    ValueError: (one line, at construction) for `target <= 0` and the arguments of
      `spectral_cap`.

  Example:
    >>> import jax, numpy as np, optax
    >>> params = {"w_1": jax.random.normal(jax.random.key(0), (16, 16))}
    >>> tx = optax.chain(optax.sgd(0.1), spectral_normalize(0.5))
    >>> updates, _ = tx.update(params, tx.init(params), params)
    >>> W = np.asarray(optax.apply_updates(params, updates)["w_1"], np.float64)
    >>> round(float(np.linalg.svd(W, compute_uv=False)[0]), 3)
    0.5

  References:
    Miyato et al., `Spectral Normalization for Generative Adversarial Networks`, 2018.
  """

  def rule(sigma):
    active = sigma > 0
    return target / jnp.where(active, sigma, 1), active

  caller = "optim.spectral_normalize"
  checks.positive(target, "target", caller)
  return _constraint(rule, caller, mask, matrix_axes, check_finite, method=method, tol=tol,
                     krylov_dim=krylov_dim, power_steps=power_steps,
                     init_power_steps=init_power_steps)


def _constraint(rule, caller, mask, matrix_axes, check_finite, *, method, tol, krylov_dim,
                power_steps, init_power_steps):
  """The arguments checked, `_rescale` on each chosen leaf's matrices, masked and guarded."""
  if method not in ("lanczos", "power", "svd"):
    raise ValueError(f"{caller}: unknown method={method!r}; choose 'lanczos', 'power' or 'svd'")
  checks.positive(tol, "tol", caller, example="1e-3")
  checks.mask(mask, caller)
  checks.at_least(krylov_dim, 2, "krylov_dim", caller, allow_none=True)
  checks.at_least(power_steps, 0, "power_steps", caller)
  checks.at_least(init_power_steps, 0, "init_power_steps", caller)
  inner = on_matrices(_rescale(rule, method=method, tol=tol, krylov_dim=krylov_dim,
                               power_steps=power_steps, init_power_steps=init_power_steps),
                      matrix_axes, caller)
  tx = optax.masked(inner, checked_mask(mask, matrix_axes, caller.removeprefix("optim.")))
  return checks.guarded(tx, check_finite, caller)
