"""Arms and measurements of the optimizer claims: `muon`, `condition-lr`, `orthogonal-heads`.

Not an experiment itself: the claim modules in `experiments/claims/` import it and stay thin.
It holds

- arm builders (`adamw_arm`, `muon_arm`, `orthogonal_heads_arm`, `condition_arm`,
  `frozen_condition_arm`, `lr_cut_arm`): each takes the arm's settings and returns
  `make_tx(learning_rate) -> optax.GradientTransformation`, the form the claims runner's
  `train_many` sweeps. `make_tx` has one parameter, so `optax.inject_hyperparams(make_tx)`
  injects the learning rate and nothing else (it would turn every numeric keyword, `n_heads`
  included, into a traced array). The learning rate may be a scalar, an array or a schedule.
  Every arm is AdamW (`b1=0.9, b2=0.95`, decoupled weight decay on every matrix) with one
  change, so differences between arms are the change;
- update statistics (`sv_entropy`, `update_statistics`): how far a matrix update is from
  orthogonal, the quantity Muon fixes at 1;
- `steps_to_loss`: when a loss curve (or a curve of final losses over budgets) first reaches
  a target;
- `condition_multipliers`: the rate multipliers `scale_by_condition` applied, read from an
  optimizer state (the size of the plain learning-rate cut of the `condition-lr` control);
- `redundancy_summary`: head redundancy of trained parameters — largest principal cosine
  between heads' subspaces, attention-pattern similarity, prunable heads.

Example:
  >>> import jax, optax, transformer
  >>> from experiments import optimizers
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> make_tx = optimizers.muon_arm(n_heads=cfg.n_heads)
  >>> tx = optax.inject_hyperparams(make_tx)(learning_rate=1e-3)
  >>> state = tx.init(params)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optim
import transformer
from analysis.heads import head_ablation, pattern_similarity
from analysis.properties import principal_angles
from optim.orthogonalized import ShapeScaling
from optim.roles import split_heads
from transformer.linalg import serial
from transformer.model import param_tree

MakeTx = Callable[[optax.ScalarOrSchedule], optax.GradientTransformation]

# `scale_by_condition` refreshes κ when `count % every == 0`; with this period it refreshes at
# the first update only (the int32 count saturates at 2**31 - 1, 2 billion updates later).
NEVER = 2**31 - 1

HIDDEN = optim.select()  # the matrices every arm changes: w_q, w_k, w_v, w_o, w_1, w_2, w_gate
DECAYED = optim.select(roles=("hidden", "embedding", "unembedding"))  # every matrix
# The peak-rate grid every arm of the optimizer claims is tuned on (`small` shape, 120 steps).
RATE_GRID = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)


# ------------------------------------------------------------------------------------- arms


def _scaled(learning_rate: optax.ScalarOrSchedule, factor: float) -> optax.ScalarOrSchedule:
  if callable(learning_rate):
    return lambda count: factor * learning_rate(count)
  return factor * learning_rate


def _adamw(learning_rate, middle=(), *, b1: float, b2: float, eps: float, weight_decay: float):
  """`optax.adamw` with `middle` transforms between the Adam direction and the decay."""
  return optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps), *middle,
                     optax.add_decayed_weights(weight_decay, DECAYED),
                     optax.scale_by_learning_rate(learning_rate))


def adamw_arm(*, b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
              weight_decay: float = 0.0) -> MakeTx:
  r"""AdamW, the baseline of the three claims: `optax.adamw`, decaying every matrix.

  .. math:: W \leftarrow W - \eta\,(\hat m / (\sqrt{\hat v} + \epsilon) + \lambda W)

  Args:
    b1: first-moment decay.
    b2: second-moment decay.
    eps: `ε`.
    weight_decay: `λ`, on the `hidden`, `embedding` and `unembedding` roles (not on vectors).

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> import jax.numpy as jnp
    >>> from experiments.optimizers import adamw_arm
    >>> tx = adamw_arm(weight_decay=0.1)(1e-3)
    >>> state = tx.init({"blocks": {"attn": {"w_q": jnp.zeros((2, 8, 8))}}})
  """
  return lambda learning_rate: _adamw(learning_rate, b1=b1, b2=b2, eps=eps,
                                      weight_decay=weight_decay)


def muon_arm(*, n_heads: int | None = None, n_kv_heads: int | None = None, beta: float = 0.95,
             shape_scaling: ShapeScaling = "rms", rms: float = 0.2,
             adam_ratio: float = 1.0, b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
             weight_decay: float = 0.0) -> MakeTx:
  r"""Muon (`optim.scale_by_muon`) on the `hidden` matrices, `adamw_arm` on every other leaf.

  .. math::
    W_\text{hidden} \leftarrow W - \eta\,(s\,\mathrm{NS}(\hat\mu) + \lambda W), \qquad
    W_\text{other} \leftarrow \text{AdamW}(\rho\,\eta)

  Roles come from `optim.labels`, so the embedding and output matrix stay on AdamW. With
  `shape_scaling="rms"` every Muon update has RMS `rms` ≈ AdamW's, so both optimizers share one
  learning-rate grid (Liu et al., 2025) and `ρ = adam_ratio = 1` ties the two rates. With
  `n_heads`, the attention projections are orthogonalized per head (per-head Muon). Equals
  `optim.muon(η, shape_scaling=..., adam_learning_rate=ρη, ...)` when `weight_decay=0`; it is
  rebuilt here so the non-hidden leaves get exactly the baseline's AdamW (decay mask included).

  Args:
    n_heads: orthogonalize `w_q`, `w_k`, `w_v`, `w_o` per head (query heads `H`); `None`:
      whole matrices.
    n_kv_heads: key/value heads for the per-head split; default `n_heads`.
    beta: Muon's momentum.
    shape_scaling: `"rms"`, `"width"` or `"none"` (see `optim.shape_scale`).
    rms: target update RMS for `"rms"`.
    adam_ratio: `ρ`, AdamW's learning rate over Muon's.
    b1: AdamW's first-moment decay.
    b2: AdamW's second-moment decay.
    eps: AdamW's `ε`.
    weight_decay: `λ` on every matrix (Muon's and AdamW's).

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import muon_arm
    >>> cfg = transformer.preset("tiny")
    >>> tx = muon_arm(n_heads=cfg.n_heads)(0.02)
    >>> state = tx.init(transformer.init(cfg, jax.random.key(0)))

  References:
    Jordan et al., `Muon: An optimizer for hidden layers in neural networks`, 2024.
    Liu et al., `Muon is Scalable for LLM Training`, 2025.
  """
  optim.shape_scale(1, 1, shape_scaling)  # fail at construction on a bad mode

  def make_tx(learning_rate):
    muon = optax.chain(
        optim.scale_by_muon(beta, shape_scaling=shape_scaling, rms=rms, n_heads=n_heads,
                            n_kv_heads=n_kv_heads),
        optax.add_decayed_weights(weight_decay),
        optax.scale_by_learning_rate(learning_rate))
    adam = _adamw(_scaled(learning_rate, adam_ratio), b1=b1, b2=b2, eps=eps,
                  weight_decay=weight_decay)
    roles = lambda params: jax.tree.map(lambda r: "muon" if r == "hidden" else "adam",
                                        optim.labels(params))
    return optax.partition({"muon": muon, "adam": adam}, roles)

  return make_tx


def orthogonal_heads_arm(*, strength: float, n_heads: int, n_kv_heads: int | None = None,
                         **adamw_kwargs) -> MakeTx:
  r"""`adamw_arm` followed by `optim.orthogonal_heads(strength)`: a pull toward orthogonal heads.

  .. math:: u \leftarrow u_\text{AdamW} - \lambda_\perp \nabla R(W)

  `R` is `optim.head_gram_overlap` on `w_q`, `w_k`, `w_v` (column blocks) and `w_o` (row blocks);
  the term is decoupled (not scaled by the learning rate).

  Args:
    strength: `λ_⊥ ≥ 0`.
    n_heads: query heads `H`.
    n_kv_heads: key/value heads; default `n_heads`.
    **adamw_kwargs: `b1`, `b2`, `eps`, `weight_decay` of `adamw_arm`.

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> from experiments.optimizers import orthogonal_heads_arm
    >>> tx = orthogonal_heads_arm(strength=1e-2, n_heads=4)(1e-3)
  """
  if strength < 0:
    raise ValueError(f"orthogonal_heads_arm: {strength=} must be >= 0")
  adamw = adamw_arm(**adamw_kwargs)
  return lambda learning_rate: optax.chain(
      adamw(learning_rate), optim.orthogonal_heads(strength, n_heads, n_kv_heads=n_kv_heads))


def condition_arm(*, alpha: float = 0.5, kappa_ref: float = 10.0, every: int = 10,
                  power_steps: int = 4, mask=HIDDEN, b1: float = 0.9, b2: float = 0.95,
                  eps: float = 1e-8, weight_decay: float = 0.0) -> MakeTx:
  r"""AdamW whose `hidden` updates are scaled by `optim.scale_by_condition` (κ-aware rates).

  .. math::
    u_W = m(\hat\kappa_W)\,\hat m / (\sqrt{\hat v} + \epsilon), \qquad
    m(\kappa) = \min(1, (\kappa_\text{ref}/\kappa)^\alpha)

  with `κ̂_W` re-estimated every `every` updates. The multiplier does not touch the decay.

  Args:
    alpha: `α`.
    kappa_ref: `κ_ref`.
    every: refresh period of `κ̂`, in updates.
    power_steps: iterations per refresh.
    mask: the matrices scaled (bool pytree or `params -> bool pytree`); default `hidden`.
    b1: first-moment decay.
    b2: second-moment decay.
    eps: `ε`.
    weight_decay: `λ` on every matrix.

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import condition_arm
    >>> cfg = transformer.preset("tiny")
    >>> state = condition_arm()(1e-3).init(transformer.init(cfg, jax.random.key(0)))
  """
  if every < 1 or power_steps < 1:
    raise ValueError(f"condition_arm: {every=} and {power_steps=} must be >= 1")

  def make_tx(learning_rate):
    scale = optim.scale_by_condition(alpha, kappa_ref, every=every, power_steps=power_steps,
                                     mask=mask)
    return _adamw(learning_rate, (scale,), b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)

  return make_tx


def frozen_condition_arm(*, alpha: float = 0.5, kappa_ref: float = 10.0, power_steps: int = 4,
                         **adamw_kwargs) -> MakeTx:
  r"""Control of `condition_arm`: its multipliers frozen at their values on the first update.

  .. math:: u_W = m(\hat\kappa_W^{(0)})\,\hat m / (\sqrt{\hat v} + \epsilon)

  `κ̂^{(0)}` is exactly the estimate `condition_arm` uses at its first update (the same
  `scale_by_condition`, refreshed at count 0 and then never: `every = NEVER`). If the
  condition-aware arm wins only because some matrices start ill-conditioned and get smaller
  steps throughout, this control wins too; tracking κ while training is then not the cause.

  Args:
    alpha: `α`.
    kappa_ref: `κ_ref`.
    power_steps: iterations of the first refresh (as in `condition_arm`).
    **adamw_kwargs: `mask`, `b1`, `b2`, `eps`, `weight_decay` of `condition_arm`.

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> from experiments.optimizers import frozen_condition_arm
    >>> tx = frozen_condition_arm(alpha=0.5)(1e-3)
  """
  return condition_arm(alpha=alpha, kappa_ref=kappa_ref, every=NEVER, power_steps=power_steps,
                       **adamw_kwargs)


def lr_cut_arm(*, factor: float, mask=HIDDEN, **adamw_kwargs) -> MakeTx:
  r"""Control of `condition_arm`: AdamW with the `hidden` updates scaled by one constant.

  .. math:: u_W = c\,\hat m / (\sqrt{\hat v} + \epsilon) \quad (W \text{ hidden})

  With `c` the mean multiplier `condition_arm` applied (`condition_multipliers`), this is a
  plain learning-rate cut of the same average size on the same matrices: if it does as well,
  the benefit is the smaller rate, not its dependence on κ.

  Args:
    factor: `c > 0`.
    mask: the matrices cut (bool pytree or `params -> bool pytree`); default `hidden`, the
      matrices `condition_arm` scales.
    **adamw_kwargs: `b1`, `b2`, `eps`, `weight_decay`.

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`.

  Example:
    >>> from experiments.optimizers import lr_cut_arm
    >>> tx = lr_cut_arm(factor=0.5)(1e-3)
  """
  if not factor > 0:
    raise ValueError(f"lr_cut_arm: {factor=} must be > 0 (the multiplier on the hidden rates)")
  settings = dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0) | adamw_kwargs
  return lambda learning_rate: _adamw(learning_rate, (optax.masked(optax.scale(factor), mask),),
                                      **settings)


def condition_multipliers(opt_state, alpha: float = 0.5, kappa_ref: float = 10.0) -> jax.Array:
  r"""The multipliers `m(κ̂)` that the `scale_by_condition` in `opt_state` applied last update.

  Finds every `optim.ConditionState` in the state (inside chains, masks, partitions or
  `inject_hyperparams`), and concatenates `condition_multiplier(κ̂)` of each chosen matrix
  (one per layer of a stacked weight), in tree order, on the last axis.

  Args:
    opt_state: an optimizer state holding a `ConditionState`; leading axes of its leaves
      (runs of a vmapped sweep) are kept.
    alpha: the arm's `α`.
    kappa_ref: the arm's `κ_ref`.

  Returns:
    `(..., n_matrices)`; `.mean(-1)` is the average multiplier of a run, the `factor` of
    `lr_cut_arm`.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import condition_arm, condition_multipliers
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> condition_multipliers(condition_arm()(1e-3).init(params)).shape  # 2 layers × 6
    (12,)
  """
  states = [s for s in jax.tree.leaves(opt_state,
                                       is_leaf=lambda x: isinstance(x, optim.ConditionState))
            if isinstance(s, optim.ConditionState)]
  if not states:
    raise ValueError("condition_multipliers: no optim.ConditionState in opt_state; pass the state "
                     "of an optimizer built with optim.scale_by_condition (e.g. condition_arm)")
  kappas = [k for s in states for k in jax.tree.leaves(s.kappa)]
  return optim.condition_multiplier(jnp.concatenate(kappas, -1), alpha, kappa_ref)


# ------------------------------------------------------------------------ update statistics


def sv_entropy(W: jax.Array) -> jax.Array:
  r"""Normalized entropy of the energy spectrum of each matrix, in `[0, 1]`.

  .. math::
    p_i = \frac{\sigma_i^2}{\sum_j \sigma_j^2}, \qquad
    H = -\frac{1}{\ln r} \sum_{i=1}^{r} p_i \ln p_i, \qquad r = \min(d_\text{in}, d_\text{out})

  `1` exactly when all `r` singular values are equal (a multiple of a semi-orthogonal matrix:
  a Muon update), `0` for rank one. A zero matrix scores `0`.

  Args:
    W: `(..., d_in, d_out)` with `min(d_in, d_out) ≥ 2`.

  Returns:
    `(...,)`.

  Example:
    >>> import jax.numpy as jnp
    >>> from experiments.optimizers import sv_entropy
    >>> float(sv_entropy(jnp.eye(4)))
    1.0

  References:
    Liu et al., `Muon is Scalable for LLM Training`, 2025 (SVD entropy of updates).
  """
  r = min(W.shape[-2:])
  if W.ndim < 2 or r < 2:
    raise ValueError(f"sv_entropy: needs (..., m, n) matrices with min(m, n) >= 2, {W.shape=}")
  s2 = jnp.square(serial.svd(W, compute_uv=False))
  total = jnp.sum(s2, -1, keepdims=True)
  p = s2 / jnp.where(total > 0, total, 1)
  plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0)
  return -jnp.sum(plogp, -1) / np.log(r)


def update_statistics(updates, mask=HIDDEN) -> dict[str, jax.Array]:
  """Condition number and singular-value entropy of every chosen matrix of an update.

  Stacked leaves `(L, d_in, d_out)` count as `L` matrices. Scale-free, so an update and the
  parameter change it causes (`new − old`, learning rate included) score the same when no
  weight decay is applied. Jit-able (the mask is resolved from the tree's paths).

  Args:
    updates: an update (or gradient, or parameter-difference) pytree.
    mask: a bool pytree or `tree -> bool pytree` choosing the matrices; default the `hidden`
      role (`optim.select()`).

  Returns:
    Each `(n_matrices,)` in tree order: `condition_number` `σ_max/σ_min` (inf when
    `σ_min = 0`); `condition_number_p90` `σ_1/σ_k`, `k = ⌈0.9 r⌉`, which ignores the weakest
    tenth of the directions — the full κ of a gradient-based update is usually enormous
    whatever the optimizer, because inputs that went through LayerNorm are centred (the
    gradient of `w_q`, `w_k`, `w_v`, `w_1` has a null direction) and Newton–Schulz does not
    lift a null direction; and `sv_entropy`, the robust measure of orthogonality.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> from experiments.optimizers import update_statistics
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> update_statistics(params)["sv_entropy"].shape  # 2 layers × 6 hidden matrices
    (12,)
  """
  chosen = mask(updates) if callable(mask) else mask
  leaves = [u for u, m in zip(jax.tree.leaves(updates), jax.tree.leaves(chosen), strict=True)
            if m]
  if not leaves:
    raise ValueError("update_statistics: the mask chose no leaf; pass mask= choosing matrices")
  kappa, kappa_p90, entropy = [], [], []
  for u in leaves:
    if u.ndim < 2:
      raise ValueError(f"update_statistics: chosen leaves must be matrices, got {u.shape=}")
    W = u.reshape((-1,) + u.shape[-2:]).astype(jnp.float32)
    s = serial.svd(W, compute_uv=False)
    kappa.append(s[:, 0] / s[:, -1])
    kappa_p90.append(s[:, 0] / s[:, math.ceil(0.9 * s.shape[-1]) - 1])
    entropy.append(sv_entropy(W))
  return {"condition_number": jnp.concatenate(kappa),
          "condition_number_p90": jnp.concatenate(kappa_p90),
          "sv_entropy": jnp.concatenate(entropy)}


# ----------------------------------------------------------------------- steps to a target


def steps_to_loss(steps, losses, target: float) -> float | None:
  r"""The first step at which a loss curve reaches `target`, linearly interpolated.

  With `i` the first index where `losses[i] ≤ target`:

  .. math::
    s^* = s_{i-1} + (s_i - s_{i-1}) \frac{\ell_{i-1} - \text{target}}{\ell_{i-1} - \ell_i}

  (`s^* = s_0` when the first point already reaches it). The same function gives the smallest
  *budget* that reaches a target when `steps` are training budgets and `losses` the final
  losses of separate runs with those budgets (the form the `muon` claim uses, since the
  learning-rate schedule depends on the budget).

  Args:
    steps: `(N,)` increasing steps (or budgets).
    losses: `(N,)` losses at those steps; NaN counts as not reached.
    target: the loss to reach.

  Returns:
    The interpolated step as a float, or `None` when the curve never reaches `target`.

  Example:
    >>> from experiments.optimizers import steps_to_loss
    >>> steps_to_loss([0, 100, 200], [5.0, 3.0, 2.0], 2.5)
    150.0
  """
  s = np.asarray(steps, np.float64)
  y = np.asarray(losses, np.float64)
  if s.ndim != 1 or s.shape != y.shape or s.size == 0:
    raise ValueError(f"steps_to_loss: steps and losses must be equal-length 1-D, got "
                     f"{s.shape=} {y.shape=}")
  if np.any(np.diff(s) <= 0):
    raise ValueError("steps_to_loss: steps must be strictly increasing")
  hit = np.flatnonzero(y <= target)
  if hit.size == 0:
    return None
  i = int(hit[0])
  if i == 0 or not np.isfinite(y[i - 1]):
    return float(s[i])
  return float(s[i - 1] + (s[i] - s[i - 1]) * (y[i - 1] - target) / (y[i - 1] - y[i]))


# ------------------------------------------------------------------------- head redundancy


def _max_pair_cosine(blocks_LNdk: jax.Array) -> jax.Array:
  """Per layer, the largest principal cosine over all pairs of the `N` head blocks, `(L,)`."""
  N = blocks_LNdk.shape[1]
  a, b = np.triu_indices(N, 1)
  angles = principal_angles(blocks_LNdk[:, a], blocks_LNdk[:, b])  # (L, pairs, dh)
  return jnp.max(jnp.cos(angles[..., 0]), -1)


@functools.partial(jax.jit, static_argnames="cfg")
def _subspace_cosines(params, cfg: transformer.Config) -> dict[str, jax.Array]:
  attn = param_tree(params)["blocks"]["attn"]
  out = {"q": _max_pair_cosine(split_heads(attn["w_q"].astype(jnp.float32), cfg.n_heads,
                                           "columns")),
         "o": _max_pair_cosine(jnp.swapaxes(split_heads(attn["w_o"].astype(jnp.float32),
                                                        cfg.n_heads, "rows"), -1, -2))}
  if cfg.n_kv_heads >= 2:
    for name in ("k", "v"):
      out[name] = _max_pair_cosine(split_heads(attn[f"w_{name}"].astype(jnp.float32),
                                               cfg.n_kv_heads, "columns"))
  return out


@functools.partial(jax.jit, static_argnames="cfg")
def _pattern_similarity(params, cfg: transformer.Config, tokens_BT):
  model = transformer.Transformer(cfg)
  _, state = model.apply({"params": param_tree(params)}, tokens_BT,
                         mutable=["intermediates"])
  return pattern_similarity(state["intermediates"]["blocks"]["attn"]["weights"][0])


def redundancy_summary(params, cfg: transformer.Config, tokens, *,
                       tol: float = 0.01) -> dict[str, Any]:
  r"""How redundant a model's heads are, by weights, by patterns and by ablation.

  - `max_cos`: per layer, the largest principal cosine `cos θ_1` between two heads' `W_Q^h`
    column spaces (`analysis.principal_angles`), averaged over layers. `W_Q^h` spans the
    column space of `W_QK^h = W_Q^h W_K^{h⊤}` (when `W_K^h` has full column rank), so this is
    the query side of `W_QK`; `max_cos_k` is its key side, `max_cos_v` the values, `max_cos_o`
    the row spaces of `W_O^h` (what the heads write). `1`: two heads share a direction; `0`:
    mutually orthogonal subspaces (the target of `optim.orthogonal_heads`).
  - `pattern_similarity`: `analysis.pattern_similarity` of each layer's attention maps on
    `tokens[:, :-1]`, averaged over layers.
  - `n_prunable`, `base_loss`: `analysis.head_ablation` at relative loss cost `tol`;
    `prunable_fraction = n_prunable / (L·H)`.

  Args:
    params: one model's parameters.
    cfg: its `Config`.
    tokens: `(B, T+1)` int token ids.
    tol: relative loss rise allowed for pruned heads.

  Returns:
    Python floats/ints for the scalars above, and `per_layer`: lists (length `L`) of
    `max_cos`, `max_cos_k`, `max_cos_v`, `max_cos_o`, `pattern_similarity`. `max_cos_k` and
    `max_cos_v` are absent when there is a single key/value head.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import redundancy_summary
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (2, 17), 0, cfg.vocab_size)
    >>> sorted(redundancy_summary(params, cfg, tokens))[:3]
    ['base_loss', 'max_cos', 'max_cos_k']
  """
  if cfg.n_heads < 2:
    raise ValueError(f"redundancy_summary: needs n_heads >= 2, got {cfg.n_heads=}")
  tokens = jnp.asarray(tokens)
  cosines = {k: np.asarray(v, np.float64) for k, v in _subspace_cosines(params, cfg).items()}
  patterns = np.asarray(_pattern_similarity(params, cfg, tokens[:, :-1]), np.float64)
  ablation = head_ablation(params, cfg, tokens, tol=tol)
  per_layer = {"max_cos" if k == "q" else f"max_cos_{k}": v for k, v in cosines.items()}
  per_layer["pattern_similarity"] = patterns
  n_prunable = int(ablation["n_prunable"])
  return {**{k: float(v.mean()) for k, v in per_layer.items()},
          "n_prunable": n_prunable, "prunable_fraction": n_prunable / (cfg.n_layers * cfg.n_heads),
          "base_loss": float(ablation["base_loss"]),
          "per_layer": {k: v.tolist() for k, v in per_layer.items()}}


# ------------------------------------------------------------------ budgets, tuning, sweeps


def budget_schedule(steps: int, *, warmup: float = 0.1, final: float = 0.1):
  r"""Unit learning-rate schedule of a run of `steps` updates: linear warm-up, linear decay.

  .. math::
    s(c) = \begin{cases} (c + 1)/w & c < w \\
      1 - (1 - f)\,\frac{c - w}{\max(1,\ \text{steps} - 1 - w)} & c \ge w \end{cases},
    \qquad w = \max(1, \lfloor \text{warmup} \cdot \text{steps} \rceil)

  for update `c = 0 … steps − 1`: the last update runs at `f = final` of the peak, so that
  the schedule (and the final loss) depends on the budget, as in modded-nanogpt's optimizer
  track, and the last update is still large enough to measure (`update_statistics`).

  Args:
    steps: the budget, in updates (≥ 2).
    warmup: fraction of the budget spent warming up.
    final: the last update's rate, as a fraction of the peak.

  Returns:
    `schedule(count) -> multiplier`, jit-able.

  Example:
    >>> from experiments.optimizers import budget_schedule
    >>> s = budget_schedule(11, warmup=0.1, final=0.1)
    >>> [round(float(s(c)), 2) for c in (0, 1, 10)]
    [1.0, 1.0, 0.1]
  """
  if steps < 2:
    raise ValueError(f"budget_schedule: {steps=} must be >= 2")
  w = max(1, round(warmup * steps))
  span = max(1, steps - 1 - w)

  def schedule(count):
    c = jnp.asarray(count, jnp.float32)
    return jnp.where(c < w, (c + 1) / w, 1 - (1 - final) * jnp.clip((c - w) / span, 0, 1))

  return schedule


def on_budget(make_tx: MakeTx, steps: int, **schedule_kwargs) -> MakeTx:
  """`make_tx` whose learning rate `η` becomes the schedule `η · budget_schedule(steps)`.

  Example:
    >>> from experiments.optimizers import adamw_arm, on_budget
    >>> tx = on_budget(adamw_arm(), 100)(3e-3)
  """
  unit = budget_schedule(steps, **schedule_kwargs)
  return lambda learning_rate: make_tx(lambda count: learning_rate * unit(count))


def tuned_rate(val_loss_R, diverged_R, grid) -> tuple[float, int]:
  """The rate of `grid` with the lowest final validation loss among runs that did not diverge.

  Args:
    val_loss_R: `(n_rates,)` final validation losses (NaN: failed).
    diverged_R: `(n_rates,)` bool.
    grid: the rates.

  Returns:
    `(rate, index)`; raises `ValueError` when every run diverged.

  Example:
    >>> from experiments.optimizers import tuned_rate
    >>> tuned_rate([3.0, 2.5, 2.0], [False, False, True], (1e-3, 3e-3, 1e-2))
    (0.003, 1)
  """
  loss = np.where(np.asarray(diverged_R, bool), np.inf, np.asarray(val_loss_R, np.float64))
  loss = np.where(np.isfinite(loss), loss, np.inf)
  if not np.isfinite(loss).any():
    raise ValueError(f"tuned_rate: every rate of {tuple(grid)} diverged. Fix: lower the grid.")
  i = int(np.argmin(loss))
  return float(grid[i]), i


def last_update_statistics(before, after, mask=HIDDEN) -> dict[str, float]:
  """Means over the hidden matrices of `update_statistics(after − before)` (one run's params).

  The full condition number is summarised by its median (it is often inf, see
  `update_statistics`), the others by their means.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import last_update_statistics
    >>> p = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> q = transformer.init(transformer.preset("tiny"), jax.random.key(1))
    >>> 0 < last_update_statistics(p, q)["update_sv_entropy"] <= 1
    True
  """
  diff = jax.tree.map(lambda a, b: jnp.asarray(b, jnp.float32) - jnp.asarray(a, jnp.float32),
                      before, after)
  stats = {k: np.asarray(v, np.float64) for k, v in update_statistics(diff, mask).items()}
  return {"update_cond_p90": float(stats["condition_number_p90"].mean()),
          "update_cond_median": float(np.median(stats["condition_number"])),
          "update_sv_entropy": float(stats["sv_entropy"].mean())}


def hidden_condition_multipliers(params, alpha: float = 0.5,
                                 kappa_ref: float = 10.0) -> np.ndarray:
  r"""`condition_multiplier(σ_max/σ_min)` of every hidden matrix of `params`, exact (SVD).

  What `scale_by_condition` applies when its estimate has converged; one value per matrix
  (per layer of a stacked weight), in tree order.

  Example:
    >>> import jax, transformer
    >>> from experiments.optimizers import hidden_condition_multipliers
    >>> p = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> hidden_condition_multipliers(p).shape  # 2 layers × 6 hidden matrices
    (12,)
  """
  chosen = HIDDEN(params)
  kappas = []
  for w, m in zip(jax.tree.leaves(params), jax.tree.leaves(chosen), strict=True):
    if m:
      s = np.linalg.svd(np.asarray(w, np.float64).reshape((-1,) + w.shape[-2:]),
                        compute_uv=False)
      kappas.append(s[:, 0] / np.maximum(s[:, -1], np.finfo(np.float64).tiny))
  kappa = np.concatenate(kappas)
  return np.asarray(optim.condition_multiplier(jnp.asarray(kappa), alpha, kappa_ref), np.float64)


def tune(cfg: transformer.Config, make_tx: MakeTx, grid, *, seed: int, steps: int,
         callback=None, eval_every: int | None = None, **train_kwargs) -> dict[str, Any]:
  """Tunes an arm's peak rate on `grid` with one (spare) seed and the full budget schedule.

  Runs `train_many(cfg, on_budget(make_tx, steps), seeds=(seed,), learning_rates=grid, ...)`
  and picks `tuned_rate` of the final validation losses.

  Args:
    cfg: the model.
    make_tx: the arm.
    grid: peak rates.
    seed: the tuning seed (never a reported one).
    steps: the budget.
    callback: passed to `train_many`.
    eval_every: passed to `train_many` (default: only the end).
    **train_kwargs: `data`, `batch_size`, `seq_len`, `eval_batches` of `train_many`.

  Returns:
    `{"learning_rate", "index", "val_loss": per rate, "diverged": per rate}`.

  Example:
    >>> import transformer
    >>> from experiments.optimizers import adamw_arm, tune
    >>> t = tune(transformer.preset("tiny", d_model=32), adamw_arm(), (1e-3, 1e-2), seed=100,
    ...          steps=4, data="task:modadd", batch_size=2, seq_len=8, eval_batches=1)
    >>> t["learning_rate"] in (1e-3, 1e-2)
    True
  """
  from experiments.multirun import train_many

  r = train_many(cfg, on_budget(make_tx, steps), seeds=(seed,), learning_rates=tuple(grid),
                 steps=steps, eval_every=eval_every or steps, callback=callback, **train_kwargs)
  val, div = r.val_loss[:, 0, -1], r.diverged[:, 0]
  lr, i = tuned_rate(val, div, grid)
  return {"learning_rate": lr, "index": i, "val_loss": [float(v) for v in val],
          "diverged": [bool(d) for d in div]}
