"""The condition-lr claim's measurements against numpy references and its frozen thresholds, and the
budget tuning (schedule, rate, several seeds) the optimizer claims share."""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import transformer
from experiments.claims import condition_lr
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates
from experiments.train import sweep
from experiments.verdict.arithmetic.rule import extension_verdicts, verdict

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
    base = {"steps_frac": 1.0, "val_loss": 2.0, "mean_multiplier": 1.0, "ended_diverged": 0.0,
            "rates_at_grid_edge": 0.0, "rate_at_grid_edge": 0.0}
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
  # A tuned rate at an edge of its grid blocks what it controls: the primary, or the extension.
  edge = runs(0.05, 0.05)
  edge["condition"] = {s: {**m, "rates_at_grid_edge": 1.0} for s, m in edge["condition"].items()}
  assert headline(edge) == "inconclusive" and extension(edge) == "supported"
  edge = runs(0.05, 0.05)
  edge["lr-cut"] = {s: {**m, "rate_at_grid_edge": 1.0} for s, m in edge["lr-cut"].items()}
  assert headline(edge) == "supported" and extension(edge) == "inconclusive"


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
  assert t["excluded"] == [False, False, False, False, True] and t["extensions"] == 2
  assert t["losses"][1] == pytest.approx(2.0 + 0.4 + 0.001 * 100.5)  # mean of both seeds
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
  assert t["learning_rate"] == 1e-2 and t["excluded"] == [False, False, True]
  # 1e-2 spiked on seed 100 (train_many's flag) yet ended fine: a spike, not a divergence.
  assert t["spiked"] == [False, True, False]
  assert t["losses_by_seed"][1] == [2.1, 2.2] and t["seeds"] == [100, 101]
  with pytest.raises(ValueError, match="diverged"):
    _tune(monkeypatch, lambda lr, s: np.nan, (1e-3, 1e-2), extend=0)


def test_untuned_record_has_the_tuned_records_keys():
  assert set(tuning.untuned(1e-3)) == {"learning_rate", "index", "grid", "losses",
                                       "losses_by_seed", "excluded", "spiked", "seeds",
                                       "at_edge", "flat", "extensions"}
