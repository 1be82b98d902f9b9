"""The optimizer claims' measurements (`muon`, `condition-lr`, `orthogonal-heads`) against
numpy references, their theorems in float64 on random instances, and their frozen thresholds
against synthetic results."""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim
import transformer
from experiments.claims import condition_lr, muon, orthogonal_heads
from experiments.claims.runner import extension_verdicts, verdict
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates
from experiments.train import sweep
from transformer.linalg.polar import newton_schulz

CFG = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)


def _hidden(params):
  """The hidden matrices of `params` as float64 numpy `(n, m, k)` stacks, in tree order."""
  return [np.asarray(w, np.float64).reshape((-1,) + w.shape[-2:])
          for w, m in zip(jax.tree.leaves(params), jax.tree.leaves(O.HIDDEN(params)),
                          strict=True) if m]


def test_budget_schedule_matches_formula():
  steps, w = 21, 2
  s = tuning.budget_schedule(steps, warmup=0.1, final=0.1)
  got = np.array([float(s(c)) for c in range(steps)])
  ref = np.array([(c + 1) / w if c < w else 1 - 0.9 * (c - w) / (steps - 1 - w)
                  for c in range(steps)])
  np.testing.assert_allclose(got, ref, rtol=1e-6)
  assert got[-1] == pytest.approx(0.1) and got.max() == pytest.approx(1.0)
  with pytest.raises(ValueError, match="steps"):
    tuning.budget_schedule(1)


def test_on_budget_adamw_is_optax_adamw_with_the_schedule():
  params = transformer.init(CFG, jax.random.key(0))
  unit = tuning.budget_schedule(6)
  ours = tuning.on_budget(O.adamw_arm(), 6)(3e-3)
  ref = optax.adamw(lambda c: 3e-3 * unit(c), b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0)
  s1, s2 = ours.init(params), ref.init(params)
  for t in range(3):
    g = jax.tree.map(lambda p, t=t: jax.random.normal(jax.random.key(t), p.shape), params)
    u1, s1 = ours.update(g, s1, params)
    u2, s2 = ref.update(g, s2, params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-10), u1, u2)


def test_tuned_rate_skips_diverged_and_nan():
  assert tuning.tuned_rate([3.0, 2.5, 2.0], [False, False, True], (1, 2, 3)) == (2.0, 1)
  assert tuning.tuned_rate([np.nan, 2.9, 3.1], [False] * 3, (1, 2, 3)) == (2.0, 1)
  with pytest.raises(ValueError, match="diverged"):
    tuning.tuned_rate([1.0, 2.0], [True, True], (1, 2))


def test_last_update_statistics_match_numpy_svd():
  before = transformer.init(CFG, jax.random.key(0))
  after = transformer.init(CFG, jax.random.key(1))
  out = updates.last_update_statistics(before, after)
  s = np.concatenate([np.linalg.svd(b - a, compute_uv=False)
                      for a, b in zip(_hidden(before), _hidden(after), strict=True)])
  r = s.shape[-1]
  p = s**2 / (s**2).sum(-1, keepdims=True)
  entropy = -(p * np.log(p)).sum(-1) / np.log(r)
  p90 = s[:, 0] / s[:, int(np.ceil(0.9 * r)) - 1]
  assert out["update_sv_entropy"] == pytest.approx(entropy.mean(), rel=1e-4)
  assert out["update_cond_p90"] == pytest.approx(p90.mean(), rel=1e-3)
  assert out["update_cond_median"] == pytest.approx(np.median(s[:, 0] / s[:, -1]), rel=1e-3)


def test_hidden_condition_multipliers_match_numpy_cond():
  params = transformer.init(CFG, jax.random.key(0))
  kappa = np.concatenate([np.linalg.cond(w) for w in _hidden(params)])
  ref = np.minimum(1.0, (10.0 / kappa) ** 0.5)
  np.testing.assert_allclose(O.hidden_condition_multipliers(params), ref, rtol=1e-5)
  assert ref.min() < 1  # some init matrix is ill-conditioned: the test can tell them apart


