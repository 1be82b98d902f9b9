"""The training loop: one jitted, sharded step; Orbax checkpoints; exact resume.

    python -m experiments train --model tiny --optimizer adamw --steps 300 --data stdlib

About 15 s on 2 CPU cores: the `tiny` model's validation loss falls from ln 256 = 5.55
nats to about 2.36, well below the unigram entropy of the bytes (3.21 nats). A run writes
`runs/train/<run-id>/{config.json, metrics.jsonl, checkpoints/, events.out.tfevents.*,
results.json, report.md, loss.png}` (`experiments.train.run_folder`).

The state is `TrainState(step, params, opt_state)`; the step function is
`jax.jit(..., donate_argnums=0)` with `NamedSharding`s on state and batch over a
`("data", "fsdp")` mesh (`experiments.train.sharding`). The loss is the mean cross-entropy over the
scored targets; the optimizer is any `optax.GradientTransformation` (the CLI offers those in
`OPTIMIZERS`, each after global-norm clipping, with a warm-up + cosine schedule). On the
synthetic tasks (`--data task:NAME`) each evaluation also reports exact-match accuracy.

Batches are pure functions of `(seed, step)` (`experiments.data`), so restarting a run in an
existing folder restores the latest intact checkpoint and replays the exact stream: on CPU the
resumed run ends bit-identical to an uninterrupted one. A non-finite loss, gradient norm or
parameter stops the run and exits 1; no checkpoint of a non-finite state is ever written, so
the last checkpoint is the last good step. Ctrl-C saves and exits 130.

Multi-process (multi-host) runs start the same command in every process with `--distributed`,
`--coordinator-address`, `--num-processes` and each one's `--process-id` (README, "Training";
tested with two local processes in `tests/experiments/train/test_multiprocess.py`).
"""

from __future__ import annotations

import contextlib
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

import transformer
from experiments import console, data
from experiments.train import checkpoint, sharding
from experiments.train import report as train_report
from experiments.train.config import RESUMABLE, TrainConfig, model_config
from experiments.train.run_folder import RunFolder
from experiments.train.step import (
    Trainer,
    TrainState,
    build,
    cached_trainer,
    loss_fn,
    schedule,
)


class TrainResult(NamedTuple):
  """What `train` returns: the final state, the run folder and the last validation loss."""

  state: TrainState
  run_dir: str
  val_loss: float


class NonFiniteLoss(FloatingPointError):
  """The training loss, the gradient norm or the parameters became NaN or infinite."""


# ---------------------------------------------------------------------------- multi-process


def initialize_distributed(tc: TrainConfig) -> None:
  """Joins this process to a multi-process run (`jax.distributed.initialize`) if `tc` asks.

  Does nothing unless `tc.distributed`, or when this process has already joined. Unset
  launch fields are left to JAX: `$JAX_COORDINATOR_ADDRESS`, then the cluster auto-detection
  of Cloud TPU, SLURM and Open MPI. On CPU the processes' collectives run over gloo (JAX's
  default `jax_cpu_collectives_implementation`).

  Args:
    tc: the run's config (`distributed`, `coordinator_address`, `num_processes`,
      `process_id`).

  Raises:
    ValueError: JAX was already in use in this process (the backend is initialized), or the
      coordinator, the process count or the process id could not be determined.

  Example:
    >>> import jax
    >>> from experiments.train import TrainConfig, initialize_distributed
    >>> initialize_distributed(TrainConfig())  # not --distributed: nothing to join
    >>> jax.process_count()
    1
  """
  if not tc.distributed or jax.distributed.is_initialized():
    return
  try:
    jax.distributed.initialize(coordinator_address=tc.coordinator_address or None,
                               num_processes=tc.num_processes or None,
                               process_id=None if tc.process_id < 0 else tc.process_id)
  except (RuntimeError, ValueError) as e:
    raise ValueError(f"--distributed: jax.distributed.initialize() failed ({e}). Fix: start "
                     "every process before it touches JAX, and pass --coordinator-address "
                     "HOST:PORT, --num-processes N and --process-id I unless a cluster "
                     "(Cloud TPU, SLURM, Open MPI) provides them.") from None


def _share_config(run_dir: str, record: dict, primary: bool) -> None:
  """The first process writes a new run's `config.json`; the others wait until it is whole.

  Without the wait another process could read the file half-written (`RunFolder` checks an
  existing config and writes a missing one).
  """
  from jax.experimental import multihost_utils

  if primary and not os.path.exists(os.path.join(run_dir, checkpoint.CONFIG_FILE)):
    checkpoint.write_config(run_dir, record)
  multihost_utils.sync_global_devices("experiments.train: config.json written")


# ------------------------------------------------------------------------------- the loop


