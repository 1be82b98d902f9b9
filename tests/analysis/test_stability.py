"""Tests for analysis.stability: causal Jacobian spectra, the logit bound, effective κ."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.optimize import linear_sum_assignment

import transformer
from analysis.stability import (
    attention_input_bound,
    causal_jacobian_blocks,
    causal_jacobian_eigenvalues,
    causal_jacobian_spectra,
    effective_condition,
    logit_bound,
    max_logit,
)
from transformer.model import Norm


def _cfg(**kw):
  base = dict(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32)
  return transformer.Config(**{**base, **kw})


def _layer_fn(cfg, key, init_std=0.02):
  params = transformer.init(cfg.replace(init_std=init_std), key)
  return functools.partial(transformer.block_fn(cfg), transformer.layer(params, 0))


def _multiset_distance(a, b):
  """Largest distance after optimally matching two multisets of complex numbers."""
  a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
  cost = np.abs(a[:, None] - b[None, :])
  rows, cols = linear_sum_assignment(cost)
  return cost[rows, cols].max()


@pytest.mark.parametrize("residual", [True, False])
def test_blocks_are_the_diagonal_of_the_dense_jacobian(residual):
  cfg = _cfg(residual=residual)
  f = _layer_fn(cfg, jax.random.key(0), init_std=0.3)
  x = jax.random.normal(jax.random.key(1), (6, cfg.d_model))
  blocks = jax.jit(lambda x: causal_jacobian_blocks(f, x))(x)
  J = np.asarray(jax.jit(jax.jacfwd(f))(x)).reshape(6, cfg.d_model, 6, cfg.d_model)
  for t in range(6):
    np.testing.assert_allclose(blocks[t], J[t, :, t, :], atol=1e-6)


@pytest.mark.parametrize("residual", [True, False])
def test_eigenvalues_match_dense_eig(residual):
  cfg = _cfg(residual=residual)
  f = _layer_fn(cfg, jax.random.key(2), init_std=0.3)
  x = jax.random.normal(jax.random.key(3), (6, cfg.d_model))
  lam = jax.jit(lambda x: causal_jacobian_eigenvalues(f, x))(x)
  J = np.asarray(jax.jit(jax.jacfwd(f))(x), np.float64).reshape(6 * cfg.d_model, 6 * cfg.d_model)
  dense = np.linalg.eigvals(J)
  assert lam.shape == (6, cfg.d_model)
  assert _multiset_distance(lam, dense) < 2e-3 * max(1.0, np.abs(dense).max())


def test_non_normal_eigenvalues_one_but_singular_values_large():
  c, T = 3.0, 32
  f = lambda x: x + c * jnp.roll(x, 1, axis=0).at[0].set(0)  # y_t = x_t + c x_{t-1}
  out = causal_jacobian_spectra(f, jnp.ones((T, 2)))
  np.testing.assert_array_equal(out["eigenvalues"], 1.0)
  np.testing.assert_allclose(out["block_singular_values"], 1.0)
  J = np.eye(T) + c * np.eye(T, k=-1)  # per feature; the two features are independent
  np.testing.assert_allclose(out["sigma_max"], np.linalg.svd(J, compute_uv=False)[0], rtol=1e-5)
  assert out["sigma_max"] > 3.9 and out["dist_from_one"] == 0


def test_non_normal_diagonal_block():
  A = np.eye(4) + np.triu(2.0 * np.ones((4, 4)), 1)  # eigenvalues all 1, far from orthogonal
  f = lambda x: x @ jnp.asarray(A, jnp.float32).T
  out = causal_jacobian_spectra(f, jnp.ones((3, 4)))
  assert float(out["dist_from_one"]) < 1e-5
  s = np.linalg.svd(A, compute_uv=False)
  np.testing.assert_allclose(out["block_singular_values"], np.tile(s, (3, 1)), rtol=1e-5)
  np.testing.assert_allclose(out["block_sigma_max"], s[0], rtol=1e-5)
  np.testing.assert_allclose(out["sigma_max"], s[0], rtol=1e-5)  # block-diagonal J


def test_causal_jacobian_rejects_bad_shapes():
  with pytest.raises(ValueError, match="x must be"):
    causal_jacobian_blocks(lambda x: x, jnp.ones((2, 3, 4)))
  with pytest.raises(ValueError, match=r"\(T, D\)"):
    causal_jacobian_eigenvalues(lambda x: x[:, :2], jnp.ones((3, 4)))


# ------------------------------------------------------------------------- logit bound


@functools.partial(jax.jit, static_argnums=1)
def _scores(params, cfg, tokens):
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  return state["intermediates"]["blocks"]["attn"]["scores"][0]


def _randomize(params, key, scale=0.5):
  """Random parameters with non-trivial norm gains and biases (not the init's ones/zeros)."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return treedef.unflatten([l + scale * jax.random.normal(k, l.shape)
                            for l, k in zip(leaves, keys, strict=True)])


