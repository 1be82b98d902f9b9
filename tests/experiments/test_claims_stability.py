"""Tests for the stability claims' measurement functions, against independent references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import analysis
import transformer
from experiments.claims import CLAIMS, stats
from experiments.claims import eigenvalue_constrained as ec
from experiments.claims import layernorm_condition as lc
from experiments.claims import residual_eigenvalues as re_


@pytest.mark.parametrize("claim_id", ["residual-eigenvalues", "eigenvalue-constrained",
                                      "layernorm-condition"])
def test_claims_registered_and_built(claim_id):
  claim = CLAIMS[claim_id]
  assert claim.built and claim.thresholds and claim.anchors


def test_rankdata_and_spearman_match_scipy():
  rng = np.random.default_rng(0)
  for _ in range(5):
    x = rng.integers(0, 5, 12).astype(float)  # many ties
    y = rng.normal(size=12)
    np.testing.assert_allclose(stats.rankdata(x), scipy.stats.rankdata(x))
    np.testing.assert_allclose(stats.spearman(x, y), scipy.stats.spearmanr(x, y).statistic,
                               atol=1e-12)
  # Diverged runs (inf loss) rank last, as scipy ranks inf.
  y = np.array([1.0, np.inf, 2.0, np.inf])
  np.testing.assert_allclose(stats.rankdata(y), scipy.stats.rankdata(y))
  assert np.isnan(stats.spearman([1, 2], [2, 1]))  # too few values
  assert np.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))  # constant side


def test_kappa_growth_ignores_non_finite():
  k = np.array([[2.0, 30.0], [np.nan, np.inf]])
  assert lc.kappa_growth(k, np.array([1.0, 2.0])) == 15.0
  assert np.isnan(lc.kappa_growth(np.full((1, 2), np.nan), np.ones(2)))


def test_input_conditions_match_numpy_svd():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  out = lc.input_conditions(state["intermediates"])
  X = np.asarray(state["intermediates"]["blocks"]["attn"]["attn_in"][0], np.float64)
  for layer in range(cfg.n_layers):
    Xl = X[layer].reshape(-1, cfg.d_model)
    s = np.linalg.svd(Xl - Xl.mean(0), compute_uv=False)
    kept = s > 1e-4 * s[0]  # LayerNorm: one exact zero (the all-ones direction)
    assert (~kept).sum() == 1 == out["attn_in"]["n_dropped"][layer]
    np.testing.assert_allclose(out["attn_in"]["kappa"][layer], s[0] / s[kept][-1], rtol=1e-3)


def test_input_conditions_rmsnorm_drops_nothing():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=1, n_heads=2, max_len=16,
                           norm="rmsnorm")
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  out = lc.input_conditions(state["intermediates"])
  assert out["attn_in"]["n_dropped"].tolist() == [0]
  assert out["ffn_in"]["n_dropped"].tolist() == [0]


def test_good_rates_and_divergent_rates():
  final = np.array([2.5, 2.0, 2.09, 2.11, np.inf])
  div = np.array([False, False, False, False, True])
  assert ec.good_rates(final, div).tolist() == [False, True, True, False, False]
  assert not ec.good_rates(final, np.ones(5, bool)).any()
  d = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]], bool)
  assert ec.adamw_divergent_rates(d).tolist() == [True, False, True]
  assert ec.adamw_divergent_rates(np.array([[1], [0]], bool)).tolist() == [True, False]


def test_capped_optimizer_keeps_sigma_max_at_cap():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(2), p.shape), params)
  tx = ec.make_tx_factory(10, ec.ARMS["cap-hidden"], cap=0.5)(learning_rate=0.3)
  updates, _ = tx.update(grads, tx.init(params), params)
  new = jax.tree.map(lambda p, u: p + u, params, updates)
  for name in ("w_q", "w_k", "w_v", "w_o"):
    s = np.linalg.svd(np.asarray(new["blocks"]["attn"][name], np.float64), compute_uv=False)
    assert s[:, 0].max() <= 0.5 * (1 + 1e-5)
  # An uncapped leaf (the embedding) takes the plain AdamW step.
  plain = ec.make_tx_factory(10, None)(learning_rate=0.3)
  u_plain, _ = plain.update(grads, plain.init(params), params)
  np.testing.assert_allclose(updates["embed"]["embedding"], u_plain["embed"]["embedding"],
                             rtol=1e-6)


def test_sweep_metrics_ratios():
  rows = {L: {"max_dist_from_one": d, "e2e_sigma_max": s, "stream_rms_in": 1.0,
              "stream_rms_out": 1.0} for L, d, s in ((1, 0.4, 1.0), (8, 0.1, 1.5), (2, 0.2, 3.0))}
  m = re_.sweep_metrics(rows)
  assert m["max_dist_all"] == 0.4 and m["min_dist_all"] == 0.1
  assert m["dist_shrink"] == pytest.approx(0.25) and m["e2e_growth"] == pytest.approx(1.5)
  assert m["e2e_sigma_max_all"] == 3.0


def test_depth_point_residual_eigenvalues_near_one_reference():
  # Independent reference for one pre-norm residual block: dense jacrev, numpy eig.
  cfg = re_.base_config(8, 4).replace(n_layers=1, vocab_size=32)
  from experiments.lab import stability

  out = stability.depth_point(cfg, seed=1, seq_len=4)
  k_init, k_tokens = jax.random.split(jax.random.key(1))
  params = transformer.init(cfg, k_init)
  x = analysis.stream_input(params, cfg, jax.random.randint(k_tokens, (4,), 0, 32))
  f = lambda z: transformer.block_fn(cfg)(transformer.layer(params, 0), z)
  J = np.asarray(jax.jacrev(f)(x), np.float64).reshape(x.size, x.size)
  np.testing.assert_allclose(out["max_dist_from_one"], np.abs(np.linalg.eigvals(J) - 1).max(),
                             rtol=2e-3, atol=1e-4)
  assert jnp.isfinite(out["e2e_sigma_max"])