def default_run_dir(tc: TrainConfig) -> str:
  return os.path.join("runs", "train", f"{time.strftime('%Y%m%d-%H%M%S')}-{tc.model}-"
                                       f"{tc.optimizer}")


@contextlib.contextmanager
def _deferred_interrupt():
  """Ctrl-C (SIGINT) sets a flag the loop checks between steps; a second Ctrl-C stops at once.

  A `KeyboardInterrupt` raised in the middle of a step could land after the donated state
  was consumed and before the new one was bound, leaving nothing valid to save. Deferring
  it to the step boundary means the interrupted run always saves its current step. In a
  multi-process run the processes stop together at the next step where they log, evaluate
  or save (`_stop_agreed`), whichever of them was interrupted.
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


def _stop_agreed(requested: bool) -> bool:
  """Whether any process of the run asks to stop; every process must call it at the same step.

  One process alone stops when it is asked. In a multi-process run a process that stopped by
  itself would leave the others waiting in the next step's collectives (and itself in the
  checkpoint's), so the processes vote at the steps where they all synchronise anyway.
  """
  if jax.process_count() == 1:
    return requested
  from jax.experimental import multihost_utils

  votes = multihost_utils.process_allgather(np.array([requested]))
  return bool(np.any(votes))


def _due(step: int, every: int, end: int) -> bool:
  """Whether a periodic action with period `every` (0: never) runs at `step` (always at `end`)."""
  return bool(every and step % every == 0) or step == end


class _MetricsBuffer:
  """Step metrics kept on the device until `flush` fetches them all at once (one sync)."""

  def __init__(self, folder: RunFolder, tokens_per_step: int):
    self.folder, self.tokens_per_step = folder, tokens_per_step
    self.pending: list[tuple[int, dict]] = []
    self.restart_clock()

  def restart_clock(self) -> None:
    self.clock = time.perf_counter()

  def add(self, step: int, metrics: dict) -> None:
    self.pending.append((step, metrics))

  def flush(self) -> dict:
    """Fetches, checks and logs the pending metrics; returns the last step's (`{}` if none).

    Raises:
      NonFiniteLoss: a loss or gradient norm is NaN or infinite (that row is not logged).
    """
    if not self.pending:
      return {}
    pending, self.pending = self.pending, []
    host = jax.device_get([m for _, m in pending])
    now = time.perf_counter()
    tokens_per_s = len(pending) * self.tokens_per_step / (now - self.clock)
    self.clock = now
    entry = {}
    for (s, _), m in zip(pending, host, strict=True):
      entry = {"step": s, **{k: float(v) for k, v in m.items()}, "tokens_per_s": tokens_per_s}
      for name in ("loss", "grad_norm"):
        if not math.isfinite(entry[name]):
          self.folder.flush()
          raise NonFiniteLoss(_stop_message(f"the {name.replace('_', ' ')} is {entry[name]} "
                                            f"at step {s}", self.folder))
      self.folder.log(entry)
    self.folder.flush()
    return entry


def _stop_message(what: str, folder: RunFolder) -> str:
  good = (f"The last good checkpoint is step {folder.last_saved} in {folder.path}/checkpoints"
          if folder.last_saved else "No checkpoint was written (none was finite yet)")
  return (f"{what}; stopped. {good}. Fix: lower --learning-rate, raise --warmup-steps, or "
          "set --grad-clip.")


def _check_inputs(tc: TrainConfig, cfg: transformer.Config, src) -> int:
  """The sequence length of `src`'s batches, after checking they fit `cfg`."""
  probe = src.batch(tc.seed, 0, 1)
  seq_len = probe.tokens.shape[1] - 1
  if seq_len > cfg.max_len:
    raise ValueError(f"sequences of {seq_len} tokens exceed the model's max_len={cfg.max_len}. "
                     "Fix: lower --seq-len or pass --model-overrides max_len=N.")
  if src.vocab_size > cfg.vocab_size:
    raise ValueError(f"--data {tc.data!r} holds token ids up to {src.vocab_size - 1}, but the "
                     f"model's vocab_size is {cfg.vocab_size} (larger ids would read no "
                     f"embedding). Fix: pass --model-overrides vocab_size={src.vocab_size}.")
  return seq_len


def _evaluate(trainer: Trainer, params, src, tc: TrainConfig, put) -> dict:
  """Mean `{val_loss, val_exact_match}` over `eval_batches` fixed validation batches."""
  rows = jax.device_get([trainer.evaluate(params, *put(src.batch(tc.seed, i, tc.batch_size,
                                                                 "val")))
                         for i in range(tc.eval_batches)])
  out = {"val_loss": float(np.mean([r["loss"] for r in rows]))}
  if isinstance(src, data.TaskSource):  # exact match of a whole text window says nothing
    out["val_exact_match"] = float(np.mean([r["exact_match"] for r in rows]))
  return out


