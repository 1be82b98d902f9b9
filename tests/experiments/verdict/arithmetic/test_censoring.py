"""Censored seeds: the fraction reaching a target, the median's order-statistic interval with
right-censored seeds, and the registered rule reading an undetermined bound, against scipy in
float64 and order statistics computed by hand."""

import math

import numpy as np
import pytest
import scipy.stats

from experiments.verdict.arithmetic.censoring import (
  median_interval,
  order_rank,
  reached,
  seed_bounds,
  truth,
)
from experiments.verdict.arithmetic.rule import decide
from experiments.verdict.arithmetic.stats import evaluate
from experiments.verdict.declare.thresholds import Threshold

INF = math.inf


@pytest.mark.parametrize("n", range(1, 31))
def test_order_rank_is_the_largest_rank_reaching_the_level(n):
  r, coverage = order_rank(n, 0.95)
  cover = lambda r: 1 - 2 * scipy.stats.binom.cdf(r - 1, n, 0.5)
  if r == 0:
    assert cover(1) < 0.95 and coverage == 1.0
  else:
    assert coverage == pytest.approx(cover(r), abs=1e-14) and coverage >= 0.95
    assert r == (n + 1) // 2 or cover(r + 1) < 0.95


def test_five_seeds_have_no_95_percent_median_interval_six_do():
  assert order_rank(5) == (0, 1.0)  # [x_(1), x_(5)] covers 1 − 2/32 = 0.9375 only
  assert order_rank(6) == (1, 1 - 2 / 64)
  m = median_interval([0.1, 0.2, 0.3, 0.4, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5])
  assert m["interval"] == (-INF, INF) and m["median"] == (0.3, 0.3)


def test_uncensored_interval_is_the_hand_computed_order_statistics():
  x = np.array([3.1, -0.4, 2.2, 0.9, 5.5, 1.7, 0.2, 4.4, 2.9, 1.1])
  s = np.sort(x)  # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so r = 2
  m = median_interval(x, x)
  assert m["rank"] == 2 and m["coverage"] == pytest.approx(1 - 22 / 1024)
  assert m["interval"] == (s[1], s[8])
  assert m["median"] == pytest.approx((np.median(x),) * 2)


def test_censored_seeds_sort_last_and_a_bound_on_one_reads_beyond_the_cap():
  obs = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
  m = median_interval(obs + [1.0, 1.0], obs + [INF, INF])  # n = 8, r = 1
  assert m["rank"] == 1 and m["interval"] == (0.5, INF)
  assert m["bounds"]["hi"] == (1.0, INF)  # x_(8) is censored: known only to exceed the cap
  assert m["median"] == pytest.approx((0.85, 0.85))  # (x_(4) + x_(5)) / 2, both measured
  m = median_interval(obs[:3] + [1.0] * 5, obs[:3] + [INF] * 5)
  assert m["median"] == (1.0, INF)  # the median itself is censored


def test_interval_covers_the_median_at_least_at_its_level_under_censoring():
  """Exponential steps, censored at a cap: the true median (ln 2) is covered ≥ 95%."""
  rng = np.random.default_rng(0)
  n, cap, hits, reps = 9, 1.2, 0, 3000
  for _ in range(reps):
    x = rng.exponential(1.0, n)
    m = median_interval(np.minimum(x, cap), np.where(x > cap, INF, x))
    hits += m["interval"][0] <= math.log(2) <= m["interval"][1]
  assert hits / reps >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / reps)


def test_fraction_reached_matches_scipy_binomtest():
  for censored in ([True] * 3 + [False] * 2, [False] * 6, [True] * 4):
    r = reached(censored)
    k, n = len(censored) - sum(censored), len(censored)
    ci = scipy.stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert (r["k"], r["n"], r["fraction"]) == (k, n, k / n)
    assert r["ci95"] == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_paired_bounds_of_a_censored_arm_or_baseline():
  lo, up = seed_bounds([0.7, 1.5, 0.8, 1.5], [1.0, 1.0, 1.5, 1.5], [False, True, False, True],
                       [False, False, True, True], cap=1.0)
  assert lo.tolist() == pytest.approx([-0.3, 0.0, -INF, -INF])
  assert up.tolist() == pytest.approx([-0.3, INF, -0.2, INF])


def test_truth_of_a_condition_on_a_bound_known_within_a_range():
  b = {"lo": (0.2, 0.2), "hi": (0.9, INF)}
  assert truth("< 0.95", b) is None  # the upper bound is somewhere in [0.9, ∞)
  assert truth("< 0.85", b) is False and truth(">= 0.2", b) is True
  assert truth("> 0.2", b) is False
  assert truth("> 0.1", {"lo": (0.05, 0.3), "hi": (1, 1)}) is None
  assert truth("== 1", {"lo": (1, 1), "hi": (1, 1)}) is True


