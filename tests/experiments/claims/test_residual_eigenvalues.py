"""The residual-eigenvalues claim: the depth sweep's ratios, a depth point against a float64
reference, its widths and the trained point at init."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis
import transformer
from experiments.claims import residual_eigenvalues as re_


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


def test_residual_eigenvalues_widths_are_its_own_model():
  from experiments import models
  from experiments.models import recipes

  full = re_.FULL
  base = re_.base_config(models.config(full.model).d_model, full.seq_len)
  # The registered model (v2) is `deep-8`, the 128-layer model the trained results measure.
  assert base.replace(n_layers=full.train_layers) == models.config("deep-8") == models.config(
      full.model)
  assert re_.CLAIM.axis("scale").values == ()  # not measured, by cost (the docstring says so)
  names = ("deep-8", "deep-16", "deep-32", "deep-48")
  scale = re_.CLAIM.axis("scale")
  scale.check(re_.CLAIM, names, "--sizes")  # shapes are accepted, not just recipes
  cards = [models.model_card(n) for n in names]
  assert [c["d_model"] for c in cards] == [8, 16, 32, 48]
  assert {c["n_layers"] for c in cards} == {128}
  for card in cards:  # each width is the claim's model: only D differs
    cfg = re_.base_config(card["d_model"], full.seq_len).replace(n_layers=128)
    assert models.param_count(card["name"]) == recipes._param_count(cfg) == card["params"]
  # The registered budget: 20 tokens per parameter of deep-8 (the ratio the docstring names).
  assert full.train_tokens() / models.param_count(full.model) == pytest.approx(20.0, abs=0.01)
  with pytest.raises(ValueError, match="not base models"):
    scale.check(re_.CLAIM, ("deep-64",), "--sizes")


def test_trained_point_matches_depth_point_at_init():
  from experiments.lab import stability

  cfg = re_.base_config(8, 4).replace(n_layers=3, vocab_size=32)
  k_init, k_tokens = jax.random.split(jax.random.key(2))
  tokens = jax.random.randint(k_tokens, (4,), 0, 32)
  out = stability.trained_point(cfg, transformer.init(cfg, k_init), tokens)
  ref = stability.depth_point(cfg, seed=2, seq_len=4)
  np.testing.assert_allclose(out["dist_from_one"], ref["dist_from_one"], rtol=1e-4)
  assert out["min_dist_from_one"] == pytest.approx(min(ref["dist_from_one"]), rel=1e-4)