def sharpness_tracker(tc: TrainConfig, cfg: transformer.Config):
  """The `analysis.SharpnessTracker` of `--track-sharpness` for `tc.optimizer`, or None.

  AdamW (`b1 = 0.9, b2 = 0.95`, as `OPTIMIZERS["adamw"]`) is read through its second moments:
  the preconditioned sharpness `λ_max(P^{-1/2} H P^{-1/2})` against `(2 + 2β₁)/((1 − β₁)η)`,
  plus the raw `λ_max(H)` against `2/η`; SGD with Nesterov momentum 0.9 against its own
  threshold (Cohen et al. 2021 and 2022). Gradient clipping and weight decay are ignored by
  the thresholds.
  """
  if not tc.track_sharpness:
    return None
  import analysis  # only when asked for: `train` does not otherwise need it

  model = transformer.Transformer(cfg)
  loss = lambda p, batch: loss_fn(p, model, *batch)
  if tc.optimizer == "adamw":
    return analysis.SharpnessTracker(loss, optimizer="adam", raw=True, b1=0.9, b2=0.95,
                                     eps=1e-8, seed=tc.seed)
  return analysis.SharpnessTracker(loss, optimizer="sgd", momentum=0.9, nesterov=True,
                                   seed=tc.seed)


def _loop(tc: TrainConfig, trainer: Trainer, src, folder: RunFolder, state: TrainState,
          start: int, end: int, seq_len: int, callback, callback_every: int, tracker=None):
  """Steps `start + 1 … end`: log, evaluate, checkpoint, callback. Returns `(state, val_loss)`."""
  def put(batch: data.Batch):
    return (sharding.put_batch(batch.tokens, trainer.batch_sharding),
            sharding.put_batch(batch.weights, trainer.batch_sharding))

  def save(state: TrainState) -> None:
    try:
      folder.save(int(state.step), state.params, state.opt_state)
    except checkpoint.NonFiniteState:
      raise NonFiniteLoss(_stop_message(f"the parameters became NaN or infinite by step "
                                        f"{int(state.step)}", folder)) from None

  buffer = _MetricsBuffer(folder, tc.batch_size * seq_len)
  lr = schedule(tc)
  bar = console.progress(end, start, "train",
                          disable=not (tc.progress and jax.process_index() == 0))
  val_loss = math.nan
  with _deferred_interrupt() as interrupt, contextlib.closing(bar):
    try:
      for s in range(start + 1, end + 1):
        state, metrics = trainer.step(state, *put(src.batch(tc.seed, s, tc.batch_size)))
        buffer.add(s, metrics)
        due = {name: _due(s, every, end) for name, every in (
            ("log", tc.log_every), ("callback", callback_every), ("eval", tc.eval_every),
            ("save", tc.checkpoint_every))}
        due["sharpness"] = bool(tracker is not None and s % tc.track_sharpness == 0)
        if jax.process_count() == 1 and interrupt["requested"]:
          bar.update(1)
          raise KeyboardInterrupt
        if not any(due.values()):
          bar.update(1)
          continue
        if _stop_agreed(interrupt["requested"]):
          bar.update(1)
          raise KeyboardInterrupt  # with several processes: every one, at this same step
        last = buffer.flush()
        # The postfix first, then the count: a printed progress line shows this step's numbers.
        bar.set_postfix(loss=f"{last['loss']:.3f}", tok_s=f"{last['tokens_per_s']:,.0f}")
        bar.update(1)
        if callback is not None and callback_every and s % callback_every == 0:
          callback(s, state, last)
        if due["sharpness"]:
          row = tracker(state.params, put(src.batch(tc.seed, s, tc.batch_size)), lr(s),
                        state.opt_state)
          folder.log({"step": s, **row})
        if due["eval"]:
          row = _evaluate(trainer, state.params, src, tc, put)
          folder.log({"step": s, **row})
          val_loss = row["val_loss"]
        if due["save"]:
          save(state)
        buffer.restart_clock()
    except KeyboardInterrupt:
      buffer.flush()
      if all(not x.is_deleted() for x in jax.tree.leaves(state)):  # a second Ctrl-C mid-step
        save(state)
      print(f"\ninterrupted: saved step {folder.last_saved} in {folder.path}/checkpoints",
            file=sys.stderr)
      raise
  return state, val_loss


