"""The optimizer arms the claims sweep, and the budget schedule every arm trains on.

An arm is `make_tx(learning_rate) -> optax.GradientTransformation` (two-rate arms:
`make_tx(hidden_rate, other_rate)`), the form `experiments.train.sweep.train_many` sweeps:
`make_tx` has one parameter, so `optax.inject_hyperparams(make_tx)` injects the learning rate
and nothing else (it would turn every numeric keyword, `n_heads` included, into a traced
array). The learning rate may be a scalar, an array or a schedule. Every arm is AdamW
(`b1=0.9, b2=0.95`, decoupled weight decay on every matrix) with one change, so differences
between arms are the change:

- one-rate arms: `adamw_arm`, `muon_arm`, `orthogonal_heads_arm`, `condition_arm`,
  `frozen_condition_arm`, `lr_cut_arm`;
- two-rate arms (`split_adamw_arm`, `optim_muon_arm`): the hidden matrices at one rate and
  every other leaf at another; `tied` gives them one rate, `other_at` fixes the hidden one;
- `budget_schedule` / `on_budget`: an arm trained for a fixed step budget, linear warm-up
  then linear decay.

The arms live here, beside the step they feed, so a rate travels down the house: a tuner
(`experiments.lab.tuning`) hands it to `train_many`, which injects it into `on_budget`'s arm,
which builds the optimizer of `experiments.train.step`; nothing on the way calls back up into
`experiments.lab`. `experiments.lab.optimizers` and `experiments.lab.tuning` re-export these
names (the same objects).

Example:
  >>> import jax, optax, transformer
  >>> from experiments.train import arms
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> make_tx = arms.on_budget(arms.muon_arm(n_heads=cfg.n_heads), 100)
  >>> state = optax.inject_hyperparams(make_tx)(learning_rate=1e-3).init(params)
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

import optim
from experiments.train.step import DECAY_MASKS, adamw
from optim.orthogonalized import ShapeScaling

MakeTx = Callable[[optax.ScalarOrSchedule], optax.GradientTransformation]
MakeTx2 = Callable[[optax.ScalarOrSchedule, optax.ScalarOrSchedule],
                   optax.GradientTransformation]

# `scale_by_condition` refreshes κ when `count % every == 0`; with this period it refreshes at
# the first update only (the int32 count saturates at 2**31 - 1, 2 billion updates later).
NEVER = 2**31 - 1

HIDDEN = optim.select()  # the matrices every arm changes: w_q, w_k, w_v, w_o, w_1, w_2, w_gate


# ------------------------------------------------------------------------------------- arms


def _scaled(learning_rate: optax.ScalarOrSchedule, factor: float) -> optax.ScalarOrSchedule:
  if callable(learning_rate):
    return lambda count: factor * learning_rate(count)
  return factor * learning_rate


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
    >>> from experiments.train.arms import adamw_arm
    >>> tx = adamw_arm(weight_decay=0.1)(1e-3)
    >>> state = tx.init({"blocks": {"attn": {"w_q": jnp.zeros((2, 8, 8))}}})
  """
  return lambda learning_rate: adamw(learning_rate, weight_decay=weight_decay,
                                     decay="matrices", b1=b1, b2=b2, eps=eps)


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
    >>> from experiments.train.arms import muon_arm
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
    adam = adamw(_scaled(learning_rate, adam_ratio), weight_decay=weight_decay,
                 decay="matrices", b1=b1, b2=b2, eps=eps)
    roles = lambda params: jax.tree.map(lambda r: "muon" if r == "hidden" else "adam",
                                        optim.labels(params))
    return optax.partition({"muon": muon, "adam": adam}, roles)

  return make_tx


def _roles(params):
  """`"hidden"` for the hidden matrices (`optim.labels`), `"other"` for every other leaf."""
  return jax.tree.map(lambda r: "hidden" if r == "hidden" else "other", optim.labels(params))


def split_adamw_arm(*, b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
                    weight_decay: float = 0.0) -> MakeTx2:
  r"""`adamw_arm` with the hidden matrices at one rate and every other leaf at another.

  .. math:: W_\text{hidden} \leftarrow W - \eta_h\,u_W, \qquad
     W_\text{other} \leftarrow W - \eta_o\,u_W

  with `u` AdamW's direction plus decay (one Adam state over the whole tree). With
  `η_h = η_o` it is `adamw_arm()(η)` update for update: AdamW is elementwise.

  Args:
    b1, b2, eps, weight_decay: as in `adamw_arm`.

  Returns:
    `make_tx(hidden_rate, other_rate) -> optax.GradientTransformation` (scalars or schedules).

  Example:
    >>> import jax, transformer
    >>> from experiments.train.arms import split_adamw_arm
    >>> tx = split_adamw_arm()(1e-2, 3e-3)
    >>> state = tx.init(transformer.init(transformer.preset("tiny"), jax.random.key(0)))
  """

  def make_tx(hidden_rate, other_rate):
    return optax.chain(
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
        optax.add_decayed_weights(weight_decay, DECAY_MASKS["matrices"]),
        optax.partition({"hidden": optax.scale_by_learning_rate(hidden_rate),
                         "other": optax.scale_by_learning_rate(other_rate)}, _roles))

  return make_tx