CONFIGS = {
    "gpt2-like": dict(),
    "rope-bias": dict(positions="rope", n_kv_heads=1),
    "llama-like": dict(norm="rmsnorm", positions="rope", use_bias=False, n_heads=4, n_kv_heads=2,
                       activation="swiglu"),
    "post-norm": dict(norm_position="post"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logit_bound_holds_on_random_params(name):
  cfg = _cfg(**CONFIGS[name])
  params = _randomize(transformer.init(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (4, 16), 0, cfg.vocab_size)
  bound = logit_bound(params, cfg)
  measured = max_logit(_scores(params, cfg, tokens))
  assert bound.shape == measured.shape == (cfg.n_layers, cfg.n_heads)
  assert bool((measured <= bound * (1 + 1e-5)).all()), (measured, bound)


@pytest.mark.parametrize("name", ["gpt2-like", "llama-like"])
def test_logit_bound_holds_after_training(name):
  """"Trained-ish": large Adam steps on the next-token loss push the logits up."""
  cfg = _cfg(**CONFIGS[name])
  tokens = jax.random.randint(jax.random.key(2), (4, 16), 0, cfg.vocab_size)
  tx = optax.adam(3e-2)
  model = transformer.Transformer(cfg)

  def loss(p):
    logits = model.apply({"params": p}, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  def step(carry, _):
    p, s = carry
    u, s = tx.update(jax.grad(loss)(p), s, p)
    return (optax.apply_updates(p, u), s), None

  params = transformer.init(cfg, jax.random.key(3))
  params = jax.jit(lambda p: jax.lax.scan(step, (p, tx.init(p)), length=10)[0][0])(params)
  bound = logit_bound(params, cfg)
  measured = max_logit(_scores(params, cfg, tokens))
  assert bool((measured <= bound * (1 + 1e-5)).all()), (measured, bound)
  assert float(measured.max()) > 0.1


def test_logit_bound_matches_dense_reference():
  cfg = _cfg(use_bias=False, n_heads=4, n_kv_heads=2)
  params = _randomize(transformer.init(cfg, jax.random.key(4)), jax.random.key(5))
  a = params["blocks"]["attn"]
  dh, d = cfg.d_head, cfg.d_model
  expect = np.zeros((cfg.n_layers, cfg.n_heads))
  for l in range(cfg.n_layers):
    r = np.sqrt(d) * np.abs(np.asarray(params["blocks"]["norm_1"]["scale"][l], np.float64)).max()
    for h in range(cfg.n_heads):
      wq = np.asarray(a["w_q"][l], np.float64)[:, h * dh:(h + 1) * dh]
      g = h // cfg.kv_groups
      wk = np.asarray(a["w_k"][l], np.float64)[:, g * dh:(g + 1) * dh]
      expect[l, h] = r * r * np.linalg.svd(wq @ wk.T, compute_uv=False)[0] / np.sqrt(dh)
  np.testing.assert_allclose(logit_bound(params, cfg), expect, rtol=1e-4)


def test_logit_bound_is_tight_for_a_rank_one_circuit():
  cfg = _cfg(n_layers=1, positions="none", use_bias=False, n_heads=2)
  params = transformer.init(cfg, jax.random.key(6))
  d, dh = cfg.d_model, cfg.d_head
  z = jax.random.normal(jax.random.key(7), (d,))
  z = 10.0 * (z - z.mean())  # every token embeds to z: LayerNorm maps it to √D z/‖z‖
  u = z / jnp.linalg.norm(z)
  w = jnp.zeros((1, d, cfg.n_heads * dh)).at[0, :, 0].set(2.0 * u)  # head 0: W_Q W_Kᵀ = 4 u uᵀ
  params["embed"]["embedding"] = jnp.broadcast_to(z, params["embed"]["embedding"].shape)
  params["blocks"]["attn"]["w_q"] = w
  params["blocks"]["attn"]["w_k"] = w
  tokens = jnp.zeros((1, 8), jnp.int32)
  bound = logit_bound(params, cfg)
  measured = max_logit(_scores(params, cfg, tokens))
  np.testing.assert_allclose(bound[0, 0], 4.0 * d / np.sqrt(dh), rtol=1e-5)
  assert 0.999 < float(measured[0, 0] / bound[0, 0]) <= 1 + 1e-5


def test_logit_bound_is_infinite_without_a_norm():
  cfg = _cfg(norm="none")
  params = transformer.init(cfg, jax.random.key(0))
  assert bool(jnp.isinf(attention_input_bound(params, cfg)).all())
  assert bool(jnp.isinf(logit_bound(params, cfg)).all())


def test_max_logit_skips_masked_entries():
  s = jnp.full((1, 2, 3, 3), jnp.finfo(jnp.float32).min).at[0, 1, 2, 0].set(-5.0)
  s = s.at[0, 0, 1, 1].set(0.5)
  np.testing.assert_array_equal(max_logit(s), [0.5, 5.0])
  with pytest.raises(ValueError, match="scores"):
    max_logit(jnp.ones((3, 3)))


# ------------------------------------------------------------------------- conditioning


@pytest.mark.parametrize("norm,dropped", [("layernorm", 1), ("rmsnorm", 0)])
def test_effective_condition_of_norm_outputs(norm, dropped):
  cfg = _cfg(norm=norm)
  x = 3.0 + jax.random.normal(jax.random.key(0), (2, 128, cfg.d_model))  # (batch, N, D)
  module = Norm(cfg)
  y = module.apply(module.init(jax.random.key(1), x), x)
  out = jax.jit(effective_condition)(y)
  np.testing.assert_array_equal(out["n_dropped"], [dropped, dropped])
  for b in range(2):
    s = np.linalg.svd(np.asarray(y[b], np.float64), compute_uv=False)
    if dropped:
      assert s[-1] < 1e-5 * s[0]  # the all-ones direction, exactly singular up to rounding
    np.testing.assert_allclose(out["kappa_eff"][b], s[0] / s[len(s) - 1 - dropped], rtol=1e-3)
  assert bool(jnp.isfinite(out["kappa_eff"]).all())


def test_centering_removes_a_layernorm_bias():
  cfg = _cfg(norm="layernorm")
  x = jax.random.normal(jax.random.key(2), (128, cfg.d_model))
  module = Norm(cfg)
  variables = module.init(jax.random.key(3), x)
  bias = 0.01 * jax.random.normal(jax.random.key(4), (cfg.d_model,))
  variables = {"params": {**variables["params"], "bias": bias}}
  y = module.apply(variables, x)
  lifted = effective_condition(y)
  centred = effective_condition(y, center=True)
  assert int(lifted["n_dropped"]) == 0 and int(centred["n_dropped"]) == 1
  Y = np.asarray(y, np.float64)
  s = np.linalg.svd(Y - Y.mean(0), compute_uv=False)
  np.testing.assert_allclose(centred["kappa_eff"], s[0] / s[-2], rtol=1e-3)
  assert float(lifted["kappa_eff"]) > 3 * float(centred["kappa_eff"])  # the small-bias direction


def test_effective_condition_rtol_and_zero_input():
  X = jnp.diag(jnp.array([1.0, 1e-2, 1e-4, 0.0]))
  out = effective_condition(X, rtol=1e-3)
  assert int(out["n_dropped"]) == 2 and float(out["kappa_eff"]) == pytest.approx(100.0)
  assert bool(jnp.isnan(effective_condition(jnp.zeros((3, 3)))["kappa_eff"]))
  with pytest.raises(ValueError, match="X must be"):
    effective_condition(jnp.ones(3))
