"""Trend statistics an expert would sign: one point per size, points that cannot count left out."""

import math

import numpy as np
import pytest
import scipy.stats

from experiments import models
from experiments.commands import refit
from experiments.verdict import Claim, Sizes, Threshold
from experiments.verdict.arithmetic import stats
from experiments.verdict.declare import axes
from experiments.verdict.render import section

SIZES = {"s1": 1e4, "s2": 4e4, "s3": 1.6e5, "s4": 6.4e5, "s5": 2.56e6}


def test_seeds_are_not_sizes_the_interval_is_the_per_size_means_fit():
  """(size, seed) points with seed noise: the fit equals OLS on the five size means, df 3."""
  rng = np.random.default_rng(0)
  x_size = np.log(list(SIZES.values()))
  true = 0.3 - 0.02 * x_size + 0.01 * rng.standard_normal(x_size.size)  # off the line a bit
  seeds = 7
  x = np.repeat(x_size, seeds)
  y = np.repeat(true, seeds) + 0.05 * rng.standard_normal(x.size)  # fabricated seed noise
  slope, ci, dof = stats.means_slope(x, y)
  means = y.reshape(len(SIZES), seeds).mean(1)
  ref = scipy.stats.linregress(x_size, means)
  half = scipy.stats.t.ppf(0.975, len(SIZES) - 2) * ref.stderr
  assert dof == len(SIZES) - 2
  assert slope == pytest.approx(ref.slope, rel=1e-10)
  assert ci == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-6)
  # The fit that treats every seed as a size has 33 dof and a much narrower interval.
  naive = stats.ols_slope(x, y)[1]
  assert naive[1] - naive[0] < 0.5 * (ci[1] - ci[0])
  # The seed order does not matter, and the mean per size is what enters.
  perm = rng.permutation(x.size)
  assert stats.means_slope(x[perm], y[perm])[1] == pytest.approx(ci, rel=1e-9)


def test_families_share_a_slope_with_an_intercept_each_and_sizes_minus_3_dof():
  x = np.log([1e4, 4e4, 1.6e5, 1e4, 4e4, 1.6e5])
  y = np.array([0.10, 0.21, 0.29, 0.62, 0.69, 0.81])
  slope, ci, dof = stats.means_slope(np.repeat(x, 2), np.repeat(y, 2),
                                     np.repeat(["a"] * 3 + ["b"] * 3, 2))
  design = np.c_[x, [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]].astype(float)
  coef, rss, *_ = np.linalg.lstsq(design, y, rcond=None)
  se = math.sqrt(rss[0] / 3 * np.linalg.inv(design.T @ design)[0, 0])
  assert dof == 3 and slope == pytest.approx(coef[0], rel=1e-10)
  assert ci == pytest.approx((coef[0] - scipy.stats.t.ppf(0.975, 3) * se,
                              coef[0] + scipy.stats.t.ppf(0.975, 3) * se), rel=1e-6)


def _rows(effects, **extra):
  return [{"model": m, "params": SIZES[m], "effect": e, **extra.get(m, {})}
          for m, e in effects.items()]


def test_excluded_and_undefined_points_leave_the_fit_and_say_why():
  effects = {"s1": 0.1, "s2": 0.2, "s3": 0.31, "s4": 0.9, "s5": math.nan}
  fit = stats.fit_trend(_rows(effects, s4={"excluded": "censored: a seed's value >= 0.5"}),
                        "params", label="model")
  assert fit["excluded"] == [["s4", "censored: a seed's value >= 0.5"], ["s5", "not measured"]]
  ref = scipy.stats.linregress(np.log([1e4, 4e4, 1.6e5]), [0.1, 0.2, 0.31])
  assert fit["slope"] == pytest.approx(ref.slope) and fit["points"] == 3 and fit["dof"] == 1
  two = stats.fit_trend(_rows({"s1": 0.1, "s2": 0.2, "s3": math.nan}), "params")
  assert two["slope_ci"] == [None, None] and two["trend"] == "not measured"  # never "no trend"
  none = stats.fit_trend(_rows({"s1": math.nan, "s2": math.nan}), "params")
  assert none["slope"] is None and none["trend"] == "not measured"


def test_disjoint_family_intervals_refuse_the_pooled_slope():
  rows = [{"params": p, "effect": 0.1 * math.log(p) + d, "family": "gpt"}
          for p, d in ((1e4, 0.001), (4e4, -0.002), (1.6e5, 0.001))]
  rows += [{"params": p, "effect": -0.1 * math.log(p) + d, "family": "llama"}
           for p, d in ((1e4, 0.001), (4e4, -0.002), (1.6e5, 0.001))]
  fit = stats.fit_trend(rows, "params", family="family")
  assert fit["pooled"] is False and fit["trend"] == "families disagree"
  assert fit["slope"] is None
  assert fit["per_family"]["gpt"]["trend"] == "grows"
  assert fit["per_family"]["llama"]["slope"] == pytest.approx(-0.1, abs=1e-3)
  agree = stats.fit_trend([{**r, "effect": r["effect"] + (0.2 * math.log(r["params"])
                                                           if r["family"] == "llama" else 0)}
                           for r in rows], "params", family="family")
  assert agree["pooled"] is True and agree["trend"] == "grows"


