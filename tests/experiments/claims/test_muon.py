"""The muon claim: Newton-Schulz's band and entropy bound in float64, budgets, the margin and its
controls on synthetic results."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import models
from experiments.claims import muon
from experiments.verdict.arithmetic.rule import verdict
from transformer.linalg.polar import newton_schulz

# ------------------------------------------------------------------------------ muon


_NS = (3.4445, -4.7750, 2.0315)


def _ns_float64(G, steps=5, eps=1e-8):
  """Newton–Schulz in float64 numpy, as `newton_schulz` defines it (peak, then Frobenius)."""
  X = G / np.abs(G).max()
  X = X / (np.linalg.norm(X) + eps)
  tall = X.shape[0] > X.shape[1]
  X = X.T if tall else X
  a, b, c = _NS
  for _ in range(steps):
    A = X @ X.T
    X = a * X + (b * A + c * A @ A) @ X
  return X.T if tall else X


def _entropy(s):
  p = s**2 / (s**2).sum()
  return float(-(p * np.log(p)).sum() / np.log(len(s)))


def _min_entropy(r, lo, hi):
  """The least normalised entropy of `r` singular values in `[lo, hi]`: `k` at `hi`, the rest
  at `lo`, minimised over `k` (entropy is Schur-concave in the energy shares)."""
  return min(_entropy(np.r_[np.full(k, hi), np.full(r - k, lo)]) if 0 < k < r else 1.0
             for k in range(r + 1))


def test_five_newton_schulz_steps_map_every_strong_direction_into_the_band():
  """`muon`'s theorem in one dimension: p∘p∘p∘p∘p maps [0.002, 1] into NS_BAND."""
  x = np.geomspace(0.002, 1.0, 200_001)
  for _ in range(5):
    x = _NS[0] * x + _NS[1] * x**3 + _NS[2] * x**5
  lo, hi = muon.NS_BAND
  assert lo <= x.min() < lo + 0.01 and hi - 0.01 < x.max() <= hi  # the band is tight
  y = np.array([0.001])
  for _ in range(5):
    y = _NS[0] * y + _NS[1] * y**3 + _NS[2] * y**5
  assert y[0] < lo  # weaker directions are not lifted: the condition matters


def test_min_entropy_bound_is_a_lower_bound_and_above_the_control_floor():
  rng = np.random.default_rng(7)
  lo, hi = muon.NS_BAND
  for r in (32, 64, 128):
    bound = _min_entropy(r, lo, hi)
    assert bound >= 0.95 > muon.ENTROPY_FLOOR
    for _ in range(300):
      s = rng.choice([lo, hi], r) if rng.random() < 0.5 else rng.uniform(lo, hi, r)
      assert _entropy(s) >= bound - 1e-12


@pytest.mark.parametrize("shape", [(32, 48), (64, 64), (48, 32), (128, 512)])
def test_newton_schulz_update_has_flat_singular_values_so_muons_control_holds_by_construction(
    shape):
  """`muon`: for random G whose every direction has at least 0.002 of its Frobenius norm, the
  update NS(G) has all singular values in NS_BAND and entropy above the band's minimum (≥ 0.95),
  in float64; the library's iteration is the same map."""
  rng = np.random.default_rng(sum(shape))
  m, n = shape
  r = min(shape)
  lo, hi = muon.NS_BAND
  for spread in (1.0, 10.0, 100.0):
    s = np.exp(rng.uniform(0, np.log(spread), r))
    s[0], s[-1] = spread, 1.0
    assert s.min() / np.linalg.norm(s) >= 0.002  # the theorem's condition
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    G = (U * s) @ V.T
    X = _ns_float64(G)
    sv = np.linalg.svd(X, compute_uv=False)
    assert lo <= sv.min() and sv.max() <= hi
    assert _entropy(sv) >= _min_entropy(r, lo, hi) >= 0.95
    with jax.enable_x64(True):
      lib = np.asarray(newton_schulz(jnp.asarray(G, jnp.float64)))
    np.testing.assert_allclose(lib, X, atol=1e-9)


