"""The training loop: one jitted, sharded step; Orbax checkpoints; exact resume.

    python -m experiments train --model tiny --optimizer adamw --steps 300 --data stdlib

About 15 s on 2 CPU cores: the `tiny` model's validation loss falls from ln 256 = 5.55
nats to about 2.36, well below the unigram entropy of the bytes (3.21 nats). A run writes
`runs/train/<run-id>/{config.json, metrics.jsonl, checkpoints/, events.out.tfevents.*,
results.json, report.md, loss.png}`.

The state is `TrainState(step, params, opt_state)`; the step function is
`jax.jit(..., donate_argnums=0)` with `NamedSharding`s on state and batch over a
`("data", "fsdp")` mesh (`experiments.sharding`). The loss is the mean cross-entropy over the
scored targets; the optimizer is any `optax.GradientTransformation` (the CLI offers those in
`OPTIMIZERS`, each after global-norm clipping, with a warm-up + cosine schedule).

Batches are pure functions of `(seed, step)` (`experiments.data`), so restarting a run in an
existing folder restores the latest checkpoint and replays the exact stream: on CPU the
resumed run ends bit-identical to an uninterrupted one. A non-finite loss stops the run before
the next checkpoint (the last good one is kept) and exits 1; Ctrl-C saves and exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tqdm
from tensorboardX import SummaryWriter

import transformer
from experiments import checkpoint, data, sharding, train_report


def _field(default, help: str, **kw):
  return dataclasses.field(default=default, metadata={"help": help, **kw})


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything that defines a training run; each field is a `--flag` of the CLI."""

  model: str = _field("tiny", "model preset", choices=sorted(transformer.PRESETS))
  model_overrides: str = _field("", "Config overrides, e.g. 'd_model=32,n_layers=2'")
  data: str = _field("stdlib", "'stdlib', a text file, folder or glob, or task:NAME "
                     f"({', '.join(data.TASKS)})")
  val_fraction: float = _field(0.05, "fraction of files held out for validation")
  seq_len: int = _field(64, "tokens per training sequence (text data)")
  batch_size: int = _field(16, "sequences per step (global, over all devices)")
  optimizer: str = _field("adamw", "optimizer", choices=("adamw", "sgd", "muon"))
  steps: int = _field(300, "total steps; the schedule decays to the end of these")
  learning_rate: float = _field(3e-3, "peak learning rate")
  warmup_steps: int = _field(30, "linear warm-up steps")
  final_lr_fraction: float = _field(0.1, "cosine decay ends at this fraction of the peak")
  weight_decay: float = _field(0.1, "decoupled weight decay on matrices (adamw)")
  grad_clip: float = _field(1.0, "clip the global gradient norm to this (0: no clipping)")
  dtype: str = _field("float32", "matmul compute dtype", choices=("float32", "bfloat16"))
  seed: int = _field(0, "seed of the init and of the batch stream")
  mesh: str = _field("data=1", "device mesh, e.g. 'data=8' or 'data=2,fsdp=4'")
  eval_every: int = _field(100, "validation loss every this many steps (and at the end)")
  eval_batches: int = _field(8, "validation batches per evaluation (the same every time)")
  log_every: int = _field(10, "fetch metrics from the device every this many steps")
  checkpoint_every: int = _field(100, "save a checkpoint every this many steps (and at the end)")
  keep_checkpoints: int = _field(3, "checkpoints kept on disk")
  stop_at: int = _field(0, "stop after this step (0: run to --steps); resume later")
  run_dir: str = _field("", "run folder; an existing one is resumed (default "
                        "runs/train/<time>-<model>-<optimizer>)")
  progress: bool = _field(True, "show a progress bar")
  distributed: bool = _field(False, "call jax.distributed.initialize() (multi-host)")

  def replace(self, **changes) -> TrainConfig:
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


# Fields that may change when a run is resumed: they do not alter the trajectory (on one mesh).
RESUMABLE = ("stop_at", "run_dir", "progress", "log_every", "eval_every", "eval_batches",
             "checkpoint_every", "keep_checkpoints", "mesh", "distributed")


