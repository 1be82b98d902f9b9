"""The p-values behind the verdicts and Holm's correction, against independent references:
scipy in float64 for the distributions and the t-test, the definition of Holm's procedure
written out by hand, and the registered rule itself (a condition holds iff its p < 0.05)."""

import itertools
import math
import os

import numpy as np
import pytest
import scipy.stats

from experiments.verdict import Claim
from experiments.verdict.arithmetic.distributions import betainc, binom_sf, clopper_pearson, t_sf
from experiments.verdict.arithmetic.rule import decide
from experiments.verdict.arithmetic.stats import evaluate
from experiments.verdict.declare.thresholds import Threshold
from experiments.verdict.running.multiplicity import condition_p, holm, holm_family, threshold_p


@pytest.mark.parametrize("dof", [1, 2, 4, 9, 29, 200, 2.5])
def test_t_tail_matches_scipy_in_float64(dof):
  for t in (-40.0, -3.0, -0.2, 0.0, 0.7, 2.776445, 6.0, 80.0, 1e4):
    want = scipy.stats.t.sf(t, dof)
    assert t_sf(t, dof) == pytest.approx(want, rel=1e-11, abs=1e-300)


def test_betainc_and_binomial_tail_match_scipy():
  for a, b, x in itertools.product((0.5, 1.0, 3.0, 40.0), (0.5, 2.0, 17.0), (1e-6, 0.2, 0.8,
                                                                          0.999)):
    assert betainc(a, b, x) == pytest.approx(scipy.special.betainc(a, b, x), rel=1e-11)
  for n in (1, 5, 12, 80):
    for k, p in itertools.product(range(n + 2), (0.5, 0.03, 0.7)):
      assert binom_sf(k, n, p) == pytest.approx(scipy.stats.binom.sf(k - 1, n, p), rel=1e-11,
                                                abs=1e-300)
  assert binom_sf(5, 5, 0.5) == 1 / 32  # the sign test's floor with five seeds, exactly


@pytest.mark.parametrize("n", [1, 5, 7, 20])
def test_clopper_pearson_matches_scipy_binomtest(n):
  for k in range(n + 1):
    ci = scipy.stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    lo, hi = clopper_pearson(k, n, 0.95)
    assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)


def test_t_p_value_is_twice_scipys_one_sided_test():
  rng = np.random.default_rng(0)
  for n in (2, 3, 5, 11):
    x = rng.normal(0.3, 1.0, n)
    for cond, alt in (("> 0.1", "greater"), (">= -0.2", "greater"), ("< 0.1", "less"),
                      ("<= 0.9", "less")):
      edge = float(cond.split()[1])
      want = min(1.0, 2 * scipy.stats.ttest_1samp(x, edge, alternative=alt).pvalue)
      got = condition_p("ci", cond, x)
      assert got["test"] == "t" and got["p"] == pytest.approx(want, rel=1e-10)
      assert got["statistic"] == pytest.approx(scipy.stats.ttest_1samp(x, edge).statistic)


def test_a_ci_condition_holds_exactly_when_its_p_is_below_005():
  """The p-value is the registered rule's own: the 95% t-interval meets `> e` iff p < 0.05."""
  rng = np.random.default_rng(1)
  runs_seen = {True: 0, False: 0}
  for i in range(300):
    x = rng.normal(rng.uniform(-1, 1), rng.uniform(0.1, 1.0), 5)
    runs = {"a": {str(s): {"m": float(v)} for s, v in enumerate(x)}}
    th = Threshold.beyond("t", "a", "m", margin=0.0)  # supports '> 0', refutes '< 0'
    ev = evaluate(th, runs, [str(s) for s in range(5)])
    for label, cond in (("supports", th.supports), ("refutes", th.refutes)):
      p = condition_p("ci", cond, x)["p"]
      assert ev[label] == (p < 0.05), (i, x, label, p)
      runs_seen[ev[label]] += 1
  assert min(runs_seen.values()) > 20  # both outcomes were exercised


