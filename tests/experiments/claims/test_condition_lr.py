"""The condition-lr claim's measurements against numpy references and its frozen thresholds, and the
budget tuning (schedule, rate, several seeds) the optimizer claims share."""

import dataclasses
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import transformer
from experiments import models
from experiments.claims import condition_lr
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates
from experiments.train import sweep
from experiments.verdict.arithmetic.rule import clause_verdicts, extension_verdicts, verdict
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running import history

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


SEEDS6 = tuple(range(10, 16))


def _runs(arm_metrics: dict, seeds=SEEDS6):
  return {arm: {s: dict(m) for s in seeds} for arm, m in arm_metrics.items()}


def _jitter(runs, metric, arm, deltas):
  for s, d in zip(sorted(runs[arm]), deltas, strict=True):
    runs[arm][s][metric] += d
  return runs


def _synthetic(vs_frozen, vs_cut, steps=0.8, cut_steps=0.7):
  base = {"steps_frac": 1.0, "val_loss": 2.0, "mean_multiplier": 1.0, "ended_diverged": 0.0,
          "rates_at_grid_edge": 0.0, "rate_at_grid_edge": 0.0}
  r = _runs({"adamw": base,
             "condition": {**base, "steps_frac": steps, "mean_multiplier": 0.7},
             "frozen": {**base, "val_loss": 2.0 + vs_frozen},
             "lr-cut": {**base, "val_loss": 2.0 + vs_cut, "steps_frac": cut_steps}})
  _jitter(r, "steps_frac", "condition", (-0.02, -0.01, 0.0, 0.0, 0.01, 0.02))
  return _jitter(r, "val_loss", "condition", (-0.001, 0.0, 0.001, -0.001, 0.0, 0.001))


def _clauses(runs):
  return [p["verdict"] for p in clause_verdicts(condition_lr.CLAIM, runs, SEEDS6,
                                                indicative=False)]


def test_condition_lr_clauses_margins_and_the_rate_cut_extensions():
  headline = lambda r: verdict(condition_lr.CLAIM, r, SEEDS6, indicative=False)[0]
  extension = lambda r, k=0: extension_verdicts(condition_lr.CLAIM, r, SEEDS6,
                                                indicative=False)[k]["verdict"]
  ok = _synthetic(0.05, 0.05)
  assert _clauses(ok) == ["supported", "supported"] and headline(ok) == "supported"
  assert extension(ok) == "supported" and extension(ok, 1) == "supported"
  # 0.005 nats below the frozen multipliers is inside the 0.01-nat margin: clause ② refuted.
  assert _clauses(_synthetic(0.005, 0.05)) == ["supported", "refuted"]
  assert headline(_synthetic(0.005, 0.05)) == "refuted"
  assert _clauses(_synthetic(0.01, 0.05)) == ["supported", "inconclusive"]  # straddles
  # Median steps 0.99: not 5% faster, clause ① refuted; 0.95 straddled: inconclusive.
  assert _clauses(_synthetic(0.05, 0.05, steps=0.99))[0] == "refuted"
  assert _clauses(_synthetic(0.05, 0.05, steps=0.95))[0] == "inconclusive"
  # A plain rate cut ending lower refutes the first extension, never the headline; its own
  # speed is the second extension's (v2's lr-cut reached AdamW's loss in 0.72 N).
  assert headline(_synthetic(0.05, -0.05)) == "supported"
  assert extension(_synthetic(0.05, -0.05)) == "refuted"
  assert extension(_synthetic(0.05, 0.05, cut_steps=1.0), 1) == "refuted"
  # A tuned rate at an edge blocks what it controls: the primary, or the extensions.
  edge = _synthetic(0.05, 0.05)
  edge["condition"] = {s: {**m, "rates_at_grid_edge": 1.0} for s, m in edge["condition"].items()}
  assert _clauses(edge) == ["inconclusive", "inconclusive"] and extension(edge) == "supported"
  edge = _synthetic(0.05, 0.05)
  edge["lr-cut"] = {s: {**m, "rate_at_grid_edge": 1.0} for s, m in edge["lr-cut"].items()}
  assert headline(edge) == "supported" and extension(edge) == extension(edge, 1) == "inconclusive"