def steps_runs(values, seeds):
  return {"c": {s: {"steps": v} for s, v in zip(seeds, values, strict=True)},
          "b": {s: {"steps": 1.0} for s in seeds}}


def test_no_sentinel_enters_the_median_interval():
  th = Threshold.beyond("steps", "c", "steps", baseline="b", direction="<", margin=0.05,
                        stat="median", censored=">= 1.5", cap=1.0)
  seeds = [str(s) for s in range(7)]
  values = [0.6, 0.7, 0.75, 0.8, 0.85, 1.5, 1.5]
  ev = evaluate(th, steps_runs(values, seeds), seeds)
  big = evaluate(th, steps_runs(values[:5] + [99.0, 99.0], seeds), seeds)
  assert ev["interval"] == big["interval"] and ev["mean"] == big["mean"] == pytest.approx(-0.2)
  assert ev["interval"] == (pytest.approx(-0.4), INF)
  assert ev["reached"]["k"] == 5 and not ev["supports"] and not ev["refutes"]
  assert ev["undetermined"] == []  # x_(7) ≥ cap − 1 = 0 > −0.05: supports is plainly false
  assert "2 of 7 seeds censored at 1" in ev["what"]
  v, why, _ = decide((th,), steps_runs([0.6, 0.7, 0.75, 0.8, 0.85, 0.86, 0.87], seeds), seeds)
  assert v == "supported"


def test_the_rule_reads_an_undetermined_bound_as_inconclusive_and_says_why():
  th = Threshold("steps", arm="c", metric="steps", stat="median", supports="< 0.95",
                 refutes="> 0.95", censored=">= 1.5", cap=0.9)  # censored: known only ≥ 0.9
  seeds = [str(s) for s in range(6)]
  values = [0.5, 0.6, 0.6, 0.7, 0.8, 1.5]
  runs = {"c": {s: {"steps": v} for s, v in zip(seeds, values, strict=True)}}
  ev = evaluate(th, runs, seeds)
  assert ev["bounds"]["hi"] == (0.9, INF) and ev["undetermined"] == ["supports"]
  v, why, _ = decide((th,), runs, seeds)
  assert v == "inconclusive" and why.startswith("censored seeds leave the deciding bound")
  runs["c"]["5"]["steps"] = 0.85
  assert decide((th,), runs, seeds)[0] == "supported"


def test_five_seeds_read_on_the_median_are_inconclusive_and_say_they_need_six():
  th = Threshold("steps", arm="c", metric="steps", stat="median", supports="< 0.95")
  seeds = [str(s) for s in range(5)]
  runs = {"c": {s: {"steps": v} for s, v in zip(seeds, [0.5, 0.6, 0.6, 0.7, 0.8], strict=True)}}
  ev = evaluate(th, runs, seeds)
  assert ev["interval"] == (-INF, INF) and "needs 6" in ev["what"]
  assert decide((th,), runs, seeds)[0] == "inconclusive"


def test_a_cap_goes_with_a_censored_median_only_and_is_kept_out_of_older_dicts():
  with pytest.raises(ValueError, match="cap=None goes with stat='median'"):
    Threshold("s", arm="c", metric="m", stat="median", supports="< 1", censored=">= 1.5")
  with pytest.raises(ValueError, match="cap=1.0 goes with"):
    Threshold("s", arm="c", metric="m", supports="< 1", censored=">= 1.5", cap=1.0)
  old = Threshold("s", arm="c", metric="m", supports="< 1", censored=">= 1.5")
  assert "cap" not in old.to_dict() and Threshold.from_dict(old.to_dict()) == old
  new = Threshold("s", arm="c", metric="m", stat="median", supports="< 1", censored=">= 1.5",
                  cap=1.0)
  assert new.to_dict()["cap"] == 1.0 and Threshold.from_dict(new.to_dict()) == new


def test_a_report_shows_how_many_seeds_reached_the_target():
  from experiments.verdict import Claim
  from experiments.verdict.render.report import claim_markdown
  from tests.experiments.verdict.toy_claims import valid_results

  th = Threshold.beyond("steps", "c", "steps", baseline="b", direction="<", margin=0.05,
                        stat="median", censored=">= 1.5", cap=1.0)
  claim = Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
                thresholds=(th,), trains=False, run=print)
  seeds = [str(s) for s in range(7)]
  runs = steps_runs([0.6, 0.7, 0.75, 0.8, 0.85, 1.5, 1.5], seeds)
  res = {**valid_results(), "seeds": seeds, "effects": [],
         "arms": {a: {"runs": r, "mean": {}, "std": {}} for a, r in runs.items()}}
  row = next(line for line in claim_markdown(claim, res) if line.startswith("| steps |"))
  assert "median, 95% order-statistic interval (2 of 7 seeds censored at 1)" in row
  assert "5 of 7 seeds reached the target [0.2904, 0.9633]" in row
  assert "[-0.4, inf]" in row and "1.5" not in row