class TrainState(NamedTuple):
  """What a step reads and writes: the step count, the params and the optimizer state."""

  step: jax.Array
  params: Any
  opt_state: Any


class TrainResult(NamedTuple):
  """What `train` returns: the final state, the run folder and the last validation loss."""

  state: TrainState
  run_dir: str
  val_loss: float


class NonFiniteLoss(FloatingPointError):
  """The training loss became NaN or infinite."""


# ------------------------------------------------------------------------------ optimizers


def _matrices(params):
  """Weight decay mask: decay every matrix (2 or more axes counting the layer axis of blocks)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x.ndim >= 3 or (x.ndim == 2 and path[0].key != "blocks"), params)


def _adamw(tc: TrainConfig, schedule):
  return optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=_matrices)


def _sgd(tc: TrainConfig, schedule):
  del tc
  return optax.sgd(schedule, momentum=0.9, nesterov=True)


def _muon(tc: TrainConfig, schedule):
  """Muon on the hidden matrices (`optim.labels`), AdamW on the rest; one schedule for both."""
  import optim  # imported only when asked for: `train` does not otherwise need it

  return optim.muon(learning_rate=schedule, adam_learning_rate=schedule, label_fn=optim.labels,
                    weight_decay=tc.weight_decay)


OPTIMIZERS: dict[str, Callable[[TrainConfig, optax.Schedule], optax.GradientTransformation]] = {
    "adamw": _adamw,
    "sgd": _sgd,
    "muon": _muon,
}


def schedule(tc: TrainConfig) -> optax.Schedule:
  """Linear warm-up to `learning_rate`, then cosine decay to `final_lr_fraction` of it."""
  return optax.warmup_cosine_decay_schedule(
      0.0, tc.learning_rate, tc.warmup_steps, max(tc.steps, tc.warmup_steps + 1),
      tc.learning_rate * tc.final_lr_fraction)


def optimizer(tc: TrainConfig) -> optax.GradientTransformation:
  """Global-norm clipping, then `OPTIMIZERS[tc.optimizer]` on the schedule."""
  if tc.optimizer not in OPTIMIZERS:
    raise ValueError(f"--optimizer {tc.optimizer!r} is unknown. Fix: use one of "
                     f"{sorted(OPTIMIZERS)}.")
  tx = OPTIMIZERS[tc.optimizer](tc, schedule(tc))
  return optax.chain(optax.clip_by_global_norm(tc.grad_clip), tx) if tc.grad_clip else tx


# ----------------------------------------------------------------------------- model, step


def _parse_value(text: str):
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def model_config(tc: TrainConfig) -> transformer.Config:
  """The model's `Config`: the preset, the overrides, and the compute dtype."""
  overrides = {}
  for part in filter(None, (p.strip() for p in tc.model_overrides.split(","))):
    name, eq, value = part.partition("=")
    if not eq:
      raise ValueError(f"--model-overrides: cannot read {part!r}. Fix: write name=value pairs.")
    overrides[name.strip()] = _parse_value(value.strip())
  return transformer.preset(tc.model, dtype=tc.dtype, **overrides)


def loss_fn(params, model: transformer.Transformer, tokens_BT1, weights_BT):
  """Mean cross-entropy (nats) of the scored next tokens.

  .. math:: \\mathcal L = \\frac{\\sum_{bt} w_{bt}\\,(-\\log p(y_{bt} | y_{b,<t}))}
     {\\sum_{bt} w_{bt}}, \\quad y = \\text{tokens}[:, 1:]
  """
  logits_BTV = model.apply({"params": params}, tokens_BT1[:, :-1])
  nll_BT = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, tokens_BT1[:, 1:])
  return (nll_BT * weights_BT).sum() / weights_BT.sum()


def train_step(state: TrainState, tokens_BT1, weights_BT, *, model, tx, lr_schedule):
  """One optimizer step. Returns the new state and `{loss, grad_norm, lr}` of this step."""
  loss, grads = jax.value_and_grad(loss_fn)(state.params, model, tokens_BT1, weights_BT)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": lr_schedule(state.step)}
  return TrainState(state.step + 1, optax.apply_updates(state.params, updates), opt_state), metrics