def test_range_p_value_is_the_exact_sign_test():
  x = [0.1, 0.2, 0.6, 0.3, 0.2]
  r = condition_p("range", "< 0.5", x)
  assert (r["test"], r["statistic"]) == ("sign", 4)
  assert r["p"] == pytest.approx(2 * scipy.stats.binomtest(4, 5, 0.5,
                                                           alternative="greater").pvalue)
  assert condition_p("range", "== 0", [0.0] * 5)["p"] == 0.0625  # every seed: 2 / 2⁵
  assert condition_p("range", "== 0", [1.0] * 5)["p"] == 1.0


def test_degenerate_and_untestable_cases():
  assert condition_p("ci", "<= 0.1", [0.0] * 5)["p"] == 0.0  # a point interval beyond the edge
  assert condition_p("ci", ">= 0.9", [0.0] * 5)["p"] == 1.0
  for x in ([0.3], [0.1, math.nan, 0.2]):
    assert condition_p("ci", "> 0", x) == {"p": 1.0, "test": "none", "statistic": None,
                                           "n": len(x)}
  assert condition_p("ci", "== 1", [1.0, 1.0, 1.1])["test"] == "none"


def holm_by_hand(p, alpha):
  """Holm (1979) from its definition: walk the sorted p-values, reject while p_(j) ≤ α/(m−j+1),
  stop at the first that is not; the adjusted p-value is the running max of (m−j+1)·p_(j)."""
  m = len(p)
  order = sorted(range(m), key=lambda i: p[i])
  rejected, adjusted, stop, running = [False] * m, [None] * m, False, 0.0
  for j, i in enumerate(order, start=1):
    stop = stop or p[i] > alpha / (m - j + 1)
    rejected[i] = not stop
    running = max(running, min(1.0, (m - j + 1) * p[i]))
    adjusted[i] = running
  return adjusted, rejected


def test_holm_matches_its_definition_and_a_worked_example():
  adjusted, rejected = holm([0.01, 0.04, 0.03, 0.005], 0.05)
  assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])  # 3·0.01, 2·0.03 (carried), 4·0.005
  assert rejected == [True, False, False, True]
  rng = np.random.default_rng(2)
  for m in (1, 2, 5, 25):
    for _ in range(50):
      p = list(rng.uniform(0, 0.1, m) ** rng.uniform(1, 3))
      got, want = holm(p, 0.05), holm_by_hand(p, 0.05)
      assert got[0] == pytest.approx(want[0]) and got[1] == want[1]
  assert holm([0.04], 0.05) == ([0.04], [True]) and holm([], 0.05) == ([], [])
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    holm([0.1, math.nan])


def test_a_censored_seed_enters_no_p_value():
  th = Threshold.beyond("steps", "c", "steps", baseline="b", direction="<", margin=0.05,
                        censored=">= 1.5")
  seeds = [str(s) for s in range(5)]
  runs = {"c": {s: {"steps": v} for s, v in zip(seeds, [1.5, 1.5, 1.5, 0.75, 0.9], strict=True)},
          "b": {s: {"steps": 1.0} for s in seeds}}
  ev = evaluate(th, runs, seeds)
  assert threshold_p(th, runs, seeds, ev)["test"] == "none"
  runs["c"] = {s: {"steps": v} for s, v in zip(seeds, [0.6, 0.7, 0.65, 0.75, 0.7], strict=True)}
  r = threshold_p(th, runs, seeds, evaluate(th, runs, seeds))
  assert (r["test"], r["condition"], r["held"]) == ("t", "supports", True)


def toy(cid, x):
  th = Threshold("gain", arm="a", metric="m", supports="> 0.1", refutes="< 0.1")
  ctl = Threshold("works", arm="a", metric="ok", stat="range", supports="== 1", control=True)
  seeds = [str(s) for s in range(len(x))]
  res = {"seeds": seeds, "arms": {"a": {"runs": {s: {"m": v, "ok": 1.0}
                                                 for s, v in zip(seeds, x, strict=True)}}}}
  claim = Claim(id=cid, topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
                thresholds=(th, ctl), trains=False, run=print)
  return claim, res


