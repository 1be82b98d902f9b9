"""Dense and matrix-free Jacobians against each other, jacrev, and numpy float64."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from analysis import jacobians

T, D = 8, 32


@pytest.fixture(scope="module")
def model():
  cfg = transformer.preset("tiny", d_model=D, n_heads=4, vocab_size=64, max_len=32,
                           init_std=0.2)
  params = transformer.init(cfg, jax.random.key(0))
  x = jax.random.normal(jax.random.key(1), (T, D))
  return cfg, params, x


def _layer(cfg, params, l=0, part="block"):
  return functools.partial(transformer.block_fn(cfg, part), transformer.layer(params, l))


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
    p64 = jax.tree.map(lambda a: a.astype(jnp.float64), transformer.layer(params, 0))
    x64 = x.astype(jnp.float64)
    f = functools.partial(transformer.block_fn(cfg), p64)
    s = np.linalg.svd(np.asarray(jacobians.jacobian(f, x64)), compute_uv=False)
    res = jax.jit(lambda p, x: jacobians.jacobian_top_singular_values(
        functools.partial(transformer.block_fn(cfg), p), x, 6, tol=1e-10,
        krylov_dim=T * D))(p64, x64)
    np.testing.assert_allclose(res.values, s[:6], rtol=1e-6)
    assert bool(res.converged.all())


def test_defaults_converge_on_a_generic_96_by_96_map():
  G = np.random.default_rng(0).standard_normal((96, 96))
  Gj = jnp.asarray(G, jnp.float32)
  res = jax.jit(lambda x: jacobians.jacobian_top_singular_values(lambda z: Gj @ z, x, 5))(
      jnp.zeros(96))
  s = np.linalg.svd(G, compute_uv=False)[:5]
  assert bool(res.converged.all())
  np.testing.assert_allclose(res.values, s, rtol=1e-4)
  assert np.all(np.abs(np.asarray(res.values) - s) <= np.asarray(res.bounds))


def test_defaults_converge_on_a_block_jacobian_at_td_1024():
  # Near init the block is close to the identity: the top singular values cluster
  # (1.0420, 1.0415, 1.0410, ...), the hard case for Krylov methods.
  cfg = transformer.preset("tiny", d_model=64, n_layers=1, max_len=16)
  params = transformer.layer(transformer.init(cfg, jax.random.key(0), seq_len=8), 0)
  x = jax.random.normal(jax.random.key(1), (16, 64))
  res = jax.jit(lambda p, x: jacobians.jacobian_top_singular_values(
      functools.partial(transformer.block_fn(cfg), p), x, 8))(params, x)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
    f64 = functools.partial(transformer.block_fn(cfg), p64)
    J = np.asarray(jax.jit(jax.jacfwd(f64))(x.astype(jnp.float64))).reshape(1024, 1024)
  s = np.linalg.svd(J, compute_uv=False)[:8]
  assert bool(res.converged.all())
  np.testing.assert_allclose(res.values, s, rtol=1e-4)


def test_matrix_free_eigenvalues_match_numpy_eigvals(model):
  cfg, params, x = model
  f = _layer(cfg, params)
  lam = np.linalg.eigvals(np.asarray(jacobians.jacobian(f, x), np.float64))
  res = jax.jit(lambda x: jacobians.jacobian_top_eigenvalues(f, x, 1))(x)
  np.testing.assert_allclose(np.abs(res.values[0]), np.abs(lam).max(), rtol=1e-4)
  shifted = jax.jit(lambda x: jacobians.jacobian_top_eigenvalues(f, x, 1, shift=1.0))(x)
  np.testing.assert_allclose(np.abs(shifted.values[0]), np.abs(lam - 1).max(), rtol=1e-3)
  assert bool(res.converged[0]) and bool(shifted.converged[0])


def test_token_dependency_and_causality(model):
  cfg, params, x = model
  f = _layer(cfg, params)
  J = np.asarray(jacobians.jacobian(f, x))
  D_ref = np.sqrt((J.reshape(T, D, T, D) ** 2).sum((1, 3)))
  D_causal = jax.jit(jacobians.token_dependency, static_argnums=0)(f, x)
  np.testing.assert_allclose(D_causal, D_ref, rtol=1e-4, atol=1e-6)
  assert bool(jacobians.is_block_lower_triangular(D_causal))
  assert bool(jacobians.is_block_lower_triangular(jnp.asarray(J), (D, D)))
  bidir = cfg.replace(causal=False)
  g = functools.partial(transformer.block_fn(bidir), transformer.layer(params, 0))
  D_bidir = jacobians.token_dependency(g, x)
  assert not bool(jacobians.is_block_lower_triangular(D_bidir))
  assert float(jacobians.causal_leak(D_bidir)) > 0.01


def test_depth_profile_matches_dense_products(model):
  cfg, params, x = model
  prof = jax.jit(functools.partial(jacobians.depth_profile, cfg, k=3))(params["blocks"], x)
  for name in ("layer_sv", "spectral_radius", "dist_from_one", "end_to_end_sv"):
    assert prof[f"{name}_converged"].shape == prof[name].shape
    assert bool(prof[f"{name}_converged"].all()), name
  xs = jacobians.layer_inputs(cfg, params["blocks"], x)
  Js = [np.asarray(jacobians.jacobian(_layer(cfg, params, l), xs[l]), np.float64)
        for l in range(cfg.n_layers)]
  for l, J in enumerate(Js):
    np.testing.assert_allclose(prof["layer_sv"][l], np.linalg.svd(J, compute_uv=False)[:3],
                               rtol=1e-4)
    np.testing.assert_allclose(prof["spectral_radius"][l], np.abs(np.linalg.eigvals(J)).max(),
                               rtol=1e-3)
  e2e = np.linalg.svd(Js[1] @ Js[0], compute_uv=False)[:3]
  np.testing.assert_allclose(prof["end_to_end_sv"], e2e, rtol=1e-4)


def _dense_sv64(f, x):
  """Singular values of the dense Jacobian of `f` at `x`, in float64."""
  with jax.enable_x64(True):
    J = jax.jit(jax.jacfwd(f))(x.astype(jnp.float64))
    return np.linalg.svd(np.asarray(J).reshape(x.size, x.size), compute_uv=False)


def test_block_top_singular_values_vmapped_over_layers_at_td_1024():
  # Leading batch axes: two layers' Jacobians at their own inputs, one jitted vmap, against
  # float64 SVDs of the dense Jacobians.
  cfg = transformer.preset("tiny", d_model=64, n_layers=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  x = jax.random.normal(jax.random.key(1), (16, 64))
  xs = jacobians.layer_inputs(cfg, params["blocks"], x)
  f = transformer.block_fn(cfg)
  res = jax.jit(jax.vmap(lambda p, x: jacobians.jacobian_top_singular_values(
      functools.partial(f, p), x, 8)))(params["blocks"], xs)
  assert res.values.shape == (2, 8) and bool(res.converged.all())
  for l in range(2):
    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: a.astype(jnp.float64), transformer.layer(params, l))
      s = _dense_sv64(functools.partial(f, p64), xs[l])[:8]
    err = np.abs(np.asarray(res.values[l], np.float64) - s)
    assert np.all(err <= np.asarray(res.bounds[l])) and np.all(err <= 1e-4 * s[0])


def test_model_jacobian_matches_dense_end_to_end(model):
  cfg, params, _ = model
  tokens_BT = jax.random.randint(jax.random.key(2), (2, T), 0, cfg.vocab_size)
  run = jax.jit(jacobians.model_jacobian_top_singular_values, static_argnums=(1, 3))
  res = run(params, cfg, tokens_BT, 5)
  assert res.values.shape == (2, 5) and bool(res.converged.all())
  # The stream after the embeddings is token embedding + learned position, as in the model.
  x_BTD = jacobians.stream_input(params, cfg, tokens_BT)
  np.testing.assert_allclose(x_BTD, params["embed"]["embedding"][tokens_BT]
                             + params["pos_embed"]["embedding"][None, :T], rtol=1e-6)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
    f = transformer.block_fn(cfg)

    def stack(z):  # the layers one after another, unrolled: independent of stack_fn's scan
      for l in range(cfg.n_layers):
        z = f(transformer.layer(p64, l), z)
      return z

    for b in range(2):
      s = _dense_sv64(stack, x_BTD[b])[:5]
      err = np.abs(np.asarray(res.values[b], np.float64) - s)
      assert np.all(err <= np.asarray(res.bounds[b])) and np.all(err <= 1e-4 * s[0])
  # The same from the stream itself, unbatched.
  one = run(params, cfg, x_BTD[1], 5)
  np.testing.assert_allclose(one.values, res.values[1], rtol=1e-5)


def test_model_jacobian_rejects_a_stream_of_the_wrong_width(model):
  cfg, params, _ = model
  with pytest.raises(ValueError, match="d_model"):
    jacobians.model_jacobian_top_singular_values(params, cfg, jnp.ones((T, D + 1)), 2)