class Trainer(NamedTuple):
  """The compiled pieces of a run on one mesh (built by `build`)."""

  init: Callable  # key -> TrainState, placed on `shardings`
  step: Callable  # (state, tokens, weights) -> (state, metrics), donates `state`
  eval_loss: Callable  # (params, tokens, weights) -> loss
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
    params = model.init(key, jnp.zeros((1, min(8, cfg.max_len)), jnp.int32))["params"]
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

  abstract = jax.eval_shape(init, jax.random.key(0))
  shardings = TrainState(sharding.replicated(mesh),
                         sharding.param_shardings(mesh, abstract.params),
                         sharding.param_shardings(mesh, abstract.opt_state))
  batch = sharding.batch_sharding(mesh)
  step = jax.jit(lambda s, t, w: train_step(s, t, w, model=model, tx=tx, lr_schedule=lr_schedule),
                 in_shardings=(shardings, batch, batch),
                 out_shardings=(shardings, sharding.replicated(mesh)), donate_argnums=0)
  eval_loss = jax.jit(lambda p, t, w: loss_fn(p, model, t, w),
                      in_shardings=(shardings.params, batch, batch))
  return Trainer(jax.jit(init, out_shardings=shardings), step, eval_loss, shardings, abstract,
                 batch)


# The fields that define the compiled step; runs that agree on them share one executable.
STEP_FIELDS = ("optimizer", "steps", "learning_rate", "warmup_steps", "final_lr_fraction",
               "weight_decay", "grad_clip", "mesh")


@functools.lru_cache(maxsize=8)
def _cached_build(cfg: transformer.Config, key: TrainConfig) -> Trainer:
  mesh = sharding.make_mesh(sharding.parse_mesh(key.mesh))
  return build(cfg, optimizer(key), mesh, schedule(key))


# ------------------------------------------------------------------------------- the loop


def default_run_dir(tc: TrainConfig) -> str:
  return os.path.join("runs", "train", f"{time.strftime('%Y%m%d-%H%M%S')}-{tc.model}-"
                                       f"{tc.optimizer}")


def _read_metrics(path: str, upto: int) -> list[str]:
  """The lines of `metrics.jsonl` up to step `upto` (a resumed run rewrites what follows).

  Reading stops at a torn last line, which a killed process may leave behind.
  """
  if not os.path.exists(path):
    return []
  kept = []
  with open(path) as f:
    for line in f:
      try:
        step = json.loads(line)["step"]
      except (json.JSONDecodeError, KeyError):
        break
      if step <= upto:
        kept.append(line)
  return kept


@contextlib.contextmanager
def _deferred_interrupt():
  """Ctrl-C (SIGINT) sets a flag the loop checks between steps; a second Ctrl-C stops at once.

  A `KeyboardInterrupt` raised in the middle of a step could land after the donated state
  was consumed and before the new one was bound, leaving nothing valid to save. Deferring
  it to the step boundary means the interrupted run always saves its current step.
  """
  flag = {"requested": False}
  if threading.current_thread() is not threading.main_thread():
    yield flag  # signal handlers can only be installed from the main thread
    return

  def handle(signum, frame):
    if flag["requested"]:
      raise KeyboardInterrupt
    flag["requested"] = True

  previous = signal.signal(signal.SIGINT, handle)
  try:
    yield flag
  finally:
    signal.signal(signal.SIGINT, previous)