def train(tc: TrainConfig, *, tx: optax.GradientTransformation | None = None,
          callback: Callable[[int, TrainState, dict], None] | None = None,
          callback_every: int = 0) -> TrainResult:
  """Trains (or resumes) the run described by `tc`.

  With `tc.distributed` this process first joins the multi-process run
  (`initialize_distributed`); every process then calls `train` with the same config (but its
  own `process_id`) and the mesh spans all of their devices.

  Args:
    tc: the run's config.
    tx: an optax transformation to use instead of `optimizer(tc)` (applied as given: no
      clipping is added).
    callback: called as `callback(step, state, metrics)` every `callback_every` steps, with
      host floats in `metrics` (e.g. to log spectra during training).
    callback_every: period of the callback (0: never).

  Returns:
    A `TrainResult`. A run already at its last step (or at `stop_at`) is not stepped again:
    its state is restored and `val_loss` is the last one logged.

  Raises:
    ValueError: an impossible setting (`TrainConfig.validate`), data that do not fit the
      model, a mismatched run folder (`checkpoint.ConfigMismatch`), or a multi-process run
      that could not start or whose mesh leaves out devices.
    NonFiniteLoss: the loss, gradient norm or params became NaN/inf (the checkpoints hold
      only finite states).
    KeyboardInterrupt: after saving a checkpoint of the current state.

  Example:
    >>> import tempfile
    >>> from experiments.train import TrainConfig, train
    >>> tc = TrainConfig(steps=3, warmup_steps=1, batch_size=2, seq_len=16, eval_batches=1,
    ...                  model_overrides="d_model=32,n_heads=2", progress=False,
    ...                  run_dir=tempfile.mkdtemp())
    >>> result = train(tc)
    >>> int(result.state.step)
    3
  """
  tc.validate()
  initialize_distributed(tc)
  tc = tc.replace(run_dir=tc.run_dir or default_run_dir(tc))
  cfg = model_config(tc)
  src = data.source(tc.data, tc.seq_len, tc.val_fraction)
  note = getattr(getattr(src, "corpus", None), "note", "")
  if note:
    print(f"data: {note}", file=sys.stderr)
  seq_len = _check_inputs(tc, cfg, src)
  mesh = sharding.make_mesh(sharding.parse_mesh(tc.mesh))
  if jax.process_count() > 1 and mesh.size != jax.device_count():
    raise ValueError(f"--mesh {tc.mesh!r} covers {mesh.size} of the {jax.device_count()} devices "
                     f"of this {jax.process_count()}-process run; every process must hold part "
                     f"of the mesh. Fix: make data × fsdp = {jax.device_count()}, e.g. --mesh "
                     f"data={jax.process_count()},fsdp={jax.local_device_count()}.")
  sharding.check_batch_size(tc.batch_size, mesh)
  trainer = cached_trainer(cfg, tc) if tx is None else build(cfg, tx, mesh, schedule(tc))

  primary = jax.process_index() == 0
  record = {"train": tc.to_dict(), "model": cfg.to_dict()}
  end = min(tc.steps, tc.stop_at or tc.steps)
  if jax.process_count() > 1:
    _share_config(tc.run_dir, record, primary)
  with RunFolder(tc.run_dir, record, tc.keep_checkpoints, RESUMABLE, primary) as folder:
    restored = folder.restore(
        checkpoint.abstract(trainer.abstract.params, trainer.shardings.params),
        checkpoint.abstract(trainer.abstract.opt_state, trainer.shardings.opt_state))
    if restored is None:
      start, state = 0, trainer.init(jax.random.key(tc.seed))
    else:
      start, params, opt_state = restored
      state = TrainState(jax.device_put(jnp.int32(start), trainer.shardings.step), params,
                         opt_state)
    if start >= end:
      done = (f"run {tc.run_dir} is already complete: step {start} of {tc.steps}"
              if start >= tc.steps else f"run {tc.run_dir} is already at step {start} "
              f"(--stop-at {tc.stop_at}); raise --stop-at or drop it to continue")
      print(f"{done}. Nothing to train.", file=sys.stderr)
      last = folder.last_val_loss()
      if primary and start >= tc.steps and not os.path.exists(
          os.path.join(tc.run_dir, train_report.RESULTS_FILE)):
        train_report.write(tc.run_dir, record)
      return TrainResult(state, tc.run_dir, math.nan if last is None else last)
    if start:
      print(f"resumed from step {start} of {tc.run_dir}", file=sys.stderr)
    folder.open_log(start)
    state, val_loss = _loop(tc, trainer, src, folder, state, start, end, seq_len, callback,
                            callback_every, sharpness_tracker(tc, cfg))
  if primary:
    train_report.write(tc.run_dir, record)
  return TrainResult(state, tc.run_dir, val_loss)


def load_checkpoint(run_dir: str, step: int | None = None) -> tuple[transformer.Config, Any]:
  """`(cfg, params)` of a training run's checkpoint; prefer `checkpoint.load_run`.

  Kept for callers of the `(cfg, params)` order; `checkpoint.load_run` returns
  `(params, cfg)` like the rest of the library.
  """
  params, cfg = checkpoint.load_run(run_dir, step)
  return cfg, params

