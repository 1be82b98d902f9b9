"""Run folders: the config as JSON, and Orbax checkpoints of params and optimizer state.

A run folder holds `config.json` (written once, checked on every resume) and `checkpoints/<step>/`
with two Orbax items, `params` and `opt_state`, saved with `ocp.args.StandardSave` and read
back with `ocp.args.StandardRestore` onto the shardings of the current mesh. No pickle.

Only finite states are saved (`save` refuses NaN/inf), and reading tolerates damage: a
checkpoint that cannot be read is reported in one line and the next older intact one is used
(`restore_latest`); training moves the damaged one aside to `checkpoints/<step>.corrupt`.

Example:
  >>> import tempfile, jax, jax.numpy as jnp
  >>> from experiments.train import checkpoint
  >>> run_dir = tempfile.mkdtemp()
  >>> params, opt_state = {"w": jnp.ones((2, 3))}, {"count": jnp.zeros((), jnp.int32)}
  >>> mgr = checkpoint.open_manager(run_dir, keep=3)
  >>> checkpoint.save(mgr, 100, params, opt_state); mgr.wait_until_finished()
  >>> device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  >>> target = lambda tree: checkpoint.abstract(tree, jax.tree.map(lambda _: device, tree))
  >>> step, p, o = checkpoint.restore_latest(mgr, target(params), target(opt_state))
  >>> step, p["w"].shape
  (100, (2, 3))
  >>> mgr.close()
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"


class ConfigMismatch(ValueError):
  """The config of a resumed run differs from the one saved in its folder."""


class CorruptCheckpoint(ValueError):
  """No intact checkpoint could be read (the message names the files and the fix)."""


class NonFiniteState(FloatingPointError):
  """A state holding NaN or infinite values was about to be saved."""


def write_config(run_dir: str, config: dict[str, Any]) -> None:
  """Writes `config` (a JSON-able dict of dicts) to `run_dir/config.json`, atomically.

  The text goes to a temporary file in `run_dir` that is then renamed over `config.json`, so a
  reader (another process of a multi-process run, a crash mid-write) never sees half a file.
  """
  os.makedirs(run_dir, exist_ok=True)
  text = json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n"
  tmp = os.path.join(run_dir, f".{CONFIG_FILE}.{os.getpid()}.tmp")
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, os.path.join(run_dir, CONFIG_FILE))


def read_config(run_dir: str) -> dict[str, Any]:
  """The dict saved by `write_config`.

  Raises:
    FileNotFoundError: if `run_dir` holds no `config.json`.
    CorruptCheckpoint: if it does not parse.
  """
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} does not exist. Fix: pass the folder of a run written by "
                            "`python -m experiments train` (it holds config.json).")
  try:
    with open(path) as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise CorruptCheckpoint(f"{path} is not valid JSON ({e}). Fix: restore the file or start "
                            "a new run folder.") from None


def check_config(saved: dict[str, Any], current: dict[str, Any], ignore=()) -> None:
  """Raises `ConfigMismatch` listing every field where `current` differs from `saved`.

  Args:
    saved: the dict read from the run folder (sections such as `train`, `model`).
    current: the dict this process would write.
    ignore: field names allowed to differ on resume (they do not change the trajectory).
  """
  diffs = []
  for section in sorted(set(saved) | set(current)):
    old, new = saved.get(section, {}), current.get(section, {})
    for key in sorted(set(old) | set(new)):
      if key not in ignore and old.get(key) != new.get(key):
        diffs.append(f"  {section}.{key}: saved {old.get(key)!r}, now {new.get(key)!r}")
  if diffs:
    raise ConfigMismatch("the run folder was written with a different config:\n"
                         + "\n".join(diffs) + "\nFix: rerun with the saved values, or "
                         "start a new run folder (--run-dir).")


def checkpoint_dir(run_dir: str) -> str:
  return os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR))


def open_manager(run_dir: str, keep: int = 3, read_only: bool = False) -> ocp.CheckpointManager:
  """An Orbax `CheckpointManager` on `run_dir/checkpoints` keeping the last `keep` steps.

  Saves are synchronous: when `save` returns the step is on disk, so a killed run loses at
  most one checkpoint interval (an asynchronous save still in flight would add to that).
  """
  with _quiet_orbax():  # read-only managers log three warnings about options they ignore
    options = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else keep,
                                           create=not read_only, read_only=read_only,
                                           enable_async_checkpointing=False)
    return ocp.CheckpointManager(checkpoint_dir(run_dir), options=options)


@contextlib.contextmanager
def _quiet_orbax():
  """Silences Orbax's absl log lines (damage is reported once, in our own words)."""
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    logger.setLevel(level)


@jax.jit
def _all_finite(tree) -> jax.Array:
  leaves = [jnp.isfinite(x).all() for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.stack(leaves).all() if leaves else jnp.array(True)


def all_finite(tree) -> bool:
  """Whether every floating-point leaf of `tree` is free of NaN and infinity."""
  return bool(_all_finite(tree))


def save(mgr: ocp.CheckpointManager, step: int, params, opt_state) -> None:
  """Saves `params` and `opt_state` as checkpoint `step` of `mgr`.

  Raises:
    NonFiniteState: if either holds NaN or infinity (nothing is written).
  """
  if not all_finite((params, opt_state)):
    raise NonFiniteState(f"the state of step {step} holds NaN or infinite values; not saved.")
  mgr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                         opt_state=ocp.args.StandardSave(opt_state)))


