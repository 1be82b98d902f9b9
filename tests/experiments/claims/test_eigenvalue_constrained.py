"""The eigenvalue-constrained claim: the capped optimizer and the spectral norms it keeps, its
sizes, the rates its run reads from the tuning seeds, v3's fresh seeds and how its clauses
decide synthetic runs."""

import dataclasses

import jax
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.claims import CLAIMS
from experiments.claims import eigenvalue_constrained as ec
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare import axes


def test_capped_optimizer_keeps_sigma_max_at_cap():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(2), p.shape), params)
  from experiments.lab import cap_training

  tx = cap_training.make_tx_factory(10, cap_training.HIDDEN, cap=0.5)(learning_rate=0.3)
  updates, _ = tx.update(grads, tx.init(params), params)
  new = jax.tree.map(lambda p, u: p + u, params, updates)
  for name in ("w_q", "w_k", "w_v", "w_o"):
    s = np.linalg.svd(np.asarray(new["blocks"]["attn"][name], np.float64), compute_uv=False)
    assert s[:, 0].max() <= 0.5 * (1 + 1e-5)
  # An uncapped leaf (the embedding) takes the plain AdamW step.
  plain = cap_training.make_tx_factory(10, None)(learning_rate=0.3)
  u_plain, _ = plain.update(grads, plain.init(params), params)
  np.testing.assert_allclose(updates["embed"]["embedding"], u_plain["embed"]["embedding"],
                             rtol=1e-6)


def test_eigenvalue_constrained_trains_at_20_tokens_per_parameter_on_pico_micro_and_mini():
  claim = CLAIMS["eigenvalue-constrained"]
  assert claim.version == 3 and claim.tuning_seeds == ec.TUNING_SEEDS == (110, 111)
  assert claim.seeds == (10, 11, 12, 13, 14) and ec.FULL.split == "test"
  assert not set(claim.seeds) & set(claim.tuning_seeds)
  assert axes.scale_models(claim, quick=False) == ("pico-20", "micro-20", "mini-20")
  assert models.param_count("mini-20") >= 8 * models.param_count("pico-20")  # issue 50 item 4
  for model, steps in (("pico-20", 145), ("micro-20", 409), ("mini-20", 1298)):
    z = dataclasses.replace(ec.FULL, model=model)
    assert z.budget_steps() == steps
    assert z.train_tokens() / models.param_count(model) >= models.TOKENS_PER_PARAM
  assert len(ec.GRID) >= 4 and ec.FULL.extend >= 1
  np.testing.assert_allclose(np.diff(np.log10(ec.GRID)), 0.5, atol=2e-3)  # half-decades


def test_eigenvalue_constrained_sizes_refuse_too_long_seq_len_and_one_rate():
  with pytest.raises(ValueError, match=r"seq_len=257 exceeds the `pico-20` shape's max_len=256"):
    dataclasses.replace(ec.FULL, seq_len=257)
  with pytest.raises(ValueError, match=r"needs two rates or more"):
    dataclasses.replace(ec.FULL, grid=(1e-2,))


def test_cap_training_sigma_max_hidden_matches_numpy_and_skips_other_leaves():
  from experiments.lab import cap_training

  rng = np.random.default_rng(0)
  w = rng.normal(size=(2, 3, 2, 5, 4))  # (R, S, L, d_in, d_out)
  params = {"blocks": {"attn": {"w_q": w}, "ffn": {"w_1": 0.1 * w}},
            "embed": {"embedding": 100 * rng.normal(size=(2, 3, 7, 5))}}
  want = np.array([[max(np.linalg.norm(w[r, s, l], 2) for l in range(2)) for s in range(3)]
                   for r in range(2)])
  np.testing.assert_allclose(cap_training.sigma_max_hidden(params), want, rtol=1e-10)
  params["blocks"]["attn"]["w_q"] = np.where(np.arange(4) == 0, np.nan, w)  # a diverged run
  assert np.isinf(cap_training.sigma_max_hidden(params)).all()


