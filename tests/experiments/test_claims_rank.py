"""Measurement functions of the rank claims: kv-compression, adaptive-rank, lora."""

import itertools

import jax
import numpy as np
import optax
import pytest
import scipy.linalg
import scipy.stats

import transformer
from experiments import data, models
from experiments.claims import adaptive_rank, kv_compression
from experiments.claims import lora as lora_claim


def test_budget_ranks_matches_brute_force_on_convex_curves():
  rng = np.random.default_rng(0)
  ranks = [1, 2, 4, 8]
  # Convex, decreasing loss in rank (per unit of rank): greedy by gain per rank is optimal.
  slopes = np.sort(rng.uniform(0.1, 1.0, (3, 5)), axis=0)[::-1]  # (steps, B), decreasing
  widths = np.diff(ranks)[:, None]
  losses = 10 - np.concatenate([np.zeros((1, 5)), np.cumsum(slopes * widths, 0)])
  budget = 3.0
  chosen = adaptive_rank.budget_ranks(losses, ranks, budget)
  assert chosen.mean() <= budget
  best = min(sum(losses[ranks.index(r), b] for b, r in enumerate(combo))
             for combo in itertools.product(ranks, repeat=5) if np.mean(combo) <= budget)
  got = sum(losses[ranks.index(r), b] for b, r in enumerate(chosen))
  assert got == pytest.approx(best, abs=max(slopes.max(), 1) * 2)  # greedy ≤ one step off
  assert adaptive_rank.picked_loss(losses, ranks, chosen) == pytest.approx(got / 5)
  with pytest.raises(ValueError, match="below the smallest rank"):
    adaptive_rank.budget_ranks(losses, ranks, 0.5)


def test_measure_statistics_against_numpy_and_scipy():
  rng = np.random.default_rng(1)
  ranks = [1, 2, 4, 8]
  full = rng.uniform(1.0, 3.0, 40)
  excess = rng.uniform(0, 0.2, (1, 40)) * np.array([[8.0], [3.0], [0.5], [0.0]])
  losses = full * (1 + excess)
  prefix = losses + rng.normal(0, 0.01, losses.shape)
  out = adaptive_rank.measure(losses, prefix, ranks, {"b": 2}, d_head=8)
  oracle = np.array([next(r for i, r in enumerate(ranks) if losses[i, b] <= full[b] * 1.01)
                     for b in range(40)])
  assert out["oracle"]["rank_cv"] == pytest.approx(oracle.std() / oracle.mean())
  assert out["oracle"]["spearman_loss_rank"] == pytest.approx(
      scipy.stats.spearmanr(full, oracle)[0])
  b = out["b"]
  assert b["uniform_loss"] == pytest.approx(losses[1].mean())
  assert b["oracle_loss"] <= b["uniform_loss"]
  assert b["recovery"] == pytest.approx((b["uniform_loss"] - b["policy_loss"]) / b["oracle_gain"])
  # A policy reading the true curves recovers all of the oracle's gain.
  same = adaptive_rank.measure(losses, losses, ranks, {"b": 2}, d_head=8)["b"]
  assert same["recovery"] == pytest.approx(1.0)


def test_subspace_overlap_against_scipy_principal_angles():
  rng = np.random.default_rng(2)
  a, b = rng.normal(size=(12, 10)), rng.normal(size=(12, 10))
  left, right = lora_claim.subspace_overlap(a, b, 3)
  ua, ub = np.linalg.svd(a)[0][:, :3], np.linalg.svd(b)[0][:, :3]
  va, vb = np.linalg.svd(a)[2][:3].T, np.linalg.svd(b)[2][:3].T
  assert left == pytest.approx(np.mean(np.cos(scipy.linalg.subspace_angles(ua, ub)) ** 2))
  assert right == pytest.approx(np.mean(np.cos(scipy.linalg.subspace_angles(va, vb)) ** 2))


def test_update_spectra_and_held_out_text():
  cfg = transformer.preset("tiny", d_model=32, n_heads=2)
  base = transformer.init(cfg, jax.random.key(0))
  tuned = jax.tree.map(lambda x: x * 1.5, base)
  spectra = lora_claim.update_spectra(base, tuned)
  w = np.asarray(base["blocks"]["attn"]["w_q"], np.float64)
  np.testing.assert_allclose(spectra["w_q"], 0.5 * np.linalg.svd(w, compute_uv=False),
                             rtol=1e-5, atol=1e-7)  # float32 differences
  ft, tune, test, files = lora_claim.held_out_text()
  assert len(ft) == pytest.approx(8 * len(test), rel=1e-3) and len(tune) > 0
  train_files = set(data.load_corpus("stdlib").train_files)
  assert files and not any(f.endswith(".py") or f in train_files for f in files)


def test_make_tx_takes_a_traced_learning_rate():
  """Under inject_hyperparams (a traced rate) it equals optax's own warm-up + cosine Adam."""
  lr, steps = 1e-2, 10
  ours = optax.inject_hyperparams(lora_claim.make_tx(steps))(learning_rate=lr)
  ref = optax.chain(optax.clip_by_global_norm(1.0),
                    optax.adam(optax.warmup_cosine_decay_schedule(0.0, lr, 1, steps)))
  params = {"w": jax.numpy.array([1.0, -2.0, 3.0])}
  s1, s2 = ours.init(params), ref.init(params)
  for i in range(4):
    g = {"w": jax.numpy.array([0.3, -0.1, 0.2]) * (i + 1)}
    u1, s1 = jax.jit(ours.update)(g, s1, params)
    u2, s2 = ref.update(g, s2, params)
    np.testing.assert_allclose(u1["w"], u2["w"], rtol=1e-5, atol=1e-9)
  assert np.abs(u1["w"]).max() > 0


@pytest.mark.parametrize("arms", [("lora-all-r16",), ("lora-qv-r4", "lora-qv-r8")])
def test_lora_sizes_refuse_arms_the_run_cannot_measure(arms):
  assert set(lora_claim.QUICK.arms) <= set(lora_claim.FULL.arms) == set(lora_claim.ARMS)
  with pytest.raises(ValueError, match="lora-qv-r4"):
    lora_claim.LoraSizes(**{**lora_claim.QUICK.to_dict(), "arms": arms})


def test_full_rank_error_and_windows():
  cfg = transformer.preset("tiny", d_model=32, n_heads=2)
  params = transformer.init(cfg, jax.random.key(0))
  w = models.windows(0, 16, 3, "val")
  assert w.shape == (3, 17) and np.array_equal(w, models.windows(0, 16, 3, "val"))
  assert kv_compression.full_rank_error(params, cfg, w[:, :-1]) < 1e-4