def test_condition_lr_mean_multipliers_per_run():
  p0, p1 = (transformer.init(CFG, jax.random.key(k)) for k in (0, 1))
  stacked = jax.tree.map(lambda a, b: jnp.stack([a, b])[None], p0, p1)  # (1 lr, 2 seeds)
  got = condition_lr.mean_multipliers(stacked)
  ref = [[np.minimum(1, (10 / np.concatenate([np.linalg.cond(w) for w in _hidden(p)])) ** 0.5)
          .mean() for p in (p0, p1)]]
  np.testing.assert_allclose(got, ref, rtol=1e-5)


def _runs(arm_metrics: dict, seeds=(0, 1, 2)):
  return {arm: {s: dict(m) for s in seeds} for arm, m in arm_metrics.items()}


def _jitter(runs, metric, arm, deltas):
  for s, d in zip(sorted(runs[arm]), deltas, strict=True):
    runs[arm][s][metric] += d
  return runs


def test_condition_lr_margins_decide_the_headline_and_the_rate_cut_is_an_extension():
  def runs(vs_frozen, vs_cut):
    base = {"steps_frac": 1.0, "val_loss": 2.0, "mean_multiplier": 1.0}
    r = _runs({"adamw": base, "condition": {**base, "steps_frac": 0.8, "mean_multiplier": 0.7},
               "frozen": {**base, "val_loss": 2.0 + vs_frozen},
               "lr-cut": {**base, "val_loss": 2.0 + vs_cut}})
    return _jitter(r, "val_loss", "condition", (-0.001, 0.0, 0.001))

  seeds = (0, 1, 2)
  headline = lambda r: verdict(condition_lr.CLAIM, r, seeds, indicative=False)[0]
  extension = lambda r: extension_verdicts(condition_lr.CLAIM, r, seeds,
                                           indicative=False)[0]["verdict"]
  assert headline(runs(0.05, 0.05)) == "supported" and extension(runs(0.05, 0.05)) == "supported"
  # 0.005 nats below the frozen multipliers is inside the 0.01-nat margin: adapting is not
  # worth it, whatever the sign.
  assert headline(runs(0.005, 0.05)) == "refuted"
  # The interval straddles the margin: inconclusive.
  assert headline(runs(0.01, 0.05)) == "inconclusive"
  # A plain rate cut ending lower refutes the extension, never the headline.
  assert headline(runs(0.05, -0.05)) == "supported"
  assert extension(runs(0.05, -0.05)) == "refuted"


# ------------------------------------------------------------------ tuning on several seeds


def test_ended_diverged_is_non_finite_or_above_ln_v():
  ln_v = math.log(64)
  got = tuning.ended_diverged([2.0, ln_v - 1e-9, ln_v + 1e-9, np.nan, np.inf], 64)
  assert got.tolist() == [False, False, True, True, True]


def _fake_train_many(loss_of, calls):
  """A stand-in for `train_many`: final val loss `loss_of(lr, seed)`; NaN or > ln V diverges."""

  def train_many(cfg, make_tx, *, seeds, learning_rates, steps, eval_every, **kw):
    del cfg, make_tx, steps, eval_every, kw
    calls.append(tuple(learning_rates))
    loss = np.array([[loss_of(lr, s) for s in seeds] for lr in learning_rates])
    spiked = np.array([[lr == 0.01 and s == 100 for s in seeds] for lr in learning_rates])
    return types.SimpleNamespace(val_loss=loss[..., None], diverged=spiked | ~(loss < 4.0))

  return train_many


def _tune(monkeypatch, loss_of, grid, extend):
  calls = []
  monkeypatch.setattr(sweep, "train_many", _fake_train_many(loss_of, calls))
  t = tuning.tune_on_seeds(CFG, O.adamw_arm(), grid, seeds=(100, 101), steps=4, extend=extend)
  return t, calls


