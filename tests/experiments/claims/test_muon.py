"""The muon claim: Newton-Schulz's band and entropy bound in float64, budgets, the margin and its
controls on synthetic results."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import models
from experiments.claims import muon
from experiments.verdict.arithmetic.rule import clause_verdicts, extension_verdicts, verdict
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running import history
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
  for r, floor in ((16, 0.94), (32, 0.95), (64, 0.95), (128, 0.95)):  # 16: pico-20's width
    bound = _min_entropy(r, lo, hi)
    assert bound >= floor > muon.ENTROPY_FLOOR
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


def test_muon_budgets_and_steps_ratio_run_to_a_real_cap():
  assert muon.budgets_of(120, muon.FRACTIONS) == [6, 12, 18, 24, 30, 36, 42, 48, 60, 72, 96,
                                                   120, 150, 180, 240]
  assert muon.FRACTIONS[-1] == muon.CAP == 2.0 and 1.0 in muon.FRACTIONS
  with pytest.raises(ValueError, match="distinct"):
    muon.budgets_of(10, (0.1, 0.12, 1.0))
  with pytest.raises(ValueError, match="include 1.0"):
    muon.budgets_of(10, (0.5, 2.0))
  budgets = [12, 24, 48, 120, 240]
  losses = [3.4, 3.0, 2.6, 2.3, 2.1]
  # Target 2.8: crossed between 24 (3.0) and 48 (2.6), at 24 + 24 · 0.2/0.4 = 36 steps.
  assert muon.steps_ratio(budgets, losses, 2.8, 120) == (pytest.approx(36 / 120), False)
  assert muon.steps_ratio(budgets, losses, 3.5, 120) == (pytest.approx(0.1), True)  # floor
  # Past N: between 120 (2.3) and 240 (2.1), at 120 + 120 · 0.1/0.2 = 180 steps = 1.5 N.
  assert muon.steps_ratio(budgets, losses, 2.2, 120) == (pytest.approx(1.5), False)
  assert muon.steps_ratio(budgets, losses, 2.0, 120) == (muon.NOT_REACHED, False)  # censored
  th = muon.CLAIM.primary
  assert th.stat == "median" and th.cap == muon.CAP and th.censored == f"> {muon.CAP:g}"
  assert muon.NOT_REACHED > muon.CAP  # the sentinel meets `censored`; a reached seed never does


def _muon_runs(ratios, split=None, **muon_metrics):
  seeds = tuple(range(10, 10 + len(ratios)))
  split = ratios if split is None else split
  runs = {"adamw": {s: {"ended_diverged": 0.0} for s in seeds},
          "adamw-split": {s: {"ended_diverged": 0.0} for s in seeds},
          "muon": {s: {"steps_ratio": r, "steps_ratio_split": q, "update_sv_entropy_f64": 0.96,
                       "rates_at_grid_edge": 0.0, "split_rate_at_grid_edge": 0.0,
                       "at_budget_floor": 0.0, "at_budget_floor_split": 0.0, **muon_metrics}
                   for s, r, q in zip(seeds, ratios, split, strict=True)}}
  return runs, seeds


def _clauses(runs, seeds):
  return [p["verdict"] for p in clause_verdicts(muon.CLAIM, runs, seeds, indicative=False)]


def test_muon_clauses_margin_censoring_and_controls():
  headline = lambda runs, seeds: verdict(muon.CLAIM, runs, seeds, indicative=False)[0]
  fast = [0.30, 0.35, 0.40, 0.33, 0.37, 0.36]
  assert _clauses(*_muon_runs(fast)) == ["supported", "supported"]
  assert headline(*_muon_runs(fast)) == "supported"
  # 5% fewer steps is inside the 10% margin: not a practical saving.
  slow = [0.94, 0.95, 0.96, 0.95, 0.95, 0.97]
  assert _clauses(*_muon_runs(slow)) == ["supported", "refuted"]
  assert headline(*_muon_runs(slow)) == "refuted"
  assert headline(*_muon_runs([0.80, 0.95, 0.90, 0.85, 1.00, 0.88])) == "inconclusive"
  # A censored seed (not reached by 2 N) is never a number: with six seeds the interval's upper
  # bound is then only known to exceed the cap, so the clause cannot be supported ...
  assert _clauses(*_muon_runs(fast[:5] + [muon.NOT_REACHED])) == ["supported", "inconclusive"]
  # ... while seeds all slower than the margin refute it, censored or not.
  late = [0.95, 1.2, 1.5, 1.1, muon.NOT_REACHED, muon.NOT_REACHED]
  assert _clauses(*_muon_runs(late)) == ["supported", "refuted"]
  # Five seeds give no 95% order-statistic interval of the median: inconclusive.
  assert _clauses(*_muon_runs(fast[:5])) == ["supported", "inconclusive"]
  # The orthogonality clause is read on every run; it needs none of the comparison's controls.
  assert _clauses(*_muon_runs(fast, update_sv_entropy_f64=0.5)) == ["refuted", "supported"]
  for metric in ("rates_at_grid_edge", "at_budget_floor"):
    assert _clauses(*_muon_runs(fast, **{metric: 1.0})) == ["supported", "inconclusive"], metric
  runs, seeds = _muon_runs(fast)
  runs["adamw"][12]["ended_diverged"] = 1.0
  assert _clauses(runs, seeds) == ["supported", "inconclusive"]
  clauses = muon.CLAIM.clauses
  assert clauses[0].proof and not clauses[1].proof
  assert [t for c in clauses for t in c.thresholds] == [muon.ENTROPY, muon.STEPS]


def test_muon_extension_reads_muon_against_adamw_with_rates_apart():
  ext = lambda runs, seeds: extension_verdicts(muon.CLAIM, runs, seeds,
                                               indicative=False)[0]["verdict"]
  fast = [0.30, 0.35, 0.40, 0.33, 0.37, 0.36]
  assert ext(*_muon_runs(fast, split=[0.95, 0.96, 0.97, 0.95, 0.99, 1.1])) == "refuted"
  runs, seeds = _muon_runs(fast)
  assert ext(runs, seeds) == "supported" and verdict(muon.CLAIM, runs, seeds,
                                                     indicative=False)[0] == "supported"
  assert ext(*_muon_runs(fast, split_rate_at_grid_edge=1.0)) == "inconclusive"
  # The extension never moves the headline.
  runs, seeds = _muon_runs(fast, split=[1.5] * 6)
  assert verdict(muon.CLAIM, runs, seeds, indicative=False)[0] == "supported"


def test_muon_v3_seeds_are_fresh_and_its_sizes_train_at_the_regime():
  """v3 reads six seeds and two tuning seeds no kept version ran on; every size of the scale
  axis trains AdamW's N steps on at least 20 tokens per parameter, and the budget axis
  multiplies pico-20's."""
  used = {s for e in history.load()["muon"] if e["version"] < muon.CLAIM.version
          for s in (*e["seeds"], *e["tuning_seeds"])}  # earlier versions: v3 itself lands too
  assert used and not used & {*muon.CLAIM.seeds, *muon.CLAIM.tuning_seeds}
  assert len(muon.CLAIM.seeds) >= 6 and len(muon.CLAIM.tuning_seeds) >= 2
  assert muon.CLAIM.version == 3 and isinstance(muon.CLAIM.revisions[-1], Revision)
  assert muon.FULL.split == "test" and muon.FULL.tune and muon.FULL.extend == 2
  assert muon.FULL.budget_steps() == models.RECIPES["micro-20"].steps == 409
  assert muon.CLAIM.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  for name in muon.CLAIM.axis("scale").values:
    at = dataclasses.replace(muon.FULL, model=name)
    ratio = at.train_tokens() / models.param_count(name)
    assert models.TOKENS_PER_PARAM <= ratio < models.TOKENS_PER_PARAM + 2048 / 1000
    assert at.budget_steps() in muon.budgets_of(at.budget_steps(), muon.FRACTIONS)
  budget = muon.CLAIM.axis("budget")
  assert budget.values == (4, 16) and budget.model == "pico-20"
  pico = dataclasses.replace(muon.FULL, model="pico-20")
  assert [budget.sizes_at(muon.CLAIM, pico, k).train_tokens() for k in (4, 16)] == [
      4 * pico.train_tokens(), 16 * pico.train_tokens()]
  # Every search runs on one grid, and AdamW's v2 rate (9.49e-3) and Muon's (0.03) sit inside.
  assert len(muon.GRID) == 9 and muon.GRID[0] < 9.49e-3 < 0.03 < muon.GRID[-1]


