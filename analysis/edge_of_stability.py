"""Sharpness during training: the top Hessian eigenvalue against the optimizer's threshold.

On a quadratic with curvature `λ`, gradient descent with step `η` diverges once `λ > 2/η`;
Cohen et al. found that full-batch training drives the sharpness `λ_max(H)` up to that value
and then hovers there (the edge of stability). With momentum the threshold moves, and for
Adam the quantity that equilibrates is the preconditioned sharpness
`λ_max(P⁻¹ H) = λ_max(P^{-1/2} H P^{-1/2})`, `P = diag(√v̂ + ε)` the (frozen) second-moment
preconditioner:

| optimizer | threshold on |  threshold |
| --- | --- | --- |
| gradient descent | `λ_max(H)` | `2/η` |
| heavy-ball momentum `β` (`optax.sgd(momentum=β)`) | `λ_max(H)` | `(2 + 2β)/η` |
| Nesterov momentum `β` (`nesterov=True`) | `λ_max(H)` | `(2 + 2β)/((1 + 2β) η)` |
| Adam, `β₁` (EMA momentum) | `λ_max(P⁻¹H)` | `(2 + 2β₁)/((1 − β₁) η)` (`38/η` at `β₁ = 0.9`) |

Each threshold is where the linear recurrence of that optimizer on `½ λ θ²` (Adam: on
`½ θᵀ H θ` with `P` frozen) has spectral radius 1. Weight decay and gradient clipping are not
part of it. Writing the preconditioner with the step folded in, `P/η`, gives the same
eigenvector and `η λ_max(P⁻¹H)` against `(2 + 2β₁)/(1 − β₁)`.

`sharpness` computes it once (jit-able); `SharpnessTracker` is the training-loop form:
compiled once, warm-started from the previous top eigenvector, returning floats to log.

References:
  Cohen, Kaur, Li, Kolter & Talwalkar, "Gradient descent on neural networks typically occurs
  at the edge of stability" (2021); Cohen et al., "Adaptive gradient methods at the edge of
  stability" (2022).
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from analysis.curvature import Loss, PathFilter, _start, hessian_operator, split_params
from analysis.inputs import check_range, check_tol
from transformer.linalg.lanczos import lanczos_eigh

Optimizer = Literal["sgd", "adam"]
DEFAULT_SHARPNESS_TOL = 1e-3


def stability_threshold(learning_rate, *, optimizer: Optimizer = "sgd", momentum: float = 0.0,
                        nesterov: bool = False, b1: float = 0.9):
  """The largest stable (preconditioned) curvature of a step of `optimizer` at rate `η`.

  Args:
    learning_rate: `η` (a float or an array).
    optimizer: `"sgd"` (gradient descent, with optional momentum) or `"adam"`.
    momentum: `β` of `optax.sgd(momentum=β)` (heavy ball: `t ← g + β t`, `θ ← θ − η t`).
    nesterov: `optax.sgd(nesterov=True)`: `θ ← θ − η (g + β t)`.
    b1: Adam's first-moment decay `β₁` (`m ← β₁ m + (1 − β₁) g`).

  Returns:
    `2/η`, `(2 + 2β)/η`, `(2 + 2β)/((1 + 2β) η)` or `(2 + 2β₁)/((1 − β₁) η)` (see the
    module docstring).

  Example:
    >>> stability_threshold(0.1), round(stability_threshold(0.1, optimizer="adam"), 6)
    (20.0, 380.0)
  """
  caller = "analysis.stability_threshold"
  if not (hasattr(learning_rate, "shape") and jnp.ndim(learning_rate) > 0):
    check_range(learning_rate, "learning_rate", caller, low=0, low_open=True, example="0.1")
  check_range(momentum, "momentum", caller, low=0, high=1, high_open=True, example="0.9")
  if optimizer == "sgd":
    scale = (2 + 2 * momentum) / (1 + 2 * momentum) if nesterov else 2 + 2 * momentum
  elif optimizer == "adam":
    if not 0 <= b1 < 1:
      raise ValueError(f"stability_threshold: need 0 <= b1 < 1, got {b1=}.")
    scale = (2 + 2 * b1) / (1 - b1)
  else:
    raise ValueError(f"stability_threshold: optimizer={optimizer!r} is unknown. Fix: use "
                     "'sgd' or 'adam'.")
  return scale / learning_rate


def adam_second_moment(opt_state):
  """`(nu, count)` of the (first) `optax.ScaleByAdamState` inside an optimizer state.

  Finds it under `optax.chain`, `optax.inject_hyperparams` and clipping wrappers, e.g. in the
  state of `optax.adamw`.

  Raises:
    ValueError: when the state holds no Adam moments, or several.
  """
  found = [s for s in jax.tree.leaves(opt_state,
                                      is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState))
           if isinstance(s, optax.ScaleByAdamState)]
  if len(found) != 1:
    raise ValueError(f"adam_second_moment: the optimizer state holds {len(found)} "
                     "optax.ScaleByAdamState (need exactly one). Fix: pass nu= and count= "
                     "yourself, or use optimizer='sgd'.")
  return found[0].nu, found[0].count


def adam_preconditioner(nu, count, *, b2: float, eps: float):
  """`P = √v̂ + ε` per parameter, `v̂ = ν / (1 − β₂^count)` (Adam's bias-corrected moment)."""
  correction = 1 - jnp.asarray(b2, jnp.float32) ** jnp.maximum(count, 1)
  return jax.tree.map(lambda v: jnp.sqrt(v / correction.astype(v.dtype)) + eps, nu)


class Sharpness(NamedTuple):
  """The result of `sharpness`.

  Attributes:
    sharpness: `()` `λ_max(H)` (`"sgd"`) or `λ_max(P⁻¹H)` (`"adam"`).
    threshold: `()` the optimizer's threshold (`stability_threshold`).
    two_over_lr: `()` `2/η`, the gradient-descent reference.
    bound: `()` `|λ − sharpness| ≤ bound` for some eigenvalue `λ` (see `SymEigResult`).
    converged: `()` bool, `bound ≤ tol · |sharpness|`.
    krylov_dim: `()` Hessian-vector products used.
    vector: `(n,)` the top eigenvector (flat; in `P^{1/2}`-scaled coordinates for Adam), a
      warm start for the next call.
  """

  sharpness: jax.Array
  threshold: jax.Array
  two_over_lr: jax.Array
  bound: jax.Array
  converged: jax.Array
  krylov_dim: jax.Array
  vector: jax.Array


def sharpness(loss_fn: Loss, params, batch, *, learning_rate, optimizer: Optimizer = "sgd",
              momentum: float = 0.0, nesterov: bool = False, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-8, opt_state=None, nu=None, count=None,
              wrt: PathFilter | None = None, tol: float = DEFAULT_SHARPNESS_TOL,
              krylov_dim: int | None = None, key: jax.Array | None = None,
              v0: jax.Array | None = None) -> Sharpness:
  """The (preconditioned) sharpness and the optimizer's stability threshold, matrix-free.

  `"sgd"`: `λ_max(H)` of `loss_fn(·, batch)` at `params` by Lanczos
  (`hessian_top_eigenvalues`). `"adam"`: `λ_max(P^{-1/2} H P^{-1/2})` with `P = √v̂ + ε` from
  Adam's second moment `ν` (given, or found in `opt_state`). See the module docstring for the
  thresholds. Works under `jax.jit` (with `optimizer` and the other settings static).

  Args:
    loss_fn: `loss_fn(params, batch) -> scalar`.
    params: the point (any pytree).
    batch: the data.
    learning_rate: `η` at this step (the schedule's value).
    optimizer: `"sgd"` or `"adam"`.
    momentum: SGD momentum `β`.
    nesterov: SGD with Nesterov momentum.
    b1: Adam's `β₁` (threshold only).
    b2: Adam's `β₂` (bias correction of `ν`).
    eps: Adam's `ε` (added to `√v̂`).
    opt_state: an optax state holding Adam's moments (for `"adam"`, unless `nu` is given).
    nu: Adam's second moment `ν`, a pytree like `params`.
    count: Adam's step count (for the bias correction; default 1 when `nu` is given alone).
    wrt: restrict to the leaves whose path name it accepts (see `analysis.split_params`).
    tol: required accuracy of the top eigenvalue relative to its size.
    krylov_dim: cap on the Krylov dimension.
    key: PRNG key of the random start vector.
    v0: a start vector (e.g. the previous `.vector`).

  Returns:
    `Sharpness(sharpness, threshold, two_over_lr, bound, converged, krylov_dim, vector)`.

  Example:
    >>> import jax.numpy as jnp
    >>> loss = lambda p, b: jnp.sum(b * p["w"] ** 2) / 2  # H = diag(b): λ_max = 3
    >>> out = sharpness(loss, {"w": jnp.ones(3)}, jnp.array([1.0, 2.0, 3.0]), learning_rate=0.5)
    >>> round(float(out.sharpness), 4), float(out.threshold)
    (3.0, 4.0)
  """
  check_tol(tol, "tol", "analysis.sharpness", allow_none=False, example="1e-3")
  check_range(b2, "b2", "analysis.sharpness", low=0, high=1, high_open=True, example="0.999")
  check_range(eps, "eps", "analysis.sharpness", low=0, example="1e-8")
  matvec, theta, _ = hessian_operator(loss_fn, params, batch, wrt=wrt)
  if optimizer == "adam":
    if nu is None:
      if opt_state is None:
        raise ValueError("sharpness: optimizer='adam' needs Adam's second moment. Fix: pass "
                         "opt_state= (an optax state holding ScaleByAdamState) or nu=.")
      nu, count = adam_second_moment(opt_state)
    if jax.tree.structure(nu) != jax.tree.structure(params):
      raise ValueError("sharpness: Adam's nu must have the structure of params (a masked or "
                       "partitioned Adam, e.g. inside Muon, has no diagonal preconditioner for "
                       "every parameter). Fix: pass nu= like params, or use optimizer='sgd' "
                       "for the plain Hessian.")
    P = adam_preconditioner(nu, 1 if count is None else count, b2=b2, eps=eps)
    scale = jax.lax.rsqrt(split_params(P, wrt)[0].astype(theta.dtype))
    hvp = matvec
    matvec = lambda v: scale * hvp(scale * v)
  elif optimizer != "sgd":
    raise ValueError(f"sharpness: optimizer={optimizer!r} is unknown. Fix: use 'sgd' or "
                     "'adam'.")
  top = lanczos_eigh(matvec, _start(theta, key, v0), 1, tol=tol, krylov_dim=krylov_dim)
  lr = jnp.asarray(learning_rate, theta.dtype)
  return Sharpness(top.values[0],
                   stability_threshold(lr, optimizer=optimizer, momentum=momentum,
                                       nesterov=nesterov, b1=b1),
                   2 / lr, top.bounds[0], top.converged[0], top.krylov_dim, top.vectors[0])


class SharpnessTracker:
  """Sharpness at intervals of a training run: compiled once, warm-started, floats to log.

  Each call returns `{"sharpness", "sharpness_threshold", "two_over_lr", "sharpness_bound",
  "sharpness_converged", "sharpness_krylov_dim"}` (plus `"sharpness_raw"`, `λ_max(H)`, when
  `raw=True` with Adam), all Python floats. The next call starts Lanczos from this call's top
  eigenvector plus a random component (so a new top direction is still found): a few
  Hessian-vector products when the direction changes slowly.

  Args:
    loss_fn: `loss_fn(params, batch) -> scalar`.
    optimizer: `"sgd"` or `"adam"` (see `sharpness`).
    raw: with Adam, also the unpreconditioned `λ_max(H)` (a second Lanczos run).
    seed: seed of the random start components.
    **settings: `momentum`, `nesterov`, `b1`, `b2`, `eps`, `wrt`, `tol`, `krylov_dim` of
      `sharpness`.

  Example:
    >>> import jax.numpy as jnp
    >>> loss = lambda p, b: jnp.sum(b * p["w"] ** 2) / 2
    >>> track = SharpnessTracker(loss, momentum=0.9)
    >>> row = track({"w": jnp.ones(3)}, jnp.array([1.0, 2.0, 3.0]), learning_rate=0.5)
    >>> round(row["sharpness"], 4), round(row["sharpness_threshold"], 4)
    (3.0, 7.6)
  """

  def __init__(self, loss_fn: Loss, *, optimizer: Optimizer = "sgd", raw: bool = False,
               seed: int = 0, **settings):
    unknown = set(settings) - {"momentum", "nesterov", "b1", "b2", "eps", "wrt", "tol",
                               "krylov_dim"}
    if unknown:
      raise TypeError(f"SharpnessTracker: unknown settings {sorted(unknown)}.")
    self.optimizer, self.raw = optimizer, raw and optimizer == "adam"
    self._wrt = settings.get("wrt")
    self._fn = jax.jit(functools.partial(sharpness, loss_fn, optimizer=optimizer, **settings))
    raw_settings = {k: v for k, v in settings.items() if k in ("wrt", "tol", "krylov_dim")}
    self._raw_fn = jax.jit(functools.partial(sharpness, loss_fn, optimizer="sgd",
                                             **raw_settings))
    self._key = jax.random.key(seed)
    self._vectors: dict[str, jax.Array] = {}

  def _v0(self, name: str, params) -> jax.Array:
    self._key, key = jax.random.split(self._key)
    theta = jax.eval_shape(lambda p: split_params(p, self._wrt)[0], params)
    r = jax.random.normal(key, theta.shape, theta.dtype)
    if name not in self._vectors:
      return r
    return self._vectors[name] + 0.3 * r / jnp.linalg.norm(r)

  def __call__(self, params, batch, learning_rate, opt_state=None) -> dict[str, float]:
    kwargs = {"opt_state": opt_state} if self.optimizer == "adam" else {}
    out = self._fn(params, batch, learning_rate=learning_rate,
                   v0=self._v0("main", params), **kwargs)
    self._vectors["main"] = out.vector
    row = {"sharpness": out.sharpness, "sharpness_threshold": out.threshold,
           "two_over_lr": out.two_over_lr, "sharpness_bound": out.bound,
           "sharpness_converged": out.converged, "sharpness_krylov_dim": out.krylov_dim}
    if self.raw:
      raw = self._raw_fn(params, batch, learning_rate=learning_rate,
                         v0=self._v0("raw", params))
      self._vectors["raw"] = raw.vector
      row["sharpness_raw"] = raw.sharpness
    return {k: float(v) for k, v in jax.device_get(row).items()}