def train(tc: TrainConfig, *, tx: optax.GradientTransformation | None = None,
          callback: Callable[[int, TrainState, dict], None] | None = None,
          callback_every: int = 0) -> TrainResult:
  """Trains (or resumes) the run described by `tc`.

  Args:
    tc: the run's config.
    tx: an optax transformation to use instead of `optimizer(tc)` (applied as given: no
      clipping is added).
    callback: called as `callback(step, state, metrics)` every `callback_every` steps, with
      host floats in `metrics` (e.g. to log spectra during training).
    callback_every: period of the callback (0: never).

  Returns:
    A `TrainResult`.

  Raises:
    NonFiniteLoss: the loss became NaN/inf (the checkpoints hold only finite states).
    checkpoint.ConfigMismatch: `tc.run_dir` holds a run with another config.
    KeyboardInterrupt: after saving a checkpoint of the current state.

  Example:
    >>> result = train(TrainConfig(steps=50, model_overrides="d_model=32", progress=False))
  """
  run_dir = tc.run_dir or default_run_dir(tc)
  tc = tc.replace(run_dir=run_dir)
  cfg = model_config(tc)
  src = data.source(tc.data, tc.seq_len, tc.val_fraction)
  seq_len = src.batch(tc.seed, 0, 1).tokens.shape[1] - 1
  if seq_len > cfg.max_len:
    raise ValueError(f"sequences of {seq_len} tokens exceed the model's max_len={cfg.max_len}. "
                     "Fix: lower --seq-len or pass --model-overrides max_len=N.")
  mesh = sharding.make_mesh(sharding.parse_mesh(tc.mesh))
  sharding.check_batch_size(tc.batch_size, mesh)
  if tx is None:
    trainer = _cached_build(cfg, TrainConfig(**{f: getattr(tc, f) for f in STEP_FIELDS}))
  else:
    trainer = build(cfg, tx, mesh, schedule(tc))

  primary = jax.process_index() == 0
  record = {"train": tc.to_dict(), "model": cfg.to_dict()}
  if os.path.exists(os.path.join(run_dir, checkpoint.CONFIG_FILE)):
    checkpoint.check_config(checkpoint.read_config(run_dir), record, ignore=RESUMABLE)
  elif primary:
    checkpoint.write_config(run_dir, record)
  mgr = checkpoint.open_manager(run_dir, tc.keep_checkpoints)
  start = mgr.latest_step() or 0
  if start:
    params, opt_state = checkpoint.restore(
        mgr, start, checkpoint.abstract(trainer.abstract.params, trainer.shardings.params),
        checkpoint.abstract(trainer.abstract.opt_state, trainer.shardings.opt_state))
    state = TrainState(jax.device_put(jnp.int32(start), trainer.shardings.step), params,
                       opt_state)
  else:
    state = trainer.init(jax.random.key(tc.seed))
  end = min(tc.steps, tc.stop_at or tc.steps)

  metrics_path = os.path.join(run_dir, "metrics.jsonl")
  kept = _read_metrics(metrics_path, start)
  log = open(metrics_path, "w") if primary else open(os.devnull, "w")
  log.writelines(kept)
  writer = SummaryWriter(run_dir) if primary else None
  bar = tqdm.tqdm(total=end, initial=start, disable=not (tc.progress and primary),
                  desc="train", dynamic_ncols=True)
  pending: list[tuple[int, dict]] = []
  clock = [time.perf_counter()]
  saved = [start]
  val_loss = math.nan

  def emit(entry: dict) -> None:
    log.write(json.dumps(entry) + "\n")
    if writer is not None:
      for k, v in entry.items():
        if k != "step":
          writer.add_scalar(k, v, entry["step"])

  def flush() -> dict:
    """Fetches the pending metrics, checks the loss, logs; returns the last step's."""
    if not pending:
      return {}
    host = jax.device_get([m for _, m in pending])
    now = time.perf_counter()
    tokens_per_s = len(pending) * tc.batch_size * seq_len / (now - clock[0])
    clock[0] = now
    entry = {}
    for (s, _), m in zip(pending, host, strict=True):
      entry = {"step": s, **{k: float(v) for k, v in m.items()}, "tokens_per_s": tokens_per_s}
      if not math.isfinite(entry["loss"]):
        pending.clear()
        raise NonFiniteLoss(f"the training loss is {entry['loss']} at step {s}; stopped. The "
                            f"last good checkpoint is step {saved[0]} in {run_dir}/checkpoints. "
                            "Fix: lower --learning-rate, raise --warmup-steps or --grad-clip.")
      emit(entry)
    pending.clear()
    log.flush()  # so a killed run's log reaches at least its last checkpoint
    bar.set_postfix(loss=f"{entry['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
    return entry

  def evaluate(s: int) -> float:
    losses = [trainer.eval_loss(state.params, *put(src.batch(tc.seed, i, tc.batch_size, "val")))
              for i in range(tc.eval_batches)]
    loss = float(np.mean(jax.device_get(losses)))
    emit({"step": s, "val_loss": loss})
    return loss

  def put(batch: data.Batch):
    return (sharding.put_batch(batch.tokens, trainer.batch_sharding),
            sharding.put_batch(batch.weights, trainer.batch_sharding))

  def save(s: int) -> None:
    if s > saved[0]:
      checkpoint.save(mgr, s, state.params, state.opt_state)
      saved[0] = s

  interrupt_scope = contextlib.ExitStack()
  interrupt = interrupt_scope.enter_context(_deferred_interrupt())
  try:
    for s in range(start + 1, end + 1):
      state, metrics = trainer.step(state, *put(src.batch(tc.seed, s, tc.batch_size)))
      pending.append((s, metrics))
      bar.update(1)
      if interrupt["requested"]:
        raise KeyboardInterrupt
      at = lambda every: (every and s % every == 0) or s == end
      if at(tc.log_every) or at(callback_every) or at(tc.eval_every) or at(tc.checkpoint_every):
        last = flush()
        if callback is not None and callback_every and s % callback_every == 0:
          callback(s, state, last)
        if at(tc.eval_every):
          val_loss = evaluate(s)
        if at(tc.checkpoint_every):
          save(s)
        clock[0] = time.perf_counter()
  except KeyboardInterrupt:
    flush()
    if all(not x.is_deleted() for x in jax.tree.leaves(state)):  # a second Ctrl-C mid-step
      save(int(state.step))
    print(f"\ninterrupted: saved step {saved[0]} in {run_dir}/checkpoints", file=sys.stderr)
    raise
  finally:
    interrupt_scope.close()
    bar.close()
    mgr.wait_until_finished()
    mgr.close()
    log.close()
    if writer is not None:
      writer.close()
  if primary:
    train_report.write(run_dir, record)
  return TrainResult(state, run_dir, val_loss)


def load_checkpoint(run_dir: str) -> tuple[transformer.Config, Any]:
  """The model config and params of the latest checkpoint of a training run folder.

  Args:
    run_dir: a folder written by `train` (holding `config.json` and `checkpoints/`).

  Returns:
    `(cfg, params)`: a `transformer.Config` and the params pytree on the default device.

  Example:
    >>> cfg, params = load_checkpoint("runs/train/20250101-120000-tiny-adamw")
    >>> logits = transformer.Transformer(cfg).apply({"params": params}, tokens)
  """
  cfg = transformer.Config(**checkpoint.read_config(run_dir)["model"])
  abstract = jax.eval_shape(lambda: transformer.Transformer(cfg).init(
      jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"])
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return cfg, checkpoint.restore_params(
      run_dir, checkpoint.abstract(abstract, jax.tree.map(lambda _: device, abstract)))


# ------------------------------------------------------------------------------------ CLI


def parser() -> argparse.ArgumentParser:
  """`--flag` per `TrainConfig` field, with its type, choices, help and default."""
  p = argparse.ArgumentParser(prog="python -m experiments train",
                              description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  for f in dataclasses.fields(TrainConfig):
    flag = "--" + f.name.replace("_", "-")
    if isinstance(f.default, bool):
      p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                     help=f.metadata["help"])
    else:
      p.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"],
                     choices=f.metadata.get("choices"))
  return p


def main(argv=None) -> int:
  """`python -m experiments train [--flags]`; returns the exit status."""
  tc = TrainConfig(**vars(parser().parse_args(argv)))
  if tc.distributed:
    jax.distributed.initialize()
  try:
    result = train(tc)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except NonFiniteLoss as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    return 130
  print(f"step {int(result.state.step)}: validation loss {result.val_loss:.4f} nats; "
        f"run folder {result.run_dir}")
  return 0
