"""Run folders: config JSON checked on resume; Orbax save/restore of params and optimizer state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import checkpoint


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
