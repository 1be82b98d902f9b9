"""Run folders: the config as JSON, and Orbax checkpoints of params and optimizer state.

A run folder holds `config.json` (written once, checked on every resume) and `checkpoints/<step>/`
with two Orbax items, `params` and `opt_state`, saved with `ocp.args.StandardSave` and read
back with `ocp.args.StandardRestore` onto the shardings of the current mesh. No pickle.

Example:
  >>> mgr = open_manager(run_dir, keep=3)
  >>> save(mgr, 100, params, opt_state); mgr.wait_until_finished()
  >>> params, opt_state = restore(mgr, 100, abstract_params, abstract_opt_state)
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"


class ConfigMismatch(ValueError):
  """The config of a resumed run differs from the one saved in its folder."""


def write_config(run_dir: str, config: dict[str, Any]) -> None:
  """Writes `config` (a JSON-able dict of dicts) to `run_dir/config.json`."""
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, CONFIG_FILE), "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write("\n")


def read_config(run_dir: str) -> dict[str, Any]:
  """The dict saved by `write_config`.

  Raises:
    FileNotFoundError: if `run_dir` holds no `config.json`.
  """
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} does not exist. Fix: pass the folder of a run written by "
                            "`python -m experiments train` (it holds config.json).")
  with open(path) as f:
    return json.load(f)


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


def open_manager(run_dir: str, keep: int = 3) -> ocp.CheckpointManager:
  """An Orbax `CheckpointManager` on `run_dir/checkpoints` keeping the last `keep` steps.

  Saves are synchronous: when `save` returns the step is on disk, so a killed run loses at
  most one checkpoint interval (an asynchronous save still in flight would add to that).
  """
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                         enable_async_checkpointing=False)
  return ocp.CheckpointManager(os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR)),
                               options=options)


def save(mgr: ocp.CheckpointManager, step: int, params, opt_state) -> None:
  """Saves `params` and `opt_state` as checkpoint `step` of `mgr`."""
  mgr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                         opt_state=ocp.args.StandardSave(opt_state)))


def abstract(tree, shardings):
  """`ShapeDtypeStruct`s of `tree` placed on `shardings` (the restore target)."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def restore(mgr: ocp.CheckpointManager, step: int, params_target, opt_state_target):
  """Reads checkpoint `step` onto the shapes, dtypes and shardings of the targets.

  Returns:
    `(params, opt_state)` with the pytree structure of the targets.
  """
  out = mgr.restore(step, args=ocp.args.Composite(
      params=ocp.args.StandardRestore(params_target),
      opt_state=ocp.args.StandardRestore(opt_state_target)))
  return out.params, out.opt_state


def restore_params(run_dir: str, params_target, step: int | None = None):
  """The params of checkpoint `step` (default: the latest) of `run_dir`, without optimizer state.

  Raises:
    FileNotFoundError: if the run folder has no finished checkpoint.
  """
  mgr = ocp.CheckpointManager(os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR)),
                              options=ocp.CheckpointManagerOptions(read_only=True))
  step = mgr.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"{run_dir} has no finished checkpoint. Fix: train longer than "
                            "--checkpoint-every steps, or pass another run folder.")
  out = mgr.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(params_target)))
  mgr.close()
  return out.params