# ------------------------------------------------ the runner: controls, censoring, training


class ToySizes(Sizes):
  pass


PRIMARY = Threshold.beyond("steps ratio", "method", "ratio", margin=0.05, direction="<",
                           reference=1.0, censored=">= 1")
CONTROL = Threshold("method learns", "method", "learned", supports="== 1", control=True)


def _claim():
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               thresholds=(PRIMARY, CONTROL), seeds=(0, 1, 2), trains=False,
               run=lambda spec: {})


def test_a_failed_control_or_a_censored_seed_keeps_a_size_out_of_the_scale_fit(monkeypatch):
  cards = {"s1": ("gpt", 1e4), "s2": ("gpt", 4e4), "s3": ("gpt", 1.6e5),
           "s4": ("gpt", 6.4e5), "s5": ("gpt", 2.56e6)}

  def runs(ratio, learned=1.0, censor_seed=None):
    return {"method": {s: {"ratio": 1.0 if s == censor_seed else ratio + 0.01 * s,
                           "learned": learned} for s in (0, 1, 2)}}

  per_size = {"s1": runs(0.30), "s2": runs(0.40), "s3": runs(0.52),
              "s4": runs(0.2, learned=0.0), "s5": runs(0.7, censor_seed=1)}
  monkeypatch.setattr(models, "model_card", lambda m: {"family": cards[m][0],
                                                        "params": int(cards[m][1])})
  block = axes.scale(()).block(_claim(), per_size, {m: ToySizes() for m in cards}, (0, 1, 2))
  rows = {r["model"]: r for r in block["rows"]}
  assert rows["s4"]["excluded"] == "control failed: method learns"
  assert rows["s5"]["excluded"] == "censored: a seed's method.ratio >= 1"
  assert "excluded" not in rows["s1"] and block["points"] == 3
  ref = scipy.stats.linregress(np.log([1e4, 4e4, 1.6e5]), [0.31, 0.41, 0.53])
  assert block["slope"] == pytest.approx(ref.slope, rel=1e-9)
  md = "\n".join(section.axis_markdown(axes.scale(()), _claim(),
                                           {"axes": {"scale": block}, "config": {}}, block, "#"))
  assert "no: control failed: method learns" in md and "no: censored" in md
  assert "left out of the fit: s4 (control failed" in axes.scale(()).sentence(block)


def test_an_under_trained_size_is_shown_apart_when_the_regime_holds():
  rows = [{"model": "a", "tokens_per_param": 20.0}, {"model": "b", "tokens_per_param": 20.01},
          {"model": "c", "tokens_per_param": 0.95}]
  axes.flag_under_trained(rows)
  assert "under_trained" not in rows[0] and "under_trained" not in rows[1]
  assert rows[2]["under_trained"] == "under-trained: 0.95 tokens per parameter"
  old = [{"model": "a", "tokens_per_param": 6.2}, {"model": "b", "tokens_per_param": 0.95}]
  axes.flag_under_trained(old)  # no size reaches the regime: a run registered before it
  assert not any("under_trained" in r for r in old)
  assert models.TOKENS_PER_PARAM == 20


def test_every_kept_result_is_fitted_and_rendered_with_the_current_statistics():
  """`refit --check`: each kept results.json is in the current schema, its trends are what the
  current statistics give from the kept rows and findings, and its report.md is what the file
  gives."""

  assert refit.main(["--check"]) == 0


def test_refit_check_tolerates_a_last_bit_and_catches_a_real_change():
  """A fit's last bit moves with the numpy build; `--check` must not fail a fresh install on it,
  and must still fail on a change a reader could see."""
  kept = {"slope": -0.19130378484411883, "ci": [-1.1414131193630845, 0.75], "n": 3, "t": "x"}
  drift = {"slope": -0.19130378484411886, "ci": [-1.1414131193630848, 0.75], "n": 3, "t": "x"}
  assert refit.same(kept, drift)
  assert not refit.same(kept, {**kept, "slope": -0.1914})
  assert not refit.same(kept, {**kept, "n": 4}) and not refit.same(kept, {**kept, "t": "y"})
  assert not refit.same(kept, {**kept, "ci": [-1.1414131193630845]})
  assert not refit.same({"a": None}, {"a": 0.0}) and not refit.same({"a": True}, {"a": 1.0})
  assert not refit.same(kept, {**kept, "extra": 1})


