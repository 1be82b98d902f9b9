"""The residual-eigenvalues claim: a depth point against a float64 reference, its widths, the
trained point at init, v6's fresh seeds and how its registered clauses decide synthetic runs
(the readings over depths and layers: tests/experiments/lab/test_depth.py)."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis
import transformer
from experiments.claims import residual_eigenvalues as re_
from experiments.lab import depth, parts
from experiments.verdict.arithmetic import rule
from experiments.verdict.running import history


def test_v6_reads_on_seeds_and_tuning_seeds_no_kept_version_used():
  claim = re_.CLAIM
  assert claim.version == 6 and claim.seeds == (10, 11, 12, 13, 14)
  assert claim.tuning_seeds == (110, 111) and re_.FULL.split == "test"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)  # the runner's --keep rule passes


def _runs(pre_dists, free_dists, pre_loss, free_loss, unigram=3.0, init_near=1.0, edge=0.0):
  """Synthetic runs of the two trained arms, one seed per list entry."""
  runs = {"pre": {}, "pre-no-residual": {}}
  rows = zip(pre_dists, free_dists, pre_loss, free_loss, strict=True)
  for s, (dp, df, lp, lf) in enumerate(rows):
    for arm, d, loss in (("pre", dp, lp), ("pre-no-residual", df, lf)):
      d = np.asarray(d, np.float64)
      layers = depth.layer_distribution(d, re_.NEAR)
      runs[arm][s] = {"trained_median_dist": layers["median_dist"],
                      "trained_frac_near": layers["frac_near"], "trained_max_dist": d.max(),
                      "trained_min_dist": d.min(), "val_loss": loss,
                      "gap_to_unigram": loss - unigram, "rates_at_grid_edge": edge,
                      "init_median_dist": 0.1 if arm == "pre" else 1.0,
                      "init_frac_near": init_near + 0.001 * s if arm == "pre" else 0.0,
                      "max_dist_all": 0.3, "min_dist_all": 1.0, "dist_shrink": 0.5,
                      "e2e_growth": 3.0}
  return runs


def test_registered_clauses_decide_synthetic_runs_as_intended():
  seeds = tuple(range(5))
  rng = np.random.default_rng(1)
  # v5's shape: the median layer at 0.26, one layer at 28.8, 127 of 128 near 1; no residual: 1.
  pre = [np.r_[rng.uniform(0.1, 0.4, 127), 28.8 + s] for s in seeds]
  free = [np.ones(128)] * 5
  runs = _runs(pre, free, [2.0, 2.01, 1.98, 2.02, 1.99], [3.0, 3.02, 2.97, 3.01, 2.99])
  parts = rule.clause_verdicts(re_.CLAIM, runs, seeds, indicative=False)
  assert [p["verdict"] for p in parts] == ["supported", "supported"]
  assert rule.verdict(re_.CLAIM, runs, seeds, indicative=False)[0] == "supported"
  ext = {e["name"]: e["verdict"] for e in rule.extension_verdicts(re_.CLAIM, runs, seeds,
                                                                  indicative=False)}
  assert ext["every layer (v5's headline)"] == "refuted"  # the worst layer still reads there
  # Most trained residual layers far from 1: clause 1 refuted, the headline with it.
  far = [np.r_[rng.uniform(0.1, 0.4, 40), rng.uniform(1.0, 3.0, 88)] for _ in seeds]
  parts = rule.clause_verdicts(re_.CLAIM, _runs(far, free, [2.0] * 5, [3.0] * 5), seeds,
                               indicative=False)
  assert [p["verdict"] for p in parts] == ["refuted", "supported"]
  # The residual-free model trains as well: clause 2 refuted (inside the 0.1-nat margin).
  parts = rule.clause_verdicts(re_.CLAIM, _runs(pre, free, [2.0, 2.01, 1.98, 2.02, 1.99],
                                                [2.02, 2.0, 2.03, 2.01, 2.0]), seeds,
                               indicative=False)
  assert [p["verdict"] for p in parts] == ["supported", "refuted"]
  # A tuned rate at an edge blocks both clauses: inconclusive, whatever the numbers.
  blocked = _runs(pre, free, [2.0] * 5, [3.0] * 5, edge=1.0)
  assert rule.verdict(re_.CLAIM, blocked, seeds, indicative=False)[0] == "inconclusive"


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
  assert [c.text for c in re_.CLAIM.clauses] == [
      "Residual connections keep eigenvalues near 1", "enabling 100+ layer networks"]
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


def test_a_trained_arm_is_kept_as_a_part_and_read_back_exactly(tmp_path, monkeypatch):
  # A run keeps each trained arm as it finishes, so a crash or a second process (training the
  # other arm into the same folder) loses nothing: the part read back equals train_arm's own
  # output, is reused for the same arm/seeds/sizes, and retrained for other seeds.
  z = dataclasses.replace(re_.QUICK, steps=3, train_layers=2)
  calls = []
  real = re_.train_arm
  monkeypatch.setattr(re_, "train_arm", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
  tuned, trained = re_.trained_part("pre", z, (10,), str(tmp_path), log=lambda _: None)
  cfg = re_.base_config(8, 32).replace(n_layers=2, **re_.SWEEP_ARMS["pre"])
  ref_tuned, ref_trained = real(cfg, z, 3, (10,), re_._read_bytes(z)[1], lambda _: None)
  assert trained == ref_trained and tuned == ref_tuned
  assert trained[10]["learning_rate"] == z.grid[0] and np.isfinite(trained[10]["val_loss"])
  assert re_.trained_part("pre", z, (10,), str(tmp_path), log=lambda _: None) == (tuned, trained)
  assert calls == [(10,)]
  with open(parts.part_path(str(tmp_path), "pre") + ".lock", "w") as f:
    f.write("999999999")  # a crashed trainer's lock is not waited on
  other = re_.trained_part("pre", z, (11,), str(tmp_path), log=lambda _: None)
  assert calls == [(10,), (11,)] and other[1][11]["val_loss"] != trained[10]["val_loss"]
  assert not os.path.exists(parts.part_path(str(tmp_path), "pre") + ".lock")
  with pytest.raises(ValueError, match="post"):
    re_.trained_part("post", z, (10,), str(tmp_path))
