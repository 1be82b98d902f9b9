"""Dense and matrix-free Jacobians against each other, jacrev, and numpy float64.

Compilation is what these tests cost: parameters and inputs are drawn by numpy
(`random_params`), and a dense Jacobian takes the layer's parameters as an argument, so one
program serves every layer (and every config with the same block) instead of one per layer.
"""

import functools

import jax
import numpy as np
import pytest

import transformer
from analysis import jacobians
from tests.conftest import random_params

T, D = 8, 32


def _normal(seed, shape):
  return jax.device_put(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


@pytest.fixture(scope="module")
def model():
  cfg = transformer.preset("tiny", d_model=D, n_heads=4, vocab_size=64, max_len=32,
                           init_std=0.2)
  return cfg, random_params(cfg), _normal(1, (T, D))


def _layer_params(params, l, dtype=np.float32):
  """Layer `l`'s block weights as numpy arrays (no compiled slicing); float64 for references."""
  return jax.tree.map(lambda w: np.asarray(w, dtype)[l], params["blocks"])


def _layer(cfg, params, l=0, part="block"):
  return functools.partial(transformer.block_fn(cfg, part), _layer_params(params, l))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _dense(cfg, part, layer_params, x):
  """`jacobians.jacobian` of one layer (`part` of `block_fn`), its weights an argument."""
  return jacobians.jacobian(functools.partial(transformer.block_fn(cfg, part), layer_params), x)


@functools.partial(jax.jit, static_argnums=0)
def _layer_inputs(cfg, blocks, x):
  return jacobians.layer_inputs(cfg, blocks, x)


def test_dense_jacobian_matches_jacrev_and_layout(model):
  cfg, params, x = model
  f = _layer(cfg, params, part="attn")
  J = jacobians.jacobian(f, x)
  assert J.shape == (T * D, T * D)
  J_rev = jax.jit(jax.jacrev(f))(x).reshape(T * D, T * D)
  np.testing.assert_allclose(J, J_rev, atol=1e-5)
  # Token-major blocks: J[i·d:(i+1)·d, j·d:(j+1)·d] = ∂y_i/∂x_j.
  dy_dx2 = jax.jit(jax.jacfwd(lambda x2: f(x.at[2].set(x2))[5]))(x[2])
  np.testing.assert_allclose(J[5 * D:6 * D, 2 * D:3 * D], dy_dx2, atol=1e-5)


def test_memory_guard_refuses_with_the_estimate(model):
  cfg, params, x = model
  with pytest.raises(MemoryError, match=r"0\.2 MiB \(262,144 bytes\)"):
    jacobians.jacobian(_layer(cfg, params), x, max_bytes=1000)


def test_matrix_free_singular_values_match_dense(model):
  cfg, params, x = model
  with jax.enable_x64(True):
    p64, x64 = _layer_params(params, 0, np.float64), np.asarray(x, np.float64)
    s = np.linalg.svd(np.asarray(_dense(cfg, "block", p64, x64)), compute_uv=False)
    res = jax.jit(lambda p, x: jacobians.jacobian_top_singular_values(
        functools.partial(transformer.block_fn(cfg), p), x, 6, tol=1e-10,
        krylov_dim=T * D))(p64, x64)
    np.testing.assert_allclose(res.values, s[:6], rtol=1e-6)
    assert bool(res.converged.all())


def test_defaults_converge_on_a_generic_96_by_96_map():
  G = np.random.default_rng(0).standard_normal((96, 96))
  Gj = G.astype(np.float32)
  res = jax.jit(lambda x: jacobians.jacobian_top_singular_values(lambda z: Gj @ z, x, 5))(
      np.zeros(96, np.float32))
  s = np.linalg.svd(G, compute_uv=False)[:5]
  assert bool(res.converged.all())
  np.testing.assert_allclose(res.values, s, rtol=1e-4)
  assert np.all(np.abs(np.asarray(res.values) - s) <= np.asarray(res.bounds))


@functools.partial(jax.jit, static_argnums=0)
def _jacfwd(f, *args):
  return jax.jacfwd(f, argnums=len(args) - 1)(*args)


def _dense_sv64(cfg, params, l, x):
  """Singular values of the dense Jacobian of layer `l`'s block at `x`, in float64 (the
  weights an argument: one compilation for every layer of every config with this block)."""
  with jax.enable_x64(True):
    J = _jacfwd(transformer.block_fn(cfg), _layer_params(params, l, np.float64),
                np.asarray(x, np.float64))
    return np.linalg.svd(np.asarray(J).reshape(x.size, x.size), compute_uv=False)


@functools.cache
def _wide():
  """Two layers at d_model 64, T 16 (T·D = 1024), at init scale: `(cfg, params, x, xs, sv)`
  with `xs` the stream entering each layer and `sv[l]` the float64 singular values of layer
  `l`'s dense Jacobian there. The float64 references of the T·D = 1024 tests, computed once."""
  cfg = transformer.preset("tiny", d_model=64, n_layers=2, max_len=16)
  params = random_params(cfg)
  x = _normal(1, (16, 64))
  xs = np.asarray(_layer_inputs(cfg, params["blocks"], x))
  return cfg, params, x, xs, [_dense_sv64(cfg, params, l, xs[l]) for l in range(2)]


def test_defaults_converge_on_a_block_jacobian_at_td_1024():
  # Near init the block is close to the identity: the top singular values cluster
  # (about 1.04, 1.04, 1.04, ...), the hard case for Krylov methods. Layer 0 of `_wide`.
  cfg, params, x, _, sv = _wide()
  res = jax.jit(lambda p, x: jacobians.jacobian_top_singular_values(
      functools.partial(transformer.block_fn(cfg), p), x, 8))(_layer_params(params, 0), x)
  s = sv[0][:8]
  assert bool(res.converged.all())
  np.testing.assert_allclose(res.values, s, rtol=1e-4)


def test_matrix_free_eigenvalues_match_numpy_eigvals(model):
  cfg, params, x = model
  f = _layer(cfg, params)
  lam = np.linalg.eigvals(np.asarray(_dense(cfg, "block", _layer_params(params, 0), x),
                                     np.float64))
  top = jax.jit(lambda x, s: jacobians.jacobian_top_eigenvalues(f, x, 1, shift=s))  # s traced
  res = top(x, 0.0)
  np.testing.assert_allclose(np.abs(res.values[0]), np.abs(lam).max(), rtol=1e-4)
  shifted = top(x, 1.0)
  np.testing.assert_allclose(np.abs(shifted.values[0]), np.abs(lam - 1).max(), rtol=1e-3)
  assert bool(res.converged[0]) and bool(shifted.converged[0])


def test_token_dependency_and_causality(model):
  cfg, params, x = model
  f = _layer(cfg, params)
  J = np.asarray(_dense(cfg, "block", _layer_params(params, 0), x))
  D_ref = np.sqrt((J.reshape(T, D, T, D) ** 2).sum((1, 3)))
  dependency = jax.jit(jacobians.token_dependency, static_argnums=0)
  lower = jax.jit(jacobians.is_block_lower_triangular, static_argnums=1)
  D_causal = dependency(f, x)
  np.testing.assert_allclose(D_causal, D_ref, rtol=1e-4, atol=1e-6)
  assert bool(lower(D_causal, (1, 1)))
  assert bool(lower(J, (D, D)))
  bidir = cfg.replace(causal=False)
  D_bidir = dependency(_layer(bidir, params), x)
  assert not bool(lower(D_bidir, (1, 1)))
  assert float(jax.jit(jacobians.causal_leak)(D_bidir)) > 0.01


def test_depth_profile_matches_dense_products(model):
  cfg, params, x = model
  prof = jax.jit(functools.partial(jacobians.depth_profile, cfg, k=3))(params["blocks"], x)
  for name in ("layer_sv", "spectral_radius", "dist_from_one", "end_to_end_sv"):
    assert prof[f"{name}_converged"].shape == prof[name].shape
    assert bool(prof[f"{name}_converged"].all()), name
  xs = np.asarray(_layer_inputs(cfg, params["blocks"], x))
  Js = [np.asarray(_dense(cfg, "block", _layer_params(params, l), xs[l]), np.float64)
        for l in range(cfg.n_layers)]
  for l, J in enumerate(Js):
    np.testing.assert_allclose(prof["layer_sv"][l], np.linalg.svd(J, compute_uv=False)[:3],
                               rtol=1e-4)
    np.testing.assert_allclose(prof["spectral_radius"][l], np.abs(np.linalg.eigvals(J)).max(),
                               rtol=1e-3)
  e2e = np.linalg.svd(Js[1] @ Js[0], compute_uv=False)[:3]
  np.testing.assert_allclose(prof["end_to_end_sv"], e2e, rtol=1e-4)


def test_block_top_singular_values_vmapped_over_layers_at_td_1024():
  # Leading batch axes: two layers' Jacobians at their own inputs, one jitted vmap, against
  # float64 SVDs of the dense Jacobians.
  cfg, params, _, xs, sv = _wide()
  f = transformer.block_fn(cfg)
  res = jax.jit(jax.vmap(lambda p, x: jacobians.jacobian_top_singular_values(
      functools.partial(f, p), x, 8)))(params["blocks"], xs)
  assert res.values.shape == (2, 8) and bool(res.converged.all())
  for l in range(2):
    s = sv[l][:8]
    err = np.abs(np.asarray(res.values[l], np.float64) - s)
    assert np.all(err <= np.asarray(res.bounds[l])) and np.all(err <= 1e-4 * s[0])


def test_model_jacobian_matches_dense_end_to_end(model):
  cfg, params, _ = model
  tokens_BT = np.random.default_rng(2).integers(0, cfg.vocab_size, (2, T), dtype=np.int32)
  run = jax.jit(jacobians.model_jacobian_top_singular_values, static_argnums=(1, 3))
  res = run(params, cfg, tokens_BT, 5)
  assert res.values.shape == (2, 5) and bool(res.converged.all())
  # The stream after the embeddings is token embedding + learned position, as in the model.
  x_BTD = np.asarray(jax.jit(jacobians.stream_input, static_argnums=1)(params, cfg, tokens_BT))
  np.testing.assert_allclose(x_BTD, np.asarray(params["embed"]["embedding"])[tokens_BT]
                             + np.asarray(params["pos_embed"]["embedding"])[None, :T], rtol=1e-6)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    f = transformer.block_fn(cfg)

    def stack(p, z):  # the layers one after another, unrolled: independent of stack_fn's scan
      for l in range(cfg.n_layers):
        z = f(transformer.layer(p, l), z)
      return z

    for b in range(2):
      J = _jacfwd(stack, p64, np.asarray(x_BTD[b], np.float64)).reshape(T * D, T * D)
      s = np.linalg.svd(np.asarray(J), compute_uv=False)[:5]
      err = np.abs(np.asarray(res.values[b], np.float64) - s)
      assert np.all(err <= np.asarray(res.bounds[b])) and np.all(err <= 1e-4 * s[0])
  # The same from the stream itself, unbatched.
  one = run(params, cfg, x_BTD[1], 5)
  np.testing.assert_allclose(one.values, res.values[1], rtol=1e-5)


def test_model_jacobian_rejects_a_stream_of_the_wrong_width(model):
  cfg, params, _ = model
  with pytest.raises(ValueError, match="d_model"):
    jacobians.model_jacobian_top_singular_values(params, cfg, np.ones((T, D + 1), np.float32), 2)