def test_an_unmeasured_trend_cell_shows_each_size_and_what_left_it_out():
  """Under 3 points no slope is printed (two points would fake one); each size's effect is."""
  from experiments.verdict.render.section import axis_text

  rows = [{"family": "gpt", "model": "pico-20", "params": 1.5e4, "effect": 0.318,
           "ci": [0.228, 0.408], "excluded": "control failed: the rate sits at an edge"},
          {"family": "gpt", "model": "micro-20", "params": 4.2e4, "effect": 0.41,
           "ci": [0.339, 0.481]},
          {"family": "gpt", "model": "mini-20", "params": 1.3e5, "effect": None, "ci": None}]
  block = {"rows": rows, **stats.fit_trend(rows, "params", label="model")}
  assert block["trend"] == "not measured"
  cell = axis_text(_claim(), {"axes": {"scale": block}}, "scale")
  assert cell == ("not measured (1 of 3 sizes in the fit, a slope with an interval needs 3): "
                  "pico-20 0.318 [0.228, 0.408]†; micro-20 0.41 [0.339, 0.481]; mini-20 not "
                  "measured († left out: control failed)")
  assert "slope" not in cell.replace("a slope with", "")
  rows.pop()  # two points in the fit: still no slope, and nothing left out to footnote
  rows[0].pop("excluded")
  block = {"rows": rows, **stats.fit_trend(rows, "params", label="model")}
  cell = axis_text(_claim(), {"axes": {"scale": block}}, "scale")
  assert cell.endswith("micro-20 0.41 [0.339, 0.481]") and "†" not in cell


def test_a_trend_cell_is_the_shared_kind_s_cell_of_the_block():
  from experiments.verdict.render.section import axis_text

  fit = {"slope": -0.012, "slope_ci": [-0.02, -0.004], "trend": "shrinks"}
  assert (axis_text(_claim(), {"axes": {"scale": {"rows": [], **fit}}}, "scale")
          == "shrinks: slope -0.012 [-0.02, -0.004] per e-fold of params")
  rows = [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]}, {"T": 1024, "effect": 0.3,
          "ci": [0.2, 0.4]}]
  assert (axis_text(_claim(), {"axes": {"context": {"rows": rows, **fit}}}, "context")[:47]
          == "T = 256: 0.1 [0, 0.2]; T = 1024: 0.3 [0.2, 0.4]")
  assert axis_text(_claim(), {"axes": {}}, "budget") == "—"


def test_every_committed_scale_row_records_its_regime_and_the_bits_it_reached():
  """Issue 38: every row says tokens per parameter and held-out bits per byte. A from-scratch
  size's bits are its `bits_metric` arm's mean held-out loss over the seeds / ln 2, read here
  straight from the kept findings."""
  import json
  import os

  from experiments.claims import CLAIMS
  from experiments.verdict.running import folders

  for cid, claim in CLAIMS.items():
    path = os.path.join(folders.RESULTS_DIR, cid, "results.json")
    res = json.load(open(path))
    for row in (res["axes"].get("scale") or {}).get("rows", []):
      assert row["tokens_per_param"] >= 20 or row.get("under_trained"), (cid, row["model"])
      assert 1.0 < row["bits_per_byte"] < 8.0, (cid, row["model"])
      if claim.reads_base:
        continue
      arm, metric = claim.bits_metric
      kept = os.path.join(folders.RESULTS_DIR, cid, f"size-{row['model']}", "findings.json")
      if os.path.exists(kept):
        runs = json.load(open(kept))["findings"]["runs"][arm]
      else:  # the registered size: its runs are the result's arms
        assert row["model"] == res["config"]["regime"]["model"], (cid, row["model"])
        runs = res["arms"][arm]["runs"]
        assert row["bits_per_byte"] == pytest.approx(res["config"]["regime"]["bits_per_byte"])
      ref = np.mean([runs[str(s)][metric] for s in res["seeds"]]) / math.log(2)
      assert row["bits_per_byte"] == pytest.approx(ref, rel=1e-12), (cid, row["model"])


def test_points_exactly_on_a_line_give_no_interval_not_a_zero_width_one():
  """Every point at a floor (causal-mask's invertible fraction, 0 at every T) has no residual
  spread: the t-interval would be [0, 0], a certainty the data cannot give. Not measured."""
  from experiments.verdict.render.section import axis_text

  rows = [{"T": t, "effect": 0.0, "ci": [0.0, 0.0]} for t in (128, 256, 512, 1024)]
  fit = stats.fit_trend(rows, "T")
  assert fit["trend"] == "not measured" and fit["slope_ci"] == [None, None]
  assert fit["slope"] == 0.0 and fit["points"] == 4 and fit["dof"] == 2
  line = stats.fit_trend([{"T": t, "effect": 0.1 * math.log(t)} for t in (2, 4, 8)], "T")
  assert line["trend"] == "not measured"  # collinear with a slope: no spread either
  assert "no residual spread" in axis_text(_claim(), {"axes": {"context": {"rows": rows, **fit}}},
                                          "context")
  noisy = stats.fit_trend([{"T": t, "effect": e} for t, e in ((2, 0.0), (4, 0.1), (8, 0.0))], "T")
  assert noisy["slope_ci"][0] < noisy["slope_ci"][1]  # any spread: an interval again
