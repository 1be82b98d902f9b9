"""Tests for experiments.lab.stability: the measurement cores against independent references."""

import functools

import jax
import numpy as np
import pytest

import analysis
import transformer
from experiments.lab import stability


def _cfg(**kw):
  base = dict(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=16)
  return transformer.Config(**{**base, **kw})


def _random_batches(cfg, seq_len=8, batch_size=4):
  return lambda step: np.asarray(jax.random.randint(jax.random.key(step), (batch_size, seq_len + 1),
                                                    0, cfg.vocab_size))


@pytest.mark.parametrize("residual", [True, False])
def test_depth_point_matches_dense_eig_and_svd(residual):
  cfg = _cfg(residual=residual)
  out = stability.depth_point(cfg, seed=3, seq_len=4)
  # The same init and tokens, rebuilt; reference: dense jacrev per layer, numpy float64 eig/svd.
  k_init, k_tokens = jax.random.split(jax.random.key(3))
  params = transformer.init(cfg, k_init)
  x = analysis.stream_input(params, cfg, jax.random.randint(k_tokens, (4,), 0, cfg.vocab_size))
  f = transformer.block_fn(cfg)
  n = x.size
  h = x
  for l in range(cfg.n_layers):
    p = transformer.layer(params, l)
    J = np.asarray(jax.jacrev(functools.partial(f, p))(h), np.float64).reshape(n, n)
    lam = np.linalg.eigvals(J)
    np.testing.assert_allclose(out["dist_from_one"][l], np.abs(lam - 1).max(), rtol=2e-3,
                               atol=1e-4)
    h = f(p, h)
  g = lambda z: functools.reduce(lambda z, l: f(transformer.layer(params, l), z),
                                 range(cfg.n_layers), z)
  J = np.asarray(jax.jacrev(g)(x), np.float64).reshape(n, n)
  np.testing.assert_allclose(out["e2e_sigma_max"], np.linalg.svd(J, compute_uv=False)[0],
                             rtol=1e-3, atol=1e-6)
  # Residual blocks keep eigenvalues near 1; replacing the stream sends them near 0.
  assert (out["max_dist_from_one"] < 0.9) == residual


@pytest.mark.parametrize("norm,dropped", [("layernorm", 1), ("rmsnorm", 0), ("none", 0)])
def test_condition_profile_matches_numpy(norm, dropped):
  cfg = _cfg(norm=norm)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, cfg.vocab_size)
  out = jax.jit(functools.partial(stability.condition_profile, cfg=cfg))(params,
                                                                         tokens_BT=tokens)
  inter = stability.intermediates(params, cfg, tokens)
  for name, (sub, _) in stability.PROJECTION_INPUTS.items():
    X_L = np.asarray(inter[sub][name], np.float64)
    assert out[f"{name}/kappa_eff"].shape == (cfg.n_layers,)
    for l in range(cfg.n_layers):
      X = X_L[l].reshape(-1, X_L.shape[-1])
      s = np.linalg.svd(X - X.mean(0), compute_uv=False)  # centred: the projections have biases
      k = int(out[f"{name}/n_dropped"][l])
      np.testing.assert_allclose(out[f"{name}/kappa_eff"][l], s[0] / s[len(s) - 1 - k], rtol=1e-2)
  np.testing.assert_array_equal(out["attn_in/n_dropped"], dropped)


def test_logit_certificate_holds_and_reports_the_max():
  cfg = _cfg(positions="rope")
  params = transformer.init(cfg.replace(init_std=0.5), jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, cfg.vocab_size)
  out = stability.logit_certificate(params, cfg, tokens)
  assert out["bound"].shape == out["measured"].shape == (cfg.n_layers, cfg.n_heads)
  assert 0 < float(out["ratio"]) <= 1 + 1e-5
  np.testing.assert_allclose(out["measured_max"], out["measured"].max())


def test_norm_condition_run_trains_and_tracks():
  cfg = _cfg(n_layers=1)
  fixed = _random_batches(cfg)(0)  # one batch, repeated: memorizable, so the loss must fall
  out = stability.norm_condition_run("layernorm", cfg=cfg, batches=lambda step: fixed,
                                     steps=6, measure_every=3, learning_rate=1e-2)
  assert out["steps"] == [0, 3, 6] and not out["diverged"]
  assert out["final_loss"] < out["loss"][0] - 0.1
  assert len(out["metrics"]) == 3 and out["attn_in/kappa_init"] >= 1
  assert out["kappa_ratio_max"] >= 1  # includes κ(0)/κ(0)


def test_train_tracked_flags_divergence():
  cfg = _cfg(n_layers=1, norm="none")
  out = stability.norm_condition_run("none", cfg=cfg, batches=_random_batches(cfg), steps=6,
                                     measure_every=1, learning_rate=1e3)
  assert out["diverged"] and out["final_loss"] is None and out["steps_done"] <= 6


@pytest.mark.parametrize("cap", [None, 0.05])
def test_logit_bound_run_certificate_holds_along_training(cap):
  cfg = _cfg(n_layers=1)
  out = stability.logit_bound_run(cap, cfg=cfg, batches=_random_batches(cfg), steps=6,
                                  measure_every=3, learning_rate=3e-2)
  assert out["violations"] == 0 and 0 < out["max_ratio"] <= 1 + 1e-5
  if cap is not None:  # σ_max(W_Q^h W_K^hᵀ) ≤ cap², r = √D·max|scale|, so bound ≤ r² cap² / √Dh
    r = np.sqrt(cfg.d_model) * 1.5  # the LayerNorm scale moves little in 6 steps
    assert out["bound_final"] <= r * r * cap * cap / np.sqrt(cfg.d_head) * 1.01 + 0.05


@pytest.mark.parametrize("position", ["pre", "post"])
def test_sown_inputs_are_what_the_projections_read(position):
  cfg = _cfg(norm_position=position, activation="relu")
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, cfg.vocab_size)
  inter = stability.intermediates(params, cfg, tokens)
  attn, ffn, blocks = inter["attn"], inter["ffn"], params["blocks"]
  q = np.einsum("lbtd,lde->lbte", attn["attn_in"], blocks["attn"]["w_q"])
  q = q + np.asarray(blocks["attn"]["b_q"])[:, None, None]
  np.testing.assert_allclose(q, np.asarray(attn["q"]).reshape(q.shape), atol=1e-5)
  h = np.einsum("lbtd,ldf->lbtf", ffn["ffn_in"], blocks["ffn"]["w_1"])
  h = np.maximum(h + np.asarray(blocks["ffn"]["b_1"])[:, None, None], 0)
  np.testing.assert_allclose(h, ffn["ffn_hidden"], atol=1e-5)
  if position == "pre":  # the normalized stream: zero mean, RMS √(v/(v+eps)) < 1 per token
    x = np.asarray(inter["resid_pre"], np.float64)
    v = x.var(-1)
    rms = np.sqrt((np.asarray(attn["attn_in"], np.float64) ** 2).mean(-1))
    np.testing.assert_allclose(np.asarray(attn["attn_in"]).mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(rms, np.sqrt(v / (v + cfg.norm_eps)), rtol=1e-4)
