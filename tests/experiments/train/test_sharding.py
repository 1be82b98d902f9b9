"""Meshes and shardings: the sharded train step equals the single-device step."""

import functools

import chex
import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec

from experiments import data, train
from experiments.train import sharding

CFG = train.model_config(train.TrainConfig(model_overrides="d_model=32,n_heads=2,max_len=32"))
TC = train.TrainConfig(learning_rate=1e-2, warmup_steps=1, steps=10)


def test_parse_mesh_and_errors():
  assert sharding.parse_mesh("data=8") == {"data": 8, "fsdp": 1}
  assert sharding.parse_mesh("data=2,fsdp=4") == {"data": 2, "fsdp": 4}
  for bad in ("model=2", "data=0", "data=x", "data"):
    with pytest.raises(ValueError, match="Fix"):
      sharding.parse_mesh(bad)
  with pytest.raises(ValueError, match="needs 16 devices but 8"):
    sharding.make_mesh({"data": 16})


def test_mesh_axes_are_auto():
  mesh = sharding.make_mesh({"data": 2, "fsdp": 4})
  assert dict(mesh.shape) == {"data": 2, "fsdp": 4}
  assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)


def test_leaf_spec_splits_the_largest_divisible_axis():
  assert sharding.leaf_spec((2, 32, 128), 4) == PartitionSpec(None, None, "fsdp")
  assert sharding.leaf_spec((256, 32), 4) == PartitionSpec("fsdp", None)
  assert sharding.leaf_spec((3, 5), 4) == PartitionSpec()
  assert sharding.leaf_spec((), 4) == PartitionSpec()
  assert sharding.leaf_spec((256, 32), 1) == PartitionSpec()


def test_batch_not_divisible_by_mesh_is_a_clear_error():
  mesh = sharding.make_mesh({"data": 2, "fsdp": 4})
  with pytest.raises(ValueError, match="not divisible by the 8 devices.*multiple of 8"):
    sharding.check_batch_size(12, mesh)
  sharding.check_batch_size(16, mesh)


@functools.cache
def two_steps(mesh_spec: str):
  """Init params, params and metrics after two steps (host arrays), and the live state."""
  mesh = sharding.make_mesh(sharding.parse_mesh(mesh_spec))
  trainer = train.build(CFG, train.optimizer(TC), mesh, train.schedule(TC))
  state = trainer.init(jax.random.key(0))
  init_params = jax.device_get(state.params)
  task = data.TaskSource("copy")
  for step in (1, 2):
    batch = task.batch(0, step, 16)
    tokens = sharding.put_batch(batch.tokens, trainer.batch_sharding)
    weights = sharding.put_batch(batch.weights, trainer.batch_sharding)
    state, metrics = trainer.step(state, tokens, weights)
  return init_params, jax.device_get(state.params), jax.device_get(metrics), state


@pytest.mark.parametrize("mesh_spec", ["data=8", "data=2,fsdp=4"])
def test_sharded_step_matches_single_device(mesh_spec):
  init_params, ref_params, ref_metrics, _ = two_steps("data=1")
  _, params, metrics, state = two_steps(mesh_spec)
  np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5)
  chex.assert_trees_all_close(params, ref_params, atol=1e-5, rtol=1e-5)
  # The weights moved, so the comparison is not between two copies of the init.
  assert np.abs(params["blocks"]["attn"]["w_q"] - init_params["blocks"]["attn"]["w_q"]).max() > 1e-3
  w_q = state.params["blocks"]["attn"]["w_q"]  # (L=2, d=32, H*dh=32)
  mu = state.opt_state[1][0].mu["blocks"]["attn"]["w_q"]
  assert len(w_q.sharding.device_set) == 8
  if "fsdp" in mesh_spec:
    assert w_q.sharding.spec == PartitionSpec(None, None, "fsdp")
    assert {s.data.shape for s in w_q.addressable_shards} == {(2, 32, 8)}
    assert mu.sharding.spec == w_q.sharding.spec
  else:
    assert w_q.sharding.is_fully_replicated
    assert {s.data.shape for s in w_q.addressable_shards} == {(2, 32, 32)}