def test_eigenvalue_constrained_run_reads_tuned_and_stress_rates_from_the_tuning_seeds(
    monkeypatch, tmp_path):
  from experiments.lab import cap_training
  from experiments.verdict import Spec

  tuned_calls, tracked = [], []

  def fake_tune(cfg, make_tx, grid, *, seeds, extend, **kw):
    tuned_calls.append(seeds)
    bad = [lr >= 1.0 for lr in grid] if not tuned_calls[1:] else [False] * len(grid)
    return {"learning_rate": grid[2] if len(tuned_calls) == 1 else grid[3], "grid": list(grid),
            "losses": [2.0] * len(grid), "excluded": bad, "spiked": [False] * len(grid),
            "at_edge": False}

  def fake_track(cfg, make_tx, seeds, rates, **kw):
    tracked.append(tuple(rates))
    assert kw["eval_split"] == "test"
    R, S = len(rates), len(seeds)
    final = np.tile(np.linspace(2.0, 2.5, R)[:, None], (1, S))
    bad = np.zeros((R, S), bool)
    if len(tracked) == 1:  # adamw ends diverged at the stress rate, the larger one
      final[-1], bad[-1] = np.nan, True
    return {"val_RSE": final[..., None], "steps_E": np.array([kw["steps"]]), "final_RS": final,
            "ended_diverged_RS": bad, "spiked_RS": np.zeros((R, S), bool),
            "ratio_ERS": np.full((1, R, S), 0.5), "sigma_max_RS": np.ones((R, S))}

  monkeypatch.setattr(cap_training, "tune_arm", fake_tune)
  monkeypatch.setattr(cap_training, "track", fake_track)
  z = dataclasses.replace(ec.QUICK, grid=ec.GRID, tune=True)
  out = ec.run(Spec(quick=True, seeds=(0, 1), run_dir=str(tmp_path), sizes=z,
                    log=lambda *_: None))
  assert tuned_calls == [ec.TUNING_SEEDS] * 2  # rates are chosen on the tuning seeds only
  assert out["split"] == "test"
  assert out["setup"]["stress_rate"] == 1.0 and out["setup"]["stress_rate_from_divergence"]
  assert tracked == [(ec.GRID[2], 1.0), (ec.GRID[3], 1.0)]
  a, c = out["runs"]["adamw"][0], out["runs"]["cap-hidden"][0]
  assert a["end_loss_stress"] == pytest.approx(np.log(256)) and a["diverged_stress"] == 1.0
  assert (c["end_loss_stress"], c["diverged_stress"]) == (2.5, 0.0)
  assert c["tuned_loss_rel_cost"] == 0.0 and c["stress_loss_rel_tuned"] == pytest.approx(0.25)
  assert c["cert_ratio_all_runs"] == 0.5 and c["sigma_max_tuned"] == 1.0


def test_cap_tune_arm_tunes_its_own_optimizer_on_every_tuning_seed(monkeypatch):
  from experiments.lab import cap_training
  from experiments.train import sweep

  seen = []
  losses = {1e-3: (2.6, 2.4), 1e-2: (2.3, 2.4), 1e-1: (2.2, np.inf)}

  def fake_train_many(cfg, make_tx, *, seeds, learning_rates, steps, **kw):
    seen.append((make_tx, seeds, tuple(learning_rates)))
    final = np.array([[[losses[lr][i]] for i in range(2)] for lr in learning_rates])
    return sweep.ManyResult(final, final, np.array([steps]), None, None,
                            np.zeros((len(learning_rates), 2), bool), seeds, learning_rates)

  monkeypatch.setattr(sweep, "train_many", fake_train_many)
  make = cap_training.make_tx_factory(4, cap_training.HIDDEN)
  t = cap_training.tune_arm(models.config("pico-20"), make, tuple(losses), seeds=(110, 111),
                            steps=4, batch_size=2, seq_len=8, eval_batches=1)
  assert seen == [(make, (110, 111), tuple(losses))]  # its own schedule, both seeds at once
  assert t["learning_rate"] == 1e-2 and t["excluded"] == [False, False, True]
  assert t["losses"][:2] == pytest.approx([2.5, 2.35]) and t["seeds"] == [110, 111]


def _runs(gap, cost=0.0, diverged=0.0, sigma=1.0):
  seeds = tuple(range(5))
  jitter = (-0.02, 0.0, 0.02, -0.01, 0.01)
  adamw = {s: {"end_loss_stress": 2.5 + gap + j, "edge_lr": 0.0, "cert_ratio_all_runs": 0.7,
               "tuned_loss_rel_cost": 0.0} for s, j in zip(seeds, jitter, strict=True)}
  capped = {s: {"end_loss_stress": 2.5, "diverged_stress": diverged, "edge_lr": 0.0,
                "tuned_loss_rel_cost": cost + j / 10, "sigma_max_tuned": sigma,
                "cert_ratio_all_runs": 0.7, "stress_loss_rel_tuned": 0.02}
            for s, j in zip(seeds, jitter, strict=True)}
  return {"adamw": adamw, "cap-hidden": capped}, seeds


def test_clauses_decide_synthetic_runs_as_intended():
  claim = CLAIMS["eigenvalue-constrained"]
  assert [c.text for c in claim.clauses] == ["Eigenvalue-constrained training",
                                             "to guarantee stable gradient flow"]
  parts = lambda r: [p["verdict"] for p in rule.clause_verdicts(claim, *r, indicative=False)]
  assert parts(_runs(gap=1.0)) == ["supported", "supported"]
  assert parts(_runs(gap=0.1)) == ["supported", "refuted"]  # inside the 0.25-nat margin
  assert parts(_runs(gap=0.26)) == ["supported", "inconclusive"]  # straddles the margin
  assert parts(_runs(gap=1.0, cost=0.05)) == ["refuted", "supported"]  # 5% dearer
  assert parts(_runs(gap=1.0, diverged=1.0)) == ["supported", "refuted"]
  assert rule.verdict(claim, *_runs(gap=1.0, cost=0.05), indicative=False)[0] == "refuted"
  # The cap did not act: nothing about stability can be read.
  assert parts(_runs(gap=1.0, sigma=1.5))[1] == "inconclusive"
