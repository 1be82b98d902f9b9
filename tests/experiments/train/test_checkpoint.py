"""Run folders: config JSON checked on resume; Orbax save/restore of params and optimizer state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.train import checkpoint


def test_config_round_trip_and_mismatch(tmp_path):
  saved = {"train": {"steps": 10, "lr": 0.1, "stop_at": 0}, "model": {"d_model": 32}}
  checkpoint.write_config(str(tmp_path), saved)
  assert checkpoint.read_config(str(tmp_path)) == saved
  checkpoint.check_config(saved, {**saved, "train": {**saved["train"], "stop_at": 5}},
                          ignore=("stop_at",))
  changed = {"train": {"steps": 10, "lr": 0.2, "stop_at": 0}, "model": {"d_model": 64}}
  with pytest.raises(checkpoint.ConfigMismatch) as err:
    checkpoint.check_config(saved, changed)
  assert "train.lr: saved 0.1, now 0.2" in str(err.value)
  assert "model.d_model: saved 32, now 64" in str(err.value)
  with pytest.raises(FileNotFoundError, match="config.json"):
    checkpoint.read_config(str(tmp_path / "elsewhere"))


def test_save_restore_is_exact_and_keeps_the_last_k(tmp_path):
  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
            "b": jnp.asarray(rng.normal(size=4), jnp.float32)}
  tx = optax.adamw(1e-2)
  opt_state = tx.init(params)
  _, opt_state = tx.update(params, opt_state, params)  # non-trivial moments and count
  mgr = checkpoint.open_manager(str(tmp_path), keep=2)
  for step in (1, 2, 3):
    checkpoint.save(mgr, step, jax.tree.map(lambda x, s=step: x * s, params), opt_state)
  mgr.wait_until_finished()
  assert mgr.all_steps() == [2, 3]
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  place = lambda tree: checkpoint.abstract(tree, jax.tree.map(lambda _: device, tree))
  got_params, got_opt = checkpoint.restore(mgr, 3, place(params), place(opt_state))
  mgr.close()
  assert jax.tree.structure(got_opt) == jax.tree.structure(opt_state)
  jax.tree.map(np.testing.assert_array_equal, got_opt, opt_state)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, 3 * b), got_params, params)
  only = checkpoint.restore_params(str(tmp_path), place(params), step=2)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, 2 * b), only, params)


def test_restore_params_without_checkpoints_is_a_clear_error(tmp_path):
  checkpoint.open_manager(str(tmp_path)).close()
  with pytest.raises(FileNotFoundError, match="no finished checkpoint"):
    checkpoint.restore_params(str(tmp_path), {"w": jax.ShapeDtypeStruct((2,), jnp.float32)})


def _place(tree):
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return checkpoint.abstract(tree, jax.tree.map(lambda _: device, tree))


def _damage(run_dir, step):
  import os
  for root, _, names in os.walk(os.path.join(run_dir, "checkpoints", str(step))):
    for name in names:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\0garbage")


def test_non_finite_states_are_never_saved(tmp_path):
  mgr = checkpoint.open_manager(str(tmp_path))
  good = {"w": jnp.ones((2, 2))}
  for bad in (jnp.array([1.0, jnp.nan]), jnp.array([jnp.inf, 0.0])):
    with pytest.raises(checkpoint.NonFiniteState, match="step 3"):
      checkpoint.save(mgr, 3, {"w": bad}, {"count": jnp.zeros(())})
    with pytest.raises(checkpoint.NonFiniteState):
      checkpoint.save(mgr, 3, good, {"mu": bad})
  assert mgr.all_steps() == []
  checkpoint.save(mgr, 3, good, {"count": jnp.zeros((), jnp.int32)})  # ints are never checked
  assert mgr.all_steps() == [3]
  mgr.close()


def test_a_damaged_checkpoint_falls_back_in_one_line(tmp_path):
  run_dir = str(tmp_path)
  params = {"w": jnp.arange(6.0).reshape(2, 3)}
  opt_state = {"count": jnp.zeros((), jnp.int32)}
  mgr = checkpoint.open_manager(run_dir, keep=5)
  for step in (1, 2, 3):
    checkpoint.save(mgr, step, jax.tree.map(lambda x, s=step: x * s, params), opt_state)
  _damage(run_dir, 3)
  warnings, damaged = [], []
  step, got, _ = checkpoint.restore_latest(mgr, _place(params), _place(opt_state),
                                           on_corrupt=damaged.append, warn=warnings.append)
  assert step == 2 and damaged == [3]
  np.testing.assert_array_equal(got["w"], 2 * params["w"])
  assert len(warnings) == 1 and "checkpoints/3 is unreadable" in warnings[0]
  assert "\n" not in warnings[0]
  # Training moves the damaged step aside and may then write that step again.
  moved = checkpoint.quarantine(mgr, 3)
  assert moved.endswith("3.corrupt") and mgr.all_steps() == [1, 2]
  checkpoint.save(mgr, 3, params, opt_state)
  assert mgr.all_steps() == [1, 2, 3]
  # An explicit step is not replaced by another one.
  _damage(run_dir, 2)
  with pytest.raises(checkpoint.CorruptCheckpoint, match="step 2"):
    checkpoint.restore_latest(mgr, _place(params), step=2)
  with pytest.raises(FileNotFoundError, match=r"holds steps \[1, 2, 3\]"):
    checkpoint.restore_latest(mgr, _place(params), step=7)
  mgr.close()


def test_every_checkpoint_damaged_is_one_error_naming_the_folder(tmp_path):
  run_dir = str(tmp_path)
  params = {"w": jnp.ones((2, 3))}
  mgr = checkpoint.open_manager(run_dir)
  for step in (1, 2):
    checkpoint.save(mgr, step, params, {"count": jnp.zeros(())})
  mgr.close()
  _damage(run_dir, 1)
  _damage(run_dir, 2)
  with pytest.raises(checkpoint.CorruptCheckpoint) as err:
    checkpoint.restore_params(run_dir, _place(params))
  message = str(err.value)
  assert "no readable checkpoint in" in message and "checkpoints" in message
  assert "step 2 (" in message and "step 1 (" in message and "Fix:" in message
  with open(tmp_path / "config.json", "w") as f:
    f.write("{not json")
  with pytest.raises(checkpoint.CorruptCheckpoint, match="config.json is not valid JSON"):
    checkpoint.read_config(run_dir)