def test_condition_lr_censored_seeds_are_never_numbers():
  """v2's steps fractions [1.5, 1.5, 1.5, 0.746, 0.906] put three sentinels in a t-interval.
  v3 runs to 1.5 N and reads a censoring-aware median: a seed not reached by then counts as
  `[1.5, ∞)`; when that leaves the deciding bound open, clause ① is inconclusive."""
  cens = condition_lr.NOT_REACHED
  assert cens == condition_lr.CAP == condition_lr.FULL.cap == 1.5  # v2's "not reached" too
  th = condition_lr.CLAIM.primary
  assert th.stat == "median" and th.cap == 1.5 and th.censored == ">= 1.5"
  runs = _synthetic(0.05, 0.05)
  for s, v in zip(SEEDS6, [0.7, 0.72, 0.75, 0.8, 0.85, cens], strict=True):
    runs["condition"][s]["steps_frac"] = v
  parts = clause_verdicts(condition_lr.CLAIM, runs, SEEDS6, indicative=False)
  assert parts[0]["verdict"] == "inconclusive" and "censored" in parts[0]["reason"]
  for s, v in zip(SEEDS6, [0.97, 1.1, 1.3, 1.45, cens, cens], strict=True):
    runs["condition"][s]["steps_frac"] = v
  assert _clauses(runs)[0] == "refuted"  # every seed, censored or not, is slower than 0.95
  # A curve point past N counts: reached between 20 (2.5) and 30 (2.2) steps, N = 20.
  assert condition_lr.steps_fraction([10, 20, 30], [3, 2.5, 2.2], 2.35, 20) == \
      pytest.approx(1.25)
  assert condition_lr.steps_fraction([10, 20, 30], [3, 2.5, 2.2], 2.0, 20) == cens
  # Every value a reached seed can take lies below the censoring condition: 1.5 N is the
  # curve's last point, reached there only when the loss equals the target exactly.
  assert condition_lr.steps_fraction([10, 20, 30], [3, 2.5, 2.2], 2.2 + 1e-9, 20) < cens


def test_condition_lr_v3_seeds_are_fresh_and_n_has_a_curve_point():
  used = {s for e in history.load()["condition-lr"] if e["version"] < condition_lr.CLAIM.version
          for s in (*e["seeds"], *e["tuning_seeds"])}  # earlier versions: v3 itself lands too
  claim = condition_lr.CLAIM
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  assert len(claim.seeds) >= 6 and len(claim.tuning_seeds) >= 2 and claim.version == 3
  assert isinstance(claim.revisions[-1], Revision) and condition_lr.FULL.split == "test"
  assert claim.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  budget = claim.axis("budget")
  assert budget.values == (4, 16) and budget.model == "pico-20"
  for name, n in (("pico-20", 160), ("micro-20", 420), ("mini-20", 1300)):
    z = dataclasses.replace(condition_lr.FULL, model=name)
    assert z.budget_steps() == n and n % z.curve_points == 0
    assert z.train_tokens() / models.param_count(name) >= models.TOKENS_PER_PARAM
    for k in budget.values:
      assert budget.sizes_at(claim, z, k).budget_steps() == k * n
  v2 = dataclasses.replace(condition_lr.FULL, steps_multiple=1)  # v2's sizes keep 409
  assert v2.budget_steps() == 409
  assert condition_lr.GRID[0] < 9.49e-3 and condition_lr.GRID[-1] > 9.49e-2  # v2's choices
  assert len(condition_lr.GRID) == 7


def test_a_run_to_the_cap_is_the_n_step_run_until_n():
  """② reads each arm's loss at N on its capped curve: the first N steps are exactly the
  N-step run (same batches, the schedule of N held at its final rate afterwards)."""
  kw = dict(seeds=(0,), learning_rates=(3e-3,), data="stdlib", batch_size=2, seq_len=16,
            eval_batches=1, eval_every=3)
  tx = tuning.on_budget(O.condition_arm(), 6)
  short = sweep.train_many(CFG, tx, steps=6, **kw)
  long = sweep.train_many(CFG, tx, steps=12, **kw)
  assert list(long.steps) == [3, 6, 9, 12]
  np.testing.assert_allclose(long.val_loss[..., :2], short.val_loss, rtol=1e-6)
  assert float(tuning.budget_schedule(6)(11)) == pytest.approx(0.1)  # held past N


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
