"""How a trend is worded: a 1-dof interval is "not resolved", never "no trend", and families
whose own slopes differ in sign or size are each shown."""

import math

from experiments.verdict.arithmetic.stats import families_differ, fit_trend, trend_reading
from experiments.verdict.declare.axis import fit_text, trend_clause


def rows(effects, family=None, T=(64, 256, 1024)):
  return [{"T": t, "effect": e, **({"family": family} if family else {})}
          for t, e in zip(T, effects, strict=True)]


def test_one_residual_dof_reads_not_resolved_never_no_trend():
  fit = fit_trend(rows([0.1, 0.5, 0.2]), "T")  # 3 means, 1 dof, the interval spans 0
  assert (fit["dof"], fit["trend"]) == (1, "no trend")  # what results.json keeps is unchanged
  assert trend_reading(fit) == "not resolved (1 df)"
  cell = fit_text(fit, "T", "lengths")
  sentence = trend_clause(fit, "T", "lengths", "under 3 points")
  assert cell.startswith("not resolved (1 df): slope ") and "no trend" not in cell
  assert sentence.startswith("the trend is not resolved: slope ") and "no trend" not in sentence
  assert "(1 residual degree of freedom)" in sentence


def test_more_dof_or_a_resolved_slope_keep_their_words():
  flat = fit_trend(rows([0.1, 0.5, 0.2, 0.4], T=(64, 128, 256, 512)), "T")
  assert flat["dof"] == 2 and trend_reading(flat) == "no trend"
  assert fit_text(flat, "T", "lengths").startswith("no trend: slope ")
  up = fit_trend(rows([0.1, 0.3, 0.5]), "T")  # exactly on a line: no interval at all
  assert trend_reading(up) == "not measured"
  grows = fit_trend(rows([0.1, 0.31, 0.5]), "T")
  assert (grows["dof"], trend_reading(grows)) == (1, "grows")


def test_families_with_opposite_slopes_each_show_their_own():
  both = rows([0.1, 0.5, 0.7], "gpt") + rows([0.6, 0.1, 0.05], "llama")
  fit = fit_trend(both, "T", family="family")
  assert fit["pooled"]  # the 1-dof intervals overlap, so a pooled slope is read
  gpt, llama = fit["per_family"]["gpt"], fit["per_family"]["llama"]
  assert gpt["slope"] > 0 > llama["slope"] and families_differ(fit)
  cell = fit_text(fit, "T", "lengths")
  sentence = trend_clause(fit, "T", "lengths", "under 3 points")
  for text in (cell, sentence):
    assert "the families' own slopes differ: gpt " in text and "; llama " in text
    assert f"{gpt['slope']:.4g}" in text and f"{llama['slope']:.4g}" in text
  same = fit_trend(rows([0.1, 0.5, 0.7], "gpt") + rows([0.15, 0.45, 0.8], "llama"), "T",
                   family="family")
  assert not families_differ(same) and "families' own" not in fit_text(same, "T", "lengths")


def test_disjoint_family_intervals_differ_in_size():
  fit = {"per_family": {"gpt": {"slope": 0.2, "slope_ci": [0.15, 0.25]},
                        "llama": {"slope": 0.9, "slope_ci": [0.8, 1.0]}}}
  assert families_differ(fit)
  fit["per_family"]["llama"] = {"slope": 0.22, "slope_ci": [0.1, 0.3]}
  assert not families_differ(fit)
  fit["per_family"]["llama"] = {"slope": math.nan, "slope_ci": [None, None]}
  assert not families_differ(fit)