def test_holm_family_reads_each_verdict_through_its_deciding_thresholds():
  entries = {"strong": toy("strong", [0.9, 1.0, 1.1, 0.95, 1.05]),   # supported, tiny p
             "weak": toy("weak", [0.12, 0.3, 0.2, 0.45, 0.25]),      # supported, p = 0.041
             "against": toy("against", [-0.5, -0.4, -0.6, -0.45, -0.55]),  # refuted
             "open": toy("open", [-0.5, 0.5, 0.1, 0.3, -0.2])}       # inconclusive
  fam = holm_family(entries, 0.05)
  assert [fam[c]["verdict"] for c in entries] == ["supported", "supported", "refuted",
                                                  "inconclusive"]
  assert sum(len(e["tests"]) for e in fam.values()) == 4  # the controls are not in the family
  for cid, (claim, res) in entries.items():
    runs = {a: b["runs"] for a, b in res["arms"].items()}
    v, _, _ = decide(claim.thresholds, runs, res["seeds"])
    assert fam[cid]["verdict"] == v
  raw = [fam[c]["tests"][0]["p"] for c in entries]
  adjusted, rejected = holm_by_hand(raw, 0.05)
  assert [fam[c]["tests"][0]["p_holm"] for c in entries] == pytest.approx(adjusted)
  assert fam["weak"]["tests"][0]["p"] < 0.05 and not rejected[1]  # passes alone, not in four
  assert [fam[c]["survives"] for c in entries] == [True, False, True, None]
  assert fam["open"]["p_holm"] is None


def test_kept_family_reads_every_kept_result_by_its_frozen_thresholds():
  from experiments.claims import CLAIMS
  from experiments.verdict.arithmetic.stats import fmt
  from experiments.verdict.running.folders import RESULTS_DIR
  from experiments.verdict.running.multiplicity import holm_lines, holm_text, kept_family
  from experiments.verdict.running.schema import load_results

  fam = kept_family(order=list(CLAIMS))
  assert list(fam) == [c for c in CLAIMS if c in fam] and len(fam) >= 1
  for cid, e in fam.items():
    assert e["verdict"] == load_results(os.path.join(RESULTS_DIR, cid))["verdict"]
    assert (e["survives"] is None) == (e["verdict"] not in ("supported", "refuted"))
    assert (holm_text(e) in ("—", "settled by proof (no test)")
            or holm_text(e).endswith(f"Holm (p = {fmt(e['p_holm'])})"))
  # softmax-kernel v4 rests on two clauses settled by proof: none of its thresholds is tested
  if "softmax-kernel" in fam and fam["softmax-kernel"]["tests"] == []:
    assert holm_text(fam["softmax-kernel"]) == "settled by proof (no test)"
  tests = [t for e in fam.values() for t in e["tests"]]
  adjusted, rejected = holm_by_hand([t["p"] for t in tests], 0.05)
  assert [t["p_holm"] for t in tests] == pytest.approx(adjusted)
  assert [t["survives"] for t in tests] == rejected
  assert holm_lines(fam)[0].endswith(f"over {len(tests)} primary thresholds of {len(fam)} claims")


def test_a_censored_median_threshold_gets_scipys_exact_sign_test():
  """A `stat="median"` threshold enters the family with the sign test of its condition: a seed
  counts only when its whole known range meets it (censored: beyond its cap, never the
  sentinel), checked against scipy's binomial test."""
  th = Threshold("steps", "a", "r", stat="median", supports="< 0.9", refutes="> 0.9",
                 censored=">= 2.5", cap=2.0)
  values = [0.5, 0.6, 0.7, 0.8, 2.5, 2.5, 0.4]  # two seeds censored at 2N
  runs = {"a": {s: {"r": v} for s, v in enumerate(values)}}
  seeds = range(len(values))
  ev = evaluate(th, runs, seeds)
  got = threshold_p(th, runs, seeds, ev)
  want = scipy.stats.binomtest(5, 7, 0.5, alternative="greater").pvalue
  assert got["test"] == "sign" and got["statistic"] == 5
  assert got["p"] == pytest.approx(min(1.0, 2 * want), rel=1e-12)