def test_tune_on_seeds_extends_the_grid_past_a_winning_edge(monkeypatch):
  # Optimum at 1.0, past the grid's top; 10 diverges (NaN). Two extensions: 1.0, then 10.
  bowl = lambda lr, s: np.nan if lr > 5 else 2.0 + 0.1 * math.log10(lr) ** 2 + 0.001 * s
  t, calls = _tune(monkeypatch, bowl, (1e-3, 1e-2, 1e-1), extend=2)
  assert calls == [(1e-3, 1e-2, 1e-1), (1.0,), (10.0,)]
  assert t["learning_rate"] == pytest.approx(1.0) and not t["at_edge"]
  assert t["grid"] == pytest.approx([1e-3, 1e-2, 1e-1, 1.0, 10.0])
  assert t["diverged"] == [False, False, False, False, True]
  assert t["val_loss"][1] == pytest.approx(2.0 + 0.4 + 0.001 * 100.5)  # mean of both seeds
  # Without extensions the winner is the grid's top edge, and the record says so.
  t, calls = _tune(monkeypatch, bowl, (1e-3, 1e-2, 1e-1), extend=0)
  assert len(calls) == 1 and t["learning_rate"] == pytest.approx(0.1) and t["at_edge"]
  # The bottom edge extends downward by the same ratio.
  low = lambda lr, s: 2.0 + 0.1 * (math.log10(lr) + 5) ** 2
  t, calls = _tune(monkeypatch, low, (1e-3, 1e-2, 1e-1), extend=1)
  assert calls[1] == pytest.approx((1e-4,)) and t["learning_rate"] == pytest.approx(1e-4)
  assert t["at_edge"]  # still the edge after the one extension allowed


def test_tune_on_seeds_averages_seeds_and_judges_divergence_at_the_end(monkeypatch):
  # Seed 100 prefers 1e-3 slightly, seed 101 prefers 1e-2 strongly: the mean picks 1e-2.
  table = {(1e-3, 100): 2.0, (1e-3, 101): 3.0, (1e-2, 100): 2.1, (1e-2, 101): 2.2,
           (1e-1, 100): 1.0, (1e-1, 101): np.nan}
  t, _ = _tune(monkeypatch, lambda lr, s: table[(lr, s)], (1e-3, 1e-2, 1e-1), extend=0)
  # 1e-1 has the lowest loss on seed 100 but ended diverged on seed 101: never chosen.
  assert t["learning_rate"] == 1e-2 and t["diverged"] == [False, False, True]
  # 1e-2 spiked on seed 100 (train_many's flag) yet ended fine: a spike, not a divergence.
  assert t["spiked"] == [False, True, False]
  assert t["val_loss_by_seed"][1] == [2.1, 2.2] and t["seeds"] == [100, 101]
  with pytest.raises(ValueError, match="diverged"):
    _tune(monkeypatch, lambda lr, s: np.nan, (1e-3, 1e-2), extend=0)


def test_untuned_record_has_the_tuned_records_keys():
  assert set(tuning.untuned(1e-3)) == {"learning_rate", "index", "grid", "val_loss",
                                       "val_loss_by_seed", "diverged", "spiked", "seeds",
                                       "at_edge"}


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


# ------------------------------------------------------------------ orthogonal heads


def _causal_softmax(s):
  T = s.shape[-1]
  s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_orthogonal_heads_can_share_one_pattern_so_provably_non_redundant_cannot_follow():
  """`orthogonal-heads`' theorem in float64: W_Q and W_K head blocks with mutually orthogonal
  column spaces (penalty R = 0) compute identical attention patterns on a stream confined to
  span(e_1, e_2); a generic stream separates them, so the construction is not vacuous."""
  rng = np.random.default_rng(11)
  e, c = np.eye(8), 1 / np.sqrt(2)
  w_q = c * np.stack([e[0] + e[2], e[1] + e[3], e[0] - e[2], e[1] - e[3]], 1)  # (D, H·Dh)
  w_k = c * np.stack([e[0] + e[4], e[1] + e[5], e[0] - e[4], e[1] - e[5]], 1)
  for w in (w_q, w_k):
    Q0, Q1 = np.linalg.qr(w[:, :2])[0], np.linalg.qr(w[:, 2:])[0]
    assert np.linalg.svd(Q0.T @ Q1, compute_uv=False).max() < 1e-15  # principal cosines 0
    with jax.enable_x64(True):
      R, _ = optim.head_gram_overlap(jnp.asarray(w, jnp.float64), n=2)
    assert float(R) == 0.0

  def patterns(X):
    return [_causal_softmax((X @ w_q[:, 2 * h:2 * h + 2]) @ (X @ w_k[:, 2 * h:2 * h + 2]).T
                            / np.sqrt(2)) for h in (0, 1)]

  for _ in range(5):
    X = np.zeros((12, 8))
    X[:, :2] = 3 * rng.standard_normal((12, 2))
    A0, A1 = patterns(X)
    np.testing.assert_allclose(A0, A1, rtol=1e-12, atol=1e-15)
    assert np.abs(A0 - np.tril(np.ones_like(A0)) / np.arange(1, 13)[:, None]).max() > 0.1
  A0, A1 = patterns(3 * rng.standard_normal((12, 8)))
  assert np.abs(A0 - A1).max() > 0.1


