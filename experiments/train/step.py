"""The one training step: the language-model loss, the optimizers, the compiled step.

Everything that trains calls `train_step` (the CLI's loop in `experiments.train.loop`, the
vmapped sweeps of `experiments.train.sweep`, the tracked runs of `experiments.lab.stability`):

.. math:: \\theta_{k+1} = \\theta_k + \\mathrm{tx}\\big(\\nabla_\\theta
   \\mathcal L(\\theta_k; \\text{batch}_{k+1})\\big)

`build` jits init, step and evaluation with `NamedSharding`s over a `("data", "fsdp")` mesh;
`cached_trainer` reuses one compiled step for runs that differ only in seed or data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

import transformer
from experiments.train import sharding
from experiments.train.config import TrainConfig
from transformer import names


class TrainState(NamedTuple):
  """What a step reads and writes: the step count, the params and the optimizer state."""

  step: jax.Array
  params: Any
  opt_state: Any


# ------------------------------------------------------------------------------ optimizers


DECAY_MASKS: dict[str, Callable | None] = {
    "matrices": names.decay_mask,  # every weight matrix; norms' scales and biases are not decayed
    "all": None,  # every leaf (optax's default)
}


def adamw(learning_rate: optax.ScalarOrSchedule, *, weight_decay: float,
          decay: str | Callable, b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
          middle: tuple[optax.GradientTransformation, ...] = ()
          ) -> optax.GradientTransformation:
  r"""The one AdamW every trainer and claim builds: Adam's direction, `middle`, decay, rate.

  .. math:: W \leftarrow W - \eta\,(M(\hat m / (\sqrt{\hat v} + \epsilon)) + \lambda\,W)

  With `middle=()` it is `optax.adamw(learning_rate, b1, b2, eps, weight_decay=λ, mask=...)`
  transform for transform; `middle` (e.g. a per-matrix rate multiplier `M`) acts on the Adam
  direction before the decoupled decay is added.

  Args:
    learning_rate: `η`, a float or an `optax` schedule.
    weight_decay: `λ`.
    decay: which leaves decay, always said by the caller: `"matrices"` (every weight matrix,
      `transformer.names.decay_mask`), `"all"` (every leaf, vectors too), or a mask function
      `params -> bool pytree`.
    b1: first-moment decay.
    b2: second-moment decay.
    eps: `ε`.
    middle: transforms between the Adam direction and the decay.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> from experiments.train import adamw
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> tx = adamw(1e-2, weight_decay=0.5, decay="matrices")
    >>> zero = jax.tree.map(jnp.zeros_like, params)
    >>> u, _ = tx.update(zero, tx.init(params), params)  # a zero gradient: decay alone
    >>> decayed = jax.tree.map(lambda x: bool(jnp.any(x != 0)), u)
    >>> decayed["blocks"]["norm_1"]["scale"], decayed["embed"]["embedding"]
    (False, True)
  """
  if isinstance(decay, str):
    if decay not in DECAY_MASKS:
      raise ValueError(f"adamw(decay={decay!r}) is unknown. Fix: use one of "
                       f"{sorted(DECAY_MASKS)} or a mask function params -> bool pytree.")
    decay = DECAY_MASKS[decay]
  return optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps), *middle,
                     optax.add_decayed_weights(weight_decay, decay),
                     optax.scale_by_learning_rate(learning_rate))


def _adamw(tc: TrainConfig, lr_schedule, mesh=None):
  del mesh
  return adamw(lr_schedule, weight_decay=tc.weight_decay, decay="matrices")


def _sgd(tc: TrainConfig, lr_schedule, mesh=None):
  del tc, mesh
  return optax.sgd(lr_schedule, momentum=0.9, nesterov=True)


def _muon(tc: TrainConfig, lr_schedule, mesh=None):
  """Muon on the hidden matrices (`optim.labels`) at `muon_learning_rate`, AdamW on the rest.

  Both rates follow the same warm-up and cosine shape; Muon's updates have unit spectral
  norm per matrix, so its good rates (~0.02) are an order above AdamW's. On a mesh whose
  `fsdp` (else `data`) axis is larger than 1, each device orthogonalizes only the stacked
  layer matrices it owns (`shard="owner"`: no collective inside Newton–Schulz).
  """
  import optim  # imported only when asked for: `train` does not otherwise need it

  shard = {}
  if mesh is not None:
    axis = "fsdp" if mesh.shape.get("fsdp", 1) > 1 else "data"
    if mesh.shape.get(axis, 1) > 1:
      shard = {"shard": "owner", "mesh": mesh, "shard_axes": (axis,)}
  return optim.muon(learning_rate=schedule(tc, peak=tc.muon_learning_rate),
                    adam_learning_rate=lr_schedule, adam_b2=0.95, adam_nesterov=False,
                    label_fn=optim.labels,
                    weight_decay=tc.weight_decay, **shard)


OPTIMIZERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "adamw": _adamw,
    "sgd": _sgd,
    "muon": _muon,
}


def schedule(tc: TrainConfig, peak: float | None = None) -> optax.Schedule:
  """Linear warm-up to `peak` (default `learning_rate`), then cosine decay to
  `final_lr_fraction` of it."""
  peak = tc.learning_rate if peak is None else peak
  return optax.warmup_cosine_decay_schedule(
      0.0, peak, tc.warmup_steps, max(tc.steps, tc.warmup_steps + 1), peak * tc.final_lr_fraction)


def optimizer(tc: TrainConfig, mesh=None) -> optax.GradientTransformation:
  """Global-norm clipping, then `OPTIMIZERS[tc.optimizer]` on the schedule (over `mesh`)."""
  if tc.optimizer not in OPTIMIZERS:
    raise ValueError(f"--optimizer {tc.optimizer!r} is unknown. Fix: use one of "
                     f"{sorted(OPTIMIZERS)}.")
  tx = OPTIMIZERS[tc.optimizer](tc, schedule(tc), mesh)
  return optax.chain(optax.clip_by_global_norm(tc.grad_clip), tx) if tc.grad_clip else tx


def lm_loss(params, model: transformer.Transformer, tokens_BT1, weights_BT, *,
            aux_loss: Callable | None = None):
  """The training objective and the mean cross-entropy (nats) of the scored next tokens.

  .. math:: \\mathcal L = \\frac{\\sum_{bt} w_{bt}\\,(-\\log p(y_{bt} | y_{b,<t}))}
     {\\sum_{bt} w_{bt}}, \\quad y = \\text{tokens}[:, 1:]

  Args:
    params: the model's params.
    model: the `transformer.Transformer` to apply.
    tokens_BT1: `(B, T+1)` token ids; the model reads `[:, :-1]` and predicts `[:, 1:]`.
    weights_BT: `(B, T)` weights of the scored targets (0 for padding or prompts).
    aux_loss: `aux_loss(params, intermediates) -> scalar` added to the objective, read from
      the model's sown intermediates of this batch (e.g. a head-orthogonality penalty).

  Returns:
    `(objective, cross_entropy)`; they are equal without `aux_loss`.
  """
  if aux_loss is None:
    logits_BTV = model.apply({"params": params}, tokens_BT1[:, :-1])
  else:
    logits_BTV, state = model.apply({"params": params}, tokens_BT1[:, :-1],
                                    mutable=["intermediates"])
  ce = transformer.next_token_loss(logits_BTV, tokens_BT1, weights_BT)
  if aux_loss is None:
    return ce, ce
  return ce + aux_loss(params, state["intermediates"]), ce


def loss_fn(params, model: transformer.Transformer, tokens_BT1, weights_BT):
  """The mean cross-entropy (nats) of the scored next tokens (`lm_loss` without extras)."""
  return lm_loss(params, model, tokens_BT1, weights_BT)[1]


def exact_match(logits_BTV, tokens_BT1, weights_BT):
  """Fraction of sequences whose every scored target is the arg-max (`data.exact_match`)."""
  wrong_BT = (logits_BTV.argmax(-1) != tokens_BT1[:, 1:]) & (weights_BT > 0)
  return jnp.mean(~wrong_BT.any(-1))


def eval_metrics(params, model: transformer.Transformer, tokens_BT1, weights_BT):
  """`{loss, exact_match}` of one validation batch (see `loss_fn`, `exact_match`)."""
  logits_BTV = model.apply({"params": params}, tokens_BT1[:, :-1])
  return {"loss": transformer.next_token_loss(logits_BTV, tokens_BT1, weights_BT),
          "exact_match": exact_match(logits_BTV, tokens_BT1, weights_BT)}


def train_step(state: TrainState, tokens_BT1, weights_BT, *, model, tx,
               lr_schedule: Callable = lambda step: 0.0, params_fn: Callable | None = None,
               aux_loss: Callable | None = None):
  """One optimizer step. Returns the new state and `{loss, grad_norm, lr}` of this step.

  Args:
    state: `TrainState(step, params, opt_state)`; `params` are the trained leaves.
    tokens_BT1: `(B, T+1)` token ids of this step's batch.
    weights_BT: `(B, T)` target weights.
    model: the `transformer.Transformer`.
    tx: the optax transformation.
    lr_schedule: reported as the `lr` metric (the schedule inside `tx` is what acts).
    params_fn: maps the trained leaves to the model's params (e.g. frozen base + LoRA
      factors); default: the trained leaves are the params.
    aux_loss: added to the objective (`lm_loss`); the `loss` metric stays the cross-entropy.
  """
  def objective(trained):
    params = trained if params_fn is None else params_fn(trained)
    return lm_loss(params, model, tokens_BT1, weights_BT, aux_loss=aux_loss)

  (_, ce), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  metrics = {"loss": ce, "grad_norm": optax.tree.norm(grads), "lr": lr_schedule(state.step)}
  return TrainState(state.step + 1, optax.apply_updates(state.params, updates), opt_state), metrics


class Trainer(NamedTuple):
  """The compiled pieces of a run on one mesh (built by `build`)."""

  init: Callable  # key -> TrainState, placed on `shardings`
  step: Callable  # (state, tokens, weights) -> (state, metrics), donates `state`
  evaluate: Callable  # (params, tokens, weights) -> {loss, exact_match}
  shardings: TrainState
  abstract: TrainState
  batch_sharding: Any


def build(cfg: transformer.Config, tx: optax.GradientTransformation, mesh,
          lr_schedule: optax.Schedule = lambda step: 0.0) -> Trainer:
  """Jits init, step and evaluation with the state sharded over `mesh` (see `sharding`).

  Args:
    cfg: model config.
    tx: any optax transformation.
    mesh: a `("data", "fsdp")` mesh from `sharding.make_mesh`.
    lr_schedule: reported as the `lr` metric (the schedule inside `tx` is what acts).

  Returns:
    A `Trainer`.
  """
  model = transformer.Transformer(cfg)

  def init(key):
    params = transformer.init(cfg, key)
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

  abstract = jax.eval_shape(init, jax.random.key(0))
  shardings = TrainState(sharding.replicated(mesh),
                         sharding.param_shardings(mesh, abstract.params),
                         sharding.param_shardings(mesh, abstract.opt_state))
  batch = sharding.batch_sharding(mesh)
  step = jax.jit(lambda s, t, w: train_step(s, t, w, model=model, tx=tx, lr_schedule=lr_schedule),
                 in_shardings=(shardings, batch, batch),
                 out_shardings=(shardings, sharding.replicated(mesh)), donate_argnums=0)
  evaluate = jax.jit(lambda p, t, w: eval_metrics(p, model, t, w),
                     in_shardings=(shardings.params, batch, batch))
  return Trainer(jax.jit(init, out_shardings=shardings), step, evaluate, shardings, abstract,
                 batch)


# The fields that define the compiled step; runs that agree on them share one executable.
STEP_FIELDS = ("optimizer", "steps", "learning_rate", "muon_learning_rate", "warmup_steps",
               "final_lr_fraction", "weight_decay", "grad_clip", "mesh")

# Compiled trainers of this process, keyed by `(cfg, STEP_FIELDS values)`: a sweep of runs that
# differ only in seed or data compiles once. Oldest evicted beyond `TRAINER_CACHE_SIZE`;
# `TRAINERS.clear()` frees them.
TRAINERS: dict[tuple, Trainer] = {}
TRAINER_CACHE_SIZE = 8


def cached_trainer(cfg: transformer.Config, tc: TrainConfig) -> Trainer:
  """`build(cfg, optimizer(tc, mesh), mesh, schedule(tc))`, reused from `TRAINERS` if there."""
  key = (cfg, tuple(getattr(tc, f) for f in STEP_FIELDS))
  if key not in TRAINERS:
    while len(TRAINERS) >= TRAINER_CACHE_SIZE:
      TRAINERS.pop(next(iter(TRAINERS)))
    mesh = sharding.make_mesh(sharding.parse_mesh(tc.mesh))
    TRAINERS[key] = build(cfg, optimizer(tc, mesh), mesh, schedule(tc))
  return TRAINERS[key]

