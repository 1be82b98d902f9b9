"""Muon under a device mesh: the sharded layouts equal one device, on 8 simulated CPUs."""

import functools

import jax
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import optim
import transformer
from experiments.train import sharding

CONFIGS = {  # GPT: 8 layers, every mesh owns them; Llama: 4 layers, owned by fsdp=4 of
  # data=2,fsdp=4 and replicated (the fallback) under fsdp=8
    "gpt": transformer.preset("tiny", d_model=32, n_heads=2, n_layers=8, max_len=16,
                              vocab_size=64),
    "llama": transformer.preset("llama-tiny", d_model=32, n_heads=4, n_kv_heads=2, d_ff=64,
                                n_layers=4, max_len=16, vocab_size=64),
}


def _grads(params, seed):
  """Standard-normal gradients, drawn on the host (no per-shape compile)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)


LR = 0.02  # Muon's learning rate in `train --optimizer muon`


@functools.cache
def _steps(mesh_spec: str, shard):
  """Two steps of `optim.muon` on random gradients: params, Muon's direction and momentum.

  One tree holds both models (`{"gpt": …, "llama": …}`), so each layout compiles once.
  Returned on the host, plus the live params; the direction is the second update / `LR`.
  """
  mesh = sharding.make_mesh(sharding.parse_mesh(mesh_spec))
  tx = optim.muon(LR, weight_decay=0.1, adam_learning_rate=1e-3,
                  **({} if shard is None else {"shard": shard, "mesh": mesh}))
  place = lambda tree: jax.device_put(tree, sharding.param_shardings(mesh, tree))
  params = place({name: jax.jit(transformer.init, static_argnums=0)(cfg, jax.random.key(0))
                  for name, cfg in CONFIGS.items()})
  state = place(tx.init(params))

  @jax.jit
  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state, updates

  for seed in (1, 2):
    params, state, updates = step(params, state, place(_grads(params, seed)))
  mu = state.inner_states["muon"].inner_state[0].mu
  direction = jax.tree.map(lambda u: u / LR, updates)
  return jax.device_get((params, direction, mu)), params


@pytest.mark.parametrize("mesh_spec", ["data=2,fsdp=4", "fsdp=8"])
def test_owner_muon_equals_one_device(mesh_spec):
  # (`shard="replicate"` is compared with the one-device numbers in
  # tests/experiments/test_benchmarks_muon_sharding.py, alongside its HLO.)
  (ref_params, ref_dir, ref_mu), _ = _steps("data=1", None)
  (params, direction, mu), live = _steps(mesh_spec, "owner")
  close = lambda a, b, atol: jax.tree.map(
      lambda x, y: np.testing.assert_allclose(x, y, rtol=0, atol=atol), a, b)
  close(params, ref_params, 1e-6)
  close(mu, ref_mu, 1e-6)
  # At unit learning rate the direction's entries reach ~0.4: 5e-6 is ~40 float32 ulps there.
  # (One device alone differs by 7e-7 between a batch of 8 and of 1 `(32, 32)` matrices:
  # XLA:CPU's batched dot rounds differently, and Newton–Schulz amplifies it.)
  close(direction, ref_dir, 5e-6)
  for family in CONFIGS:
    w_q = ref_dir[family]["blocks"]["attn"]["w_q"]
    assert np.abs(w_q).max() > 0.05  # a real update to compare, not zeros
    assert len(live[family]["blocks"]["attn"]["w_q"].sharding.device_set) == 8


def test_owner_spec_splits_the_layer_axis_or_falls_back():
  P = PartitionSpec
  mesh = sharding.make_mesh({"data": 2, "fsdp": 4})
  assert optim.owner_spec((8, 32, 64), mesh) == P(("data", "fsdp"), None, None)
  assert optim.owner_spec((4, 32, 64), mesh) == P("fsdp", None, None)  # the largest divisor
  assert optim.owner_spec((2, 3, 32, 16), mesh) == P("data", None, None, None)
  assert optim.owner_spec((4, 32, 64), mesh, axes=("data",)) == P("data", None, None)
  assert optim.owner_spec((3, 32, 64), mesh) == P()  # no divisor: gather and replicate
  assert optim.owner_spec((32, 64), mesh) == P()  # no layer axis
  with pytest.raises(ValueError, match="not axes of the mesh"):
    optim.owner_spec((8, 32, 64), mesh, axes=("model",))


def test_owner_layout_is_where_the_iteration_runs():
  # The lowered program pins the momentum to the owner layout: 8 devices, one layer each.
  mesh = sharding.make_mesh({"data": 2, "fsdp": 4})
  x = jax.device_put(np.ones((8, 16, 32), np.float32),
                     NamedSharding(mesh, PartitionSpec(None, None, "fsdp")))
  tx = optim.scale_by_muon(shard="owner", mesh=mesh, matrix_axes=optim.MatrixAxes(-2, -1))
  text = jax.jit(tx.update).lower({"w": x}, tx.init({"w": x})).as_text()
  assert '<@mesh, [{"data", "fsdp"}, {}, {}]>' in text, text


def test_bad_shard_arguments_name_the_fix():
  mesh = sharding.make_mesh({"fsdp": 8})
  with pytest.raises(ValueError, match="needs the device mesh"):
    optim.scale_by_muon(shard="owner")
  with pytest.raises(ValueError, match="unknown shard"):
    optim.scale_by_muon(shard="layers", mesh=mesh)
  with pytest.raises(ValueError, match="without shard"):
    optim.muon(0.02, mesh=mesh)
  with pytest.raises(ValueError, match="not axes of the mesh"):
    optim.scale_by_muon(shard="owner", mesh=mesh, shard_axes=("tensor",))