def abstract(tree, shardings):
  """`ShapeDtypeStruct`s of `tree` placed on `shardings` (the restore target)."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def restore(mgr: ocp.CheckpointManager, step: int, params_target, opt_state_target=None):
  """Reads checkpoint `step` onto the shapes, dtypes and shardings of the targets.

  Returns:
    `(params, opt_state)` with the pytree structure of the targets (`opt_state` is `None`
    when `opt_state_target` is).
  """
  items = {"params": ocp.args.StandardRestore(params_target)}
  if opt_state_target is not None:
    items["opt_state"] = ocp.args.StandardRestore(opt_state_target)
  out = mgr.restore(step, args=ocp.args.Composite(**items))
  return out["params"], (out["opt_state"] if opt_state_target is not None else None)


def _describe(e: Exception) -> str:
  first = (str(e).strip().splitlines() or [""])[0]
  return f"{type(e).__name__}: {first[:160]}"


def _warn(message: str) -> None:
  print(f"warning: {message}", file=sys.stderr)


def restore_latest(mgr: ocp.CheckpointManager, params_target, opt_state_target=None, *,
                   step: int | None = None, on_corrupt: Callable[[int], None] | None = None,
                   warn: Callable[[str], None] = _warn):
  """Restores checkpoint `step` (default: the latest intact one), in one line on damage.

  Steps are tried newest first. When an older one is read, each newer unreadable one is
  reported through `warn` (one line naming its step) and passed to `on_corrupt` (training
  moves it aside); when none is, one `CorruptCheckpoint` lists them all.

  Args:
    mgr: the manager of the run's `checkpoints/`.
    params_target: restore target of the params (`abstract`).
    opt_state_target: restore target of the optimizer state, or `None` to skip it.
    step: a specific step; then no other step is tried.
    on_corrupt: called with each unreadable step.
    warn: where the one-line warnings go (default: stderr).

  Returns:
    `(step, params, opt_state)`.

  Raises:
    FileNotFoundError: there is no checkpoint (or no checkpoint `step`).
    CorruptCheckpoint: no candidate could be read; names the folders and the fix.
  """
  folder = str(mgr.directory)
  steps = sorted(mgr.all_steps(), reverse=True)
  if step is not None:
    if step not in steps:
      raise FileNotFoundError(f"{folder} has no checkpoint of step {step}; it holds steps "
                              f"{sorted(steps)}. Fix: pass one of those to --step.")
    steps = [step]
  if not steps:
    raise FileNotFoundError(f"{folder} holds no finished checkpoint. Fix: train longer than "
                            "--checkpoint-every steps, or pass another run folder.")
  errors, damaged = [], []
  for s in steps:
    try:
      with _quiet_orbax():
        params, opt_state = restore(mgr, s, params_target, opt_state_target)
    except Exception as e:  # Orbax and TensorStore raise many types on damage
      errors.append(f"step {s} ({_describe(e)})")
      damaged.append((s, _describe(e)))
      continue
    for bad, why in damaged:  # reported only when there is something to fall back to
      warn(f"checkpoint {os.path.join(folder, str(bad))} is unreadable ({why}); using step {s}.")
      if on_corrupt is not None:
        on_corrupt(bad)
    return s, params, opt_state
  raise CorruptCheckpoint(f"no readable checkpoint in {folder}: {'; '.join(errors)}. Fix: "
                          "delete the damaged step folders (training then restarts from the "
                          "last intact one), or pass another run folder.")


def quarantine(mgr: ocp.CheckpointManager, step: int) -> str:
  """Renames checkpoint `step` to `<step>.corrupt` (kept for inspection); returns the new path."""
  src = os.path.join(str(mgr.directory), str(step))
  dst = src + ".corrupt"
  n = 1
  while os.path.exists(dst):
    n += 1
    dst = f"{src}.corrupt{n}"
  os.rename(src, dst)
  mgr.reload()
  return dst


def restore_params(run_dir: str, params_target, step: int | None = None):
  """The params of checkpoint `step` (default: the latest intact one) of `run_dir`.

  Raises:
    FileNotFoundError: if the run folder has no finished checkpoint.
    CorruptCheckpoint: if none can be read.
  """
  mgr = open_manager(run_dir, read_only=True)
  try:
    return restore_latest(mgr, params_target, step=step)[1]
  finally:
    mgr.close()


def load_run(run_dir: str, step: int | None = None):
  """`(params, cfg)` of checkpoint `step` (default: the latest intact one) of a training run.

  The params land on the default device, whatever mesh the run trained on.

  Args:
    run_dir: a folder written by `python -m experiments train` (`config.json`,
      `checkpoints/`).
    step: which checkpoint; `None` for the latest readable one.

  Returns:
    `(params, cfg)`: the params pytree and its `transformer.Config`.

  Raises:
    FileNotFoundError: no run folder, no checkpoint, or no checkpoint `step`.
    CorruptCheckpoint: the checkpoint (or every checkpoint) is unreadable.

  Example:
    >>> import tempfile, jax, transformer
    >>> from experiments.train import checkpoint
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2)
    >>> run_dir = tempfile.mkdtemp()
    >>> checkpoint.write_config(run_dir, {"model": cfg.to_dict()})
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> mgr = checkpoint.open_manager(run_dir)
    >>> checkpoint.save(mgr, 7, params, {"count": jax.numpy.zeros(())}); mgr.close()
    >>> loaded, loaded_cfg = checkpoint.load_run(run_dir)
    >>> loaded_cfg == cfg
    True
  """
  import transformer  # the checkpoint layer itself is model-agnostic

  cfg = transformer.Config(**read_config(run_dir)["model"])
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return restore_params(run_dir, abstract(shapes, jax.tree.map(lambda _: device, shapes)),
                        step), cfg
