"""The optimizer claims' measurements (`muon`, `condition-lr`, `orthogonal-heads`) against
numpy references, and their frozen thresholds against synthetic results."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import transformer
from experiments.claims import condition_lr, muon, orthogonal_heads
from experiments.claims.runner import extension_verdicts, verdict
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates

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


def test_orthogonal_heads_ratio():
  assert orthogonal_heads.ratio(2.0, 4.0) == 0.5
  assert orthogonal_heads.ratio(0.0, 0.0) == 1.0
  assert orthogonal_heads.ratio(3.0, 0.0) == 4.0


def _runs(arm_metrics: dict, seeds=(0, 1, 2)):
  return {arm: {s: dict(m) for s in seeds} for arm, m in arm_metrics.items()}


def _jitter(runs, metric, arm, deltas):
  for s, d in zip(sorted(runs[arm]), deltas, strict=True):
    runs[arm][s][metric] += d
  return runs


def test_muon_thresholds_decide_the_verdict():
  def runs(ratio):
    r = _runs({"adamw": {"steps_ratio": 1.0, "update_sv_entropy": 0.5, "diverged": 0.0},
               "muon": {"steps_ratio": ratio, "update_sv_entropy": 0.95, "diverged": 0.0}})
    return _jitter(r, "steps_ratio", "muon", (-0.01, 0.0, 0.01))

  seeds = (0, 1, 2)
  assert verdict(muon.CLAIM, runs(0.5), seeds, indicative=False)[0] == "supported"
  assert verdict(muon.CLAIM, runs(1.2), seeds, indicative=False)[0] == "refuted"
  assert verdict(muon.CLAIM, runs(0.8), seeds, indicative=False)[0] == "inconclusive"
  broken = runs(0.5)
  for s in seeds:
    broken["muon"][s]["update_sv_entropy"] = 0.4  # Muon's updates not more orthogonal
  assert verdict(muon.CLAIM, broken, seeds, indicative=False)[0] == "inconclusive"


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


def test_orthogonal_heads_thresholds_cover_every_arm_and_measure():
  pairs = {(t.arm, t.metric) for t in orthogonal_heads.CLAIM.thresholds if not t.control}
  assert pairs == {(a, f"{k}_rel") for a in orthogonal_heads.ARMS
                   for k in (*orthogonal_heads.METRICS, "val_loss")}
  good = {"max_cos_rel": 0.5, "pattern_similarity_rel": 0.5, "n_prunable_rel": 0.5,
          "val_loss_rel": 1.0, "diverged": 0.0}
  runs = _runs({"adamw": good, **{a: good for a in orthogonal_heads.ARMS}})
  seeds = (0, 1, 2)
  for a in orthogonal_heads.ARMS:
    runs = _jitter(runs, "max_cos_rel", a, (-0.01, 0.0, 0.01))
  assert verdict(orthogonal_heads.CLAIM, runs, seeds, indicative=False)[0] == "supported"
  for s in seeds:
    runs["muon-per-head"][s]["pattern_similarity_rel"] = 0.95
  assert verdict(orthogonal_heads.CLAIM, runs, seeds, indicative=False)[0] == "refuted"