def test_optim_muon_arm_is_optim_muon_and_split_adamw_ties_to_adamw():
  """The Muon arm is the optimizer users import (same updates as `optim.muon`, its defaults);
  AdamW with its two rates tied is `adamw_arm` update for update."""
  import optax

  import optim
  import transformer
  from experiments.lab import optimizers as O

  params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
  grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(1), p.shape), params)

  def updates(tx):
    u, _ = tx.update(grads, tx.init(params), params)
    return jax.tree.leaves(u)

  for a, b in zip(updates(O.optim_muon_arm()(0.02, 3e-3)),
                  updates(optim.muon(0.02, adam_learning_rate=3e-3)), strict=True):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(updates(O.split_adamw_arm()(3e-3, 3e-3)), updates(O.adamw_arm()(3e-3)),
                  strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
  ours = jax.tree.leaves_with_path(O.split_adamw_arm()(3e-3, 1e-3).update(
      grads, O.split_adamw_arm()(3e-3, 1e-3).init(params), params)[0])
  ref = dict(jax.tree.leaves_with_path(optax.adam(1.0, b1=0.9, b2=0.95).update(
      grads, optax.adam(1.0).init(params), params)[0]))
  roles = dict(jax.tree.leaves_with_path(optim.labels(params)))
  for path, u in ours:  # hidden matrices at 3e-3, the rest at 1e-3
    rate = 3e-3 if roles[path] == "hidden" else 1e-3
    np.testing.assert_allclose(u, rate * ref[path], rtol=1e-5)


def test_last_update_entropy_float64_matches_an_eigenvalue_reference():
  """The orthogonality clause's number: float64 entropy of after − before, against the
  eigenvalues of DᵀD (an independent route to the squared singular values)."""
  import transformer
  from experiments.lab import optimizers as O
  from experiments.lab import updates

  cfg = transformer.preset("tiny")
  before, after = (transformer.init(cfg, jax.random.key(k)) for k in (0, 1))
  ref = []
  for a, b, m in zip(jax.tree.leaves(before), jax.tree.leaves(after),
                     jax.tree.leaves(O.HIDDEN(before)), strict=True):
    if m:
      d = (np.asarray(b, np.float64) - np.asarray(a, np.float64)).reshape((-1,) + a.shape[-2:])
      for D in d:
        e = np.linalg.eigvalsh(D.T @ D if D.shape[0] >= D.shape[1] else D @ D.T)
        p = np.clip(e, 0, None) / e.sum()
        ref.append(-(p[p > 0] * np.log(p[p > 0])).sum() / np.log(len(e)))
  got = updates.last_update_entropy_float64(before, after)
  assert got == pytest.approx(np.mean(ref), rel=1e-10)
  assert 0.5 < got < 1  # random init differences: far from rank one, not orthogonal