def test_choose_strength_takes_the_largest_that_is_free():
  rec = lambda loss: {"val_loss": [9.0, loss], "index": 1}
  choose = orthogonal_heads.choose_strength
  assert choose({0.05: rec(2.50), 0.5: rec(2.519), 5.0: rec(2.53)}, 2.50) == 0.5
  assert choose({0.05: rec(2.49), 0.5: rec(2.48), 5.0: rec(2.47)}, 2.50) == 5.0
  assert choose({0.05: rec(2.60), 0.5: rec(2.70), 5.0: None}, 2.50) == 0.05
  with pytest.raises(ValueError, match="diverged"):
    choose({0.05: None}, 2.5)


def _heads_runs(delta, **orth_metrics):
  seeds = (0, 1, 2, 3, 4)
  jitter = (-0.01, 0.0, 0.01, -0.005, 0.005)
  base = {"pattern_similarity": 0.3, "max_cos": 0.8, "val_loss": 2.5, "prunable_fraction": 0.5,
          "ended_diverged": 0.0, "any_ended_diverged": 0.0, "rates_at_grid_edge": 0.0}
  runs = {"adamw": {s: dict(base) for s in seeds},
          "orth": {s: {**base, "pattern_similarity": 0.3 + delta + j, "max_cos": 0.5,
                       **orth_metrics} for s, j in zip(seeds, jitter, strict=True)},
          "muon-per-head": {s: {**base, "pattern_similarity": 0.1 + j}
                            for s, j in zip(seeds, jitter, strict=True)}}
  return runs, seeds


def test_orthogonal_heads_has_one_primary_metric_with_a_margin():
  primary = [t for t in orthogonal_heads.CLAIM.thresholds if not t.control]
  assert [(t.arm, t.baseline, t.metric) for t in primary] == [("orth", "adamw",
                                                              "pattern_similarity")]
  assert primary[0].margin == orthogonal_heads.PATTERN_MARGIN and primary[0].unit
  assert orthogonal_heads.CLAIM.theorem
  assert orthogonal_heads.FULL.grid == (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)  # frozen
  assert not set(orthogonal_heads.CLAIM.seeds) & set(orthogonal_heads.CLAIM.tuning_seeds)
  headline = lambda r: verdict(orthogonal_heads.CLAIM, *r, indicative=False)[0]
  assert headline(_heads_runs(-0.15)) == "supported"
  assert headline(_heads_runs(-0.02)) == "refuted"  # lower, but inside the margin
  assert headline(_heads_runs(+0.05)) == "refuted"  # more alike
  assert headline(_heads_runs(-0.05)) == "inconclusive"  # straddles the margin
  # The pull did not make the heads more orthogonal in one seed: nothing can be read.
  runs, seeds = _heads_runs(-0.15)
  runs["orth"][3]["max_cos"] = 0.85
  assert headline((runs, seeds)) == "inconclusive"
  assert headline(_heads_runs(-0.15, rates_at_grid_edge=1.0)) == "inconclusive"
  assert headline(_heads_runs(-0.15, any_ended_diverged=1.0)) == "inconclusive"


def test_orthogonal_heads_extensions_never_change_the_headline():
  runs, seeds = _heads_runs(-0.15, val_loss=2.6, prunable_fraction=0.7)
  assert verdict(orthogonal_heads.CLAIM, runs, seeds, indicative=False)[0] == "supported"
  ext = {e["name"]: e["verdict"] for e in extension_verdicts(orthogonal_heads.CLAIM, runs,
                                                             seeds, indicative=False)}
  # 0.1 nats worse: not free; 0.2 more heads prunable: not non-redundant in function;
  # per-head Muon's heads 0.2 less alike: supported.
  assert ext == {"for free": "refuted", "non-redundant in function": "refuted",
                 "per-head Muon": "supported"}
  runs, seeds = _heads_runs(-0.15, val_loss=2.51, prunable_fraction=0.3)
  ext = {e["name"]: e["verdict"] for e in extension_verdicts(orthogonal_heads.CLAIM, runs,
                                                             seeds, indicative=False)}
  assert ext["for free"] == "supported" and ext["non-redundant in function"] == "supported"