def test_muon_budgets_and_steps_ratio():
  assert muon.budgets_of(120, muon.FRACTIONS) == [12, 18, 24, 30, 36, 42, 48, 60, 72, 96, 120]
  with pytest.raises(ValueError, match="distinct"):
    muon.budgets_of(10, (0.1, 0.12, 1.0))
  budgets = [12, 24, 48, 120]
  losses = [3.4, 3.0, 2.6, 2.3]
  # Target 2.8: crossed between 24 (3.0) and 48 (2.6), at 24 + 24 · 0.2/0.4 = 36 steps.
  assert muon.steps_ratio(budgets, losses, 2.8) == (pytest.approx(36 / 120), False)
  assert muon.steps_ratio(budgets, losses, 3.5) == (pytest.approx(0.1), True)  # at the floor
  assert muon.steps_ratio(budgets, losses, 2.0) == (muon.NOT_REACHED, False)
  assert muon.FRACTIONS[0] < 0.4  # below the floor that censored the earlier run


def _muon_runs(ratios, **muon_metrics):
  seeds = tuple(range(len(ratios)))
  runs = {"adamw": {s: {"ended_diverged": 0.0} for s in seeds},
          "muon": {s: {"steps_ratio": r, "update_sv_entropy": 0.96, "rates_at_grid_edge": 0.0,
                       "at_budget_floor": 0.0, **muon_metrics} for s, r in zip(seeds, ratios,
                                                                               strict=True)}}
  return runs, seeds


def test_muon_margin_decides_the_headline_and_every_control_blocks_it():
  headline = lambda runs, seeds: verdict(muon.CLAIM, runs, seeds, indicative=False)[0]
  assert headline(*_muon_runs([0.30, 0.35, 0.40, 0.33, 0.37])) == "supported"
  # 5% fewer steps is inside the 10% margin: not a practical saving.
  assert headline(*_muon_runs([0.94, 0.95, 0.96, 0.95, 0.95])) == "refuted"
  assert headline(*_muon_runs([0.80, 0.95, 0.90, 0.85, 1.00])) == "inconclusive"  # straddles
  for metric, bad in [("update_sv_entropy", 0.5), ("rates_at_grid_edge", 1.0),
                      ("at_budget_floor", 1.0)]:
    assert headline(*_muon_runs([0.3] * 5, **{metric: bad})) == "inconclusive", metric
  runs, seeds = _muon_runs([0.3] * 5)
  runs["adamw"][2]["ended_diverged"] = 1.0
  assert headline(runs, seeds) == "inconclusive"
  primary = [t for t in muon.CLAIM.thresholds if not t.control]
  assert len(primary) == 1 and primary[0].margin == muon.MARGIN and primary[0].unit
  assert muon.CLAIM.theorem and not set(muon.CLAIM.seeds) & set(muon.CLAIM.tuning_seeds)
  assert muon.FULL.tune and len(muon.FULL.grid) == 9 and muon.FULL.grid[4] == 3e-3


def test_muon_trains_every_size_at_the_regime():
  """v2: every size of the scale axis trains AdamW's N steps on at least 20 tokens per
  parameter (N rescales with the size), and Muon's budgets stay distinct fractions of it."""
  assert muon.FULL.budget_steps() == models.RECIPES["micro-20"].steps == 409
  for name in muon.CLAIM.axis("scale").values:
    at = dataclasses.replace(muon.FULL, model=name)
    ratio = at.train_tokens() / models.param_count(name)
    assert models.TOKENS_PER_PARAM <= ratio < models.TOKENS_PER_PARAM + 2048 / 1000
    assert muon.budgets_of(at.budget_steps(), muon.FRACTIONS)[-1] == at.budget_steps()
  assert muon.CLAIM.version == 2 and not muon.CLAIM.axis("budget").values
  assert muon.CLAIM.primary.censored == f">= {muon.NOT_REACHED}"