def optim_muon_arm(**muon_kwargs) -> MakeTx2:
  r"""`optim.muon` itself, the optimizer users import: Muon's rate on the hidden matrices,
  AdamW's (`adam_learning_rate`) on every other leaf.

  Every hyper-parameter but the two rates is `optim.muon`'s default unless `muon_kwargs` says
  otherwise (the `muon` claim v3 passes none): Nesterov momentum 0.95, five Newton–Schulz
  steps, `shape_scaling="width"`, no weight decay; AdamW `b1 = 0.9`, `b2 = 0.999`, Nesterov.

  Returns:
    `make_tx(hidden_rate, other_rate) -> optax.GradientTransformation` (scalars or schedules).

  Example:
    >>> import jax, transformer
    >>> from experiments.train.arms import optim_muon_arm
    >>> tx = optim_muon_arm()(0.03, 3e-3)
    >>> state = tx.init(transformer.init(transformer.preset("tiny"), jax.random.key(0)))
  """
  return lambda hidden_rate, other_rate: optim.muon(hidden_rate, adam_learning_rate=other_rate,
                                                    **muon_kwargs)


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
    >>> from experiments.train.arms import orthogonal_heads_arm
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
    >>> from experiments.train.arms import condition_arm
    >>> cfg = transformer.preset("tiny")
    >>> state = condition_arm()(1e-3).init(transformer.init(cfg, jax.random.key(0)))
  """
  if every < 1 or power_steps < 1:
    raise ValueError(f"condition_arm: {every=} and {power_steps=} must be >= 1")

  def make_tx(learning_rate):
    scale = optim.scale_by_condition(alpha, kappa_ref, every=every, power_steps=power_steps,
                                     mask=mask)
    return adamw(learning_rate, weight_decay=weight_decay, decay="matrices", b1=b1, b2=b2,
                 eps=eps, middle=(scale,))

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
    >>> from experiments.train.arms import frozen_condition_arm
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
    >>> from experiments.train.arms import lr_cut_arm
    >>> tx = lr_cut_arm(factor=0.5)(1e-3)
  """
  if not factor > 0:
    raise ValueError(f"lr_cut_arm: {factor=} must be > 0 (the multiplier on the hidden rates)")
  settings = dict(weight_decay=0.0) | adamw_kwargs
  return lambda learning_rate: adamw(learning_rate, decay="matrices",
                                     middle=(optax.masked(optax.scale(factor), mask),), **settings)


# ------------------------------------------------------------------- budgets


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
    >>> from experiments.train.arms import budget_schedule
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
    >>> from experiments.train.arms import adamw_arm
    >>> from experiments.train.arms import on_budget
    >>> tx = on_budget(adamw_arm(), 100)(3e-3)
  """
  unit = budget_schedule(steps, **schedule_kwargs)
  return lambda learning_rate: make_tx(lambda count: learning_rate * unit(count))


def tied(make_tx2: MakeTx2) -> MakeTx:
  """The two-rate arm with one rate everywhere: `make_tx(η) = make_tx2(η, η)`.

  Example:
    >>> from experiments.train.arms import split_adamw_arm
    >>> from experiments.train.arms import tied
    >>> tx = tied(split_adamw_arm())(1e-3)
  """
  return lambda learning_rate: make_tx2(learning_rate, learning_rate)


def other_at(make_tx2: MakeTx2, hidden_rate: float, steps: int, **schedule_kwargs) -> MakeTx:
  """The two-rate arm as a function of its other rate, the hidden one fixed at `hidden_rate`
  on the budget's schedule (`hidden_rate · budget_schedule(steps)`); `on_budget(.., steps)`
  then puts the other rate on the same schedule.

  Example:
    >>> from experiments.train.arms import split_adamw_arm
    >>> from experiments.train.arms import on_budget, other_at
    >>> tx = on_budget(other_at(split_adamw_arm(), 1e-2, 100), 100)(3e-3)
  """
  unit = budget_schedule(steps, **schedule_kwargs)
  return lambda other_rate: make_tx2(lambda count: hidden_rate * unit(count), other_rate)
