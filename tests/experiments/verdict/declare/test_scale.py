"""The scale axis of the claims runner: sizes, the slope on log(params), the trend, the table."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest
import scipy.stats

from experiments import jsonio, models
from experiments.claims import CLAIMS
from experiments.commands import table, tour
from experiments.verdict import Claim, Sizes, Threshold, TrainedSizes
from experiments.verdict.arithmetic import rule, stats
from experiments.verdict.declare import axes
from experiments.verdict.running import folders, runner, schema
from tests.experiments.verdict.toy_claims import (
  FAMILY,
  GAIN,
  PARAMS,
  SEEDS,
  ScaleSizes,
  block,
  fake_run,
  quiet,
  scale_claim,
  valid_results,
)

pytestmark = pytest.mark.usefixtures("cards")


@dataclasses.dataclass(frozen=True)
class NoModelSizes(Sizes):
  n: int


def points(effect, names):
  x = [math.log(PARAMS[m]) for m in names for _ in SEEDS]
  y = [effect[m] + 0.01 * s for m in names for s in SEEDS]
  return x, y


def test_ols_slope_matches_scipy_linregress_in_float64():
  rng = np.random.default_rng(0)
  x = np.log(np.repeat([1e5, 8.6e5, 2e6], 5))
  y = 0.3 - 0.02 * x + 0.01 * rng.standard_normal(x.size)
  slope, (lo, hi) = stats.ols_slope(x, y)
  ref = scipy.stats.linregress(x, y)
  half = scipy.stats.t.ppf(0.975, x.size - 2) * ref.stderr
  assert slope == pytest.approx(ref.slope, rel=1e-12, abs=1e-15)
  assert (lo, hi) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-6)
  assert stats.ols_slope([0.0, 1.0], [1.0, 3.0]) == (2.0, None)  # no residual dof
  with pytest.raises(ValueError, match="two sizes"):
    stats.ols_slope([1.0, 1.0, 1.0], [0.0, 1.0, 2.0])


def linear(level: float, slope: float, names=("mini", "small", "base")) -> dict:
  """Effects `level + slope · log(params / 1e5)`, off the line by a few thousandths per size
  (so the fit has residuals, and an interval of non-zero width)."""
  off = {"mini": 0.002, "small": -0.004, "base": 0.002, "llama-mini": 0.001,
         "llama-base": -0.001}
  return {m: level + slope * math.log(PARAMS[m] / 1e5) + off[m] for m in names}


@pytest.mark.parametrize("effect, expected", [
    (linear(0.2, 0.1), "grows"),      # positive, rising
    (linear(-0.2, -0.1), "grows"),    # negative, falling: |effect| up
    (linear(0.6, -0.1), "shrinks"),
    (linear(-0.6, 0.1), "shrinks"),
])
def test_trend_follows_the_magnitude_of_the_effect(effect, expected):
  sc = block(effect)
  assert sc["trend"] == expected
  assert sc["slope_ci"][0] * sc["slope_ci"][1] > 0  # the interval excludes 0


def test_no_trend_when_the_slope_interval_contains_zero():
  sc = block({"mini": 0.40, "small": 0.41, "base": 0.40}, noise={0: -0.3, 1: 0.3, 2: 0.0})
  assert sc["slope_ci"][0] < 0 < sc["slope_ci"][1] and sc["trend"] == "no trend"
  assert stats.trend(None, 1.0) == "no trend"


def test_sizes_run_through_the_runner_with_slope_equal_to_scipys(tmp_path):
  effect = linear(0.5, -0.08)
  calls = []
  claim = scale_claim(fake_run(effect, calls))
  lines = []
  res, run_dir = runner.run_claim(claim, sizes=("mini", "base"), root=str(tmp_path),
                                  log=lines.append)
  # The registered size runs first, into the run folder; the others into size-<model>/.
  assert calls == [("small", run_dir), ("mini", os.path.join(run_dir, "size-mini")),
                   ("base", os.path.join(run_dir, "size-base"))]
  assert [line for line in lines if "scale " in line and "/3" in line] == [
      "[toy] scale 1/3: small (GPT, 0.86M params): the registered size, where the verdict is "
      "read", "[toy] scale 2/3: mini (GPT, 0.1M params)",
      "[toy] scale 3/3: base (GPT, 2.0M params)"]
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  schema.validate_results(on_disk, ["toy"])
  sc = on_disk["axes"]["scale"]
  assert [r["model"] for r in sc["rows"]] == ["mini", "small", "base"]  # by params
  m = effect["mini"] + 0.01
  ci = scipy.stats.t.interval(0.95, 2, loc=m, scale=scipy.stats.sem([m - 0.01, m, m + 0.01]))
  assert sc["rows"][0] == {"family": "GPT", "model": "mini", "params": 100_000,
                            "effect": pytest.approx(m), "ci": pytest.approx(list(ci)),
                            "verdict": "supported", "failed_controls": []}
  # The fit reads one point per size, the seed mean: 3 sizes leave 1 degree of freedom.
  x = [math.log(PARAMS[m]) for m in ("mini", "small", "base")]
  y = [effect[m] + 0.01 for m in ("mini", "small", "base")]
  ref = scipy.stats.linregress(x, y)
  half = scipy.stats.t.ppf(0.975, 1) * ref.stderr
  assert sc["slope"] == pytest.approx(ref.slope, rel=1e-9)
  assert sc["slope_ci"] == pytest.approx([ref.slope - half, ref.slope + half], rel=1e-6)
  assert sc["dof"] == 1 and sc["points"] == 3 and sc["excluded"] == []
  assert sc["trend"] == "shrinks" and ref.slope + half < 0
  for name in ("mini", "small", "base"):
    assert os.path.exists(os.path.join(run_dir, f"size-{name}", "findings.json"))
  assert os.path.exists(os.path.join(run_dir, "scale.png"))
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "## Scale: the primary effect against model size" in text and "![scale.png]" in text
  assert text.rstrip().endswith(axes.scale(()).sentence(sc))
  assert "With scale (mini 0.1M → base 2.0M params, GPT family), the effect shrinks" in text
  assert "At the largest size (`base`, 2.0M params) the primary threshold would be **supported**"\
      in text
  frozen = json.load(open(os.path.join(run_dir, "claim.json")))
  assert "scale_models" not in frozen  # not declared: claim.json as before


def test_the_verdict_is_read_only_at_the_registered_size(tmp_path):
  effect = {"mini": 0.5, "small": 0.4, "base": -0.3}  # base alone would refute
  claim = scale_claim(fake_run(effect))
  one, _ = runner.run_claim(claim, root=str(tmp_path / "a"), log=quiet)
  res, run_dir = runner.run_claim(claim, sizes=("mini", "small", "base"),
                                  root=str(tmp_path / "b"), log=quiet)
  assert "scale" not in one["axes"] and "scale" in res["axes"]
  for key in ("verdict", "reason", "effects", "arms", "extensions", "config"):
    assert res[key] == one[key], key
  assert res["verdict"] == "supported"
  base = res["axes"]["scale"]["rows"][-1]
  assert base["model"] == "base" and rule.size_test(GAIN, base)[0] == "refuted"
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "**Verdict: supported.**" in text and "would be **refuted**" in text


def test_two_families_and_declared_sizes_but_quick_runs_one_size(tmp_path):
  effect = {"mini": 0.5, "small": 0.4, "base": 0.3, "llama-mini": 0.6, "llama-base": 0.35}
  claim = scale_claim(fake_run(effect),
                      axes=(axes.scale(("mini", "base", "llama-mini", "llama-base")),))
  assert claim.to_dict()["scale_models"] == ["mini", "base", "llama-mini", "llama-base"]
  quick, quick_dir = runner.run_claim(claim, quick=True, root=str(tmp_path), log=quiet)
  assert "scale" not in quick["axes"]
  assert not any(n.startswith("size-") for n in os.listdir(quick_dir))
  res, run_dir = runner.run_claim(claim, root=str(tmp_path), log=quiet)
  assert {r["family"] for r in res["axes"]["scale"]["rows"]} == {"GPT", "Llama"}
  assert len(res["axes"]["scale"]["rows"]) == 5  # the registered `small` added to the declared four
  assert "GPT and Llama families" in axes.scale(()).sentence(res["axes"]["scale"])
  assert os.path.exists(os.path.join(run_dir, "scale.png"))


def test_a_crashed_size_loses_nothing_and_resume_reruns_only_it(tmp_path):
  effect = {"mini": 0.5, "small": 0.4, "base": 0.3}
  calls = []
  claim = scale_claim(fake_run(effect, calls, fail=("mini",)))
  res, run_dir = runner.run_claim(claim, sizes=("mini", "base"), root=str(tmp_path), log=quiet)
  assert [r["model"] for r in res["axes"]["scale"]["rows"]] == ["small", "base"]
  assert "Size `mini` failed" in open(os.path.join(run_dir, "report.md")).read()
  assert res["verdict"] == "supported"
  calls.clear()
  fixed = dataclasses.replace(claim, run=fake_run(effect, calls))
  again, same_dir = runner.run_claim(fixed, sizes=("mini", "base"), resume=run_dir, log=quiet)
  assert same_dir == run_dir and [m for m, _ in calls] == ["mini"]  # the others were reused
  assert [r["model"] for r in again["axes"]["scale"]["rows"]] == ["mini", "small", "base"]
  assert again["verdict"] == res["verdict"] and again["effects"] == res["effects"]
  with pytest.raises(ValueError, match="same settings"):
    runner.run_claim(fixed, quick=True, resume=run_dir, log=quiet)


def test_a_kept_run_keeps_its_findings_and_resumes_on_another_machine(tmp_path, monkeypatch):
  effect = {"mini": 0.5, "small": 0.4, "base": 0.3}
  calls = []
  claim = scale_claim(fake_run(effect, calls))
  monkeypatch.setitem(CLAIMS, "toy", claim)
  monkeypatch.setattr(folders, "RESULTS_DIR", str(tmp_path / "results"))
  monkeypatch.setattr(folders, "git_revision", lambda: "0" * 40)  # a clean checkout
  res, run_dir = runner.run_claim(claim, sizes=("mini",), root=str(tmp_path / "a"), log=quiet)
  kept = table.keep(run_dir, folders.RESULTS_DIR)
  assert folders.saved_findings(kept) == ["size-mini/findings.json", "size-small/findings.json"]
  before = {f: open(os.path.join(kept, f)).read() for f in ("results.json", "report.md")}
  calls.clear()  # a fresh machine: the first run folder is gone, only results/ is left
  again, new_dir = runner.run_claim(claim, sizes=("mini", "base"), resume=kept,
                                    root=str(tmp_path / "b"), log=quiet)
  assert [m for m, _ in calls] == ["base"]  # the kept sizes were reused, not run again
  assert os.path.commonpath([new_dir, str(tmp_path / "b")]) == str(tmp_path / "b")
  assert {f: open(os.path.join(kept, f)).read() for f in before} == before  # results/ untouched
  assert [r["model"] for r in again["axes"]["scale"]["rows"]] == ["mini", "small", "base"]
  assert again["axes"]["scale"]["rows"][:2] == res["axes"]["scale"]["rows"]
  assert again["verdict"] == res["verdict"] and again["runtime_s"] >= res["runtime_s"]
  big = os.path.join(new_dir, "size-base", "findings.json")
  with open(big, "a") as f:
    f.write(" " * table.KEEP_MAX_BYTES)  # findings too large for results/ stay in the run
  assert folders.saved_findings(table.keep(new_dir, folders.RESULTS_DIR)) == [
      "size-mini/findings.json", "size-small/findings.json"]


def test_a_full_tour_reads_registered_sizes_and_scale_adds_the_others(tmp_path, monkeypatch):
  calls = []
  run = fake_run({"mini": 0.5, "small": 0.4, "base": 0.3}, calls)
  claim = dataclasses.replace(scale_claim(run, axes=(axes.scale(("mini", "base")),)),
                              id="causal-mask")
  monkeypatch.setattr(tour, "CLAIMS", {claim.id: claim})
  monkeypatch.setattr(tour, "_opening", lambda log: ["opening"])
  res, _ = tour.run_tour(root=str(tmp_path), log=quiet)
  assert [m for m, _ in calls] == ["small"]  # 4 hours for the tour: the sizes are `claim ID`'s
  assert "scale" not in jsonio.load_strict(res["claims"][0]["results"])["axes"]
  calls.clear()
  res, _ = tour.run_tour(root=str(tmp_path), log=quiet, scale=True)
  assert [m for m, _ in calls] == ["small", "mini", "base"]
  scale = jsonio.load_strict(res["claims"][0]["results"])["axes"]["scale"]
  assert [r["model"] for r in scale["rows"]] == ["mini", "small", "base"]


def test_each_size_and_length_records_the_registered_rule_with_its_controls(tmp_path):
  learned = {"mini": 0.9, "small": 0.8, "base": 0.3}  # the instrument fails at `base`
  inner = fake_run({"mini": 0.5, "small": 0.4, "base": 0.3})

  def run(spec):
    out = inner(spec)
    for s, m in out["runs"]["control"].items():
      m["learned"] = learned[spec.sizes.model] + 0.01 * s
    return out

  works = Threshold("control learns", "control", "learned", supports=">= 0.5", control=True)
  claim = scale_claim(run, thresholds=(GAIN, works), axes=(axes.context(
      (256,), lambda sizes, T: dataclasses.replace(sizes, model="base")),))
  res, run_dir = runner.run_claim(claim, sizes=("mini", "base"), root=str(tmp_path), log=quiet)
  schema.validate_results(jsonio.load_strict(os.path.join(run_dir, "results.json")), ["toy"])
  by_model = {r["model"]: r for r in res["axes"]["scale"]["rows"]}
  assert res["verdict"] == "supported"  # read at `small` only
  assert (by_model["mini"]["verdict"], by_model["mini"]["failed_controls"]) == ("supported", [])
  assert (by_model["base"]["verdict"], by_model["base"]["failed_controls"]) == (
      "inconclusive", ["control learns"])
  assert rule.size_test(GAIN, by_model["base"])[0] == "supported"  # the threshold alone
  (ctx,) = res["axes"]["context"]["rows"]
  assert (ctx["T"], ctx["verdict"], ctx["failed_controls"]) == (256, "inconclusive",
                                                                 ["control learns"])
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "**inconclusive** (failed control: control learns)" in text
  assert "the registered rule there gives **inconclusive** (failed control: control learns)" \
      in text
  bad = dict(by_model["base"], verdict="maybe")
  with pytest.raises(ValueError, match=r"scale.rows\[0\].verdict"):
    schema.validate_axis("scale", {**res["axes"]["scale"], "rows": [bad, by_model["mini"]]})


def test_a_crash_at_the_registered_size_is_raised(tmp_path):
  claim = scale_claim(fake_run({"mini": 0.5, "small": 0.4}, fail=("small",)))
  with pytest.raises(RuntimeError, match="small"):
    runner.run_claim(claim, sizes=("mini",), root=str(tmp_path), log=quiet)


def test_scale_declarations_are_checked_at_construction(monkeypatch):
  run = fake_run({})
  with pytest.raises(ValueError, match=r"scale_models names \['huge'\].*Fix: choose from"):
    scale_claim(run, axes=(axes.scale(("mini", "huge")),))
  with pytest.raises(ValueError, match="distinct"):
    scale_claim(run, axes=(axes.scale(("mini", "mini")),))
  with pytest.raises(ValueError, match="no `model` field. Fix: add `model: str`"):
    Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
          thresholds=(GAIN,), run=run, trains=False, QUICK=NoModelSizes(1),
          FULL=NoModelSizes(2), axes=(axes.scale(("mini",)),))
  no_field = Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
                   thresholds=(GAIN,), run=run, trains=False, QUICK=NoModelSizes(1),
                   FULL=NoModelSizes(2))
  with pytest.raises(ValueError, match="--sizes runs the claim at several base models"):
    runner.run_claim(no_field, sizes=("mini",), log=quiet)
  with pytest.raises(ValueError, match="--sizes names"):
    runner.run_claim(scale_claim(run), sizes=("huge",), log=quiet)
  monkeypatch.delattr(models, "model_card")
  with pytest.raises(ValueError, match="no model_card"):
    runner.run_claim(scale_claim(run), sizes=("mini",), log=quiet)


def test_registered_claims_keep_their_claim_json():
  for claim in CLAIMS.values():
    if not claim.axis("scale").values:
      assert "scale_models" not in claim.to_dict()
  for cid in table.committed_runs():  # a later registration may drop an axis; its kept
    frozen = jsonio.load_strict(os.path.join(folders.RESULTS_DIR, cid, "claim.json"))
    if CLAIMS[cid].version == frozen.get("version", 1):  # version's scale still renders
      assert CLAIMS[cid].axis("scale").values or "scale_models" not in frozen


def _valid_scale():
  rows = [{"family": "GPT", "model": m, "params": p, "effect": 0.1, "ci": [0.0, 0.2]}
          for m, p in (("mini", 1e5), ("base", 2e6))]
  return {"rows": rows, "slope": -0.01, "slope_ci": [-0.02, -0.001], "trend": "shrinks"}


@pytest.mark.parametrize("breakage, message", [
    (lambda s: s.update(trend="up"), "trend"),
    (lambda s: s.pop("slope_ci"), "keys"),
    (lambda s: s["rows"][0].pop("model"), r"rows\[0\].model"),
    (lambda s: s["rows"][1].update(params=0), "params"),
    (lambda s: s["rows"][1].update(ci=[0.1]), "ci"),
    (lambda s: s["rows"].pop(), "at least two"),
    (lambda s: s["rows"][1].update(model="mini"), "repeat"),
    (lambda s: s.update(slope="steep"), "slope"),
    (lambda s: s.update(slope_ci=[math.nan, 0.0]), "not finite"),
])
def test_the_schema_rejects_a_malformed_scale(breakage, message):
  context = {"rows": [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]}], "slope": None,
             "slope_ci": [None, None], "trend": "not measured"}
  good = {**valid_results(), "axes": {"scale": _valid_scale(), "context": context}}
  schema.validate_results(good)
  broken = json.loads(json.dumps(good))
  breakage(broken["axes"]["scale"])
  with pytest.raises(ValueError, match=message):
    schema.validate_results(broken)
  bad_context = {**good, "axes": {"context": {**context, "rows": [
      {"T": 256.5, "effect": 0.1, "ci": [0.0, 0.2]}]}}}
  with pytest.raises(ValueError, match="context"):
    schema.validate_results(bad_context)


@dataclasses.dataclass(frozen=True)
class TrainingSizes(TrainedSizes):
  model: str
  steps: int = 30
  batch_size: int = 4
  seq_len: int = 16


def test_a_claim_that_trains_reports_tokens_per_parameter_per_size(tmp_path):
  effect = {"mini": 0.5, "small": 0.4, "base": 0.25}
  claim = Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
                run=fake_run(effect), QUICK=TrainingSizes("mini"),
                FULL=TrainingSizes("small", steps=100), seeds=SEEDS, trains=False,
                thresholds=(GAIN,))
  res, run_dir = runner.run_claim(claim, sizes=("mini", "base"), root=str(tmp_path), log=quiet)
  assert res["config"]["budget"] == {"train_tokens": 100 * 4 * 16, "params": 860_000,
                                     "tokens_per_param": pytest.approx(6400 / 860_000)}
  got = {r["model"]: r["tokens_per_param"] for r in res["axes"]["scale"]["rows"]}
  assert got == pytest.approx({m: 6400 / PARAMS[m] for m in ("mini", "small", "base")})
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "trains on 6,400 tokens: 0.00744 tokens per parameter" in text
  assert "| tokens / param |" in text and "| 0.064 |" in text  # mini: 6400 / 100 000
  untrained, _ = runner.run_claim(scale_claim(fake_run(effect)), sizes=("mini",),
                                  root=str(tmp_path / "b"), log=quiet)
  assert "budget" not in untrained["config"]  # a claim that trains nothing: no budget
  assert all("tokens_per_param" not in r for r in untrained["axes"]["scale"]["rows"])
  bad = json.loads(json.dumps(res))
  bad["axes"]["scale"]["rows"][0]["tokens_per_param"] = -1.0
  with pytest.raises(ValueError, match="tokens_per_param"):
    schema.validate_results(bad)
  bad = json.loads(json.dumps(res))
  bad["config"]["budget"].pop("params")
  with pytest.raises(ValueError, match="config.budget"):
    schema.validate_results(bad)


def test_the_table_shows_the_trend_with_the_slope_interval(tmp_path, monkeypatch):
  committed = table.committed_runs()
  cid = next(iter(committed))
  # the hand-made fit is shown as written (the table's replay would refit it from its rows)
  monkeypatch.setattr(table, "replayed", table.load_committed)

  def trend_cell(scale, folder):
    (folder / cid).mkdir(parents=True)
    jsonio.dump_strict({**committed[cid], "axes": {"scale": scale} if scale else {}},
                       str(folder / cid / "results.json"))
    lines = table.table_lines(str(folder))
    column = [c.strip() for c in lines[0].strip("|").split(" | ")].index("trend with size")
    row = next(line for line in lines if f"`{cid}`" in line)
    return [c.strip() for c in row.strip("|").split(" | ")][column]

  assert (trend_cell(_valid_scale(), tmp_path / "scaled")
          == "shrinks: slope -0.01 [-0.02, -0.001] per e-fold of params")
  assert trend_cell(None, tmp_path / "one-size") == "—"  # scale null: a dash


def test_claim_cli_takes_sizes(tmp_path, monkeypatch, capsys):
  claim = scale_claim(fake_run(linear(0.5, -0.05)))
  monkeypatch.setattr(tour, "CLAIMS", {"toy": claim})
  assert tour.claim_main(["toy", "--sizes", "mini,base", "--out", str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert "the effect shrinks" in out and "toy: supported" in out
  assert tour.claim_main(["toy", "--sizes", "mini,mini", "--out", str(tmp_path)]) == 2
  assert "distinct" in capsys.readouterr().err
  assert tour.claim_main(["toy", "--sizes", "huge", "--out", str(tmp_path)]) == 2
  assert "--sizes names ['huge']" in capsys.readouterr().err


def test_two_families_share_one_slope_with_an_intercept_each():
  # The Llama sizes sit 0.5 above the GPT sizes; within each family the effect falls by 0.05
  # per e-fold. A pooled fit would mix the offset into the slope; the shared one must not.
  names = ("mini", "small", "base", "llama-mini", "llama-base")
  effect = {m: e + (0.5 if FAMILY[m] == "Llama" else 0.0)
            for m, e in linear(-0.6, -0.05, names).items()}
  noise = {0: 0.01, 1: -0.02, 2: 0.015}
  sc = block(effect, noise)
  # Reference: least squares on the seed mean of each size (5 points), one intercept per family.
  fams = np.array([FAMILY[m] for m in effect])
  x = np.array([math.log(PARAMS[m]) for m in effect])
  y = np.array([effect[m] + np.mean(list(noise.values())) for m in effect])
  design = np.c_[x, fams == "GPT", fams == "Llama"].astype(np.float64)
  coef, rss, *_ = np.linalg.lstsq(design, y, rcond=None)
  dof = x.size - 3
  cov = float(rss[0]) / dof * np.linalg.inv(design.T @ design)
  half = scipy.stats.t.ppf(0.975, dof) * math.sqrt(cov[0, 0])
  assert sc["slope"] == pytest.approx(coef[0], rel=1e-9)
  assert sc["slope_ci"] == pytest.approx([coef[0] - half, coef[0] + half], rel=1e-6)
  assert sc["trend"] == "grows"  # the mean effect is negative and falls: its magnitude rises
  assert set(sc["per_family"]) == {"GPT", "Llama"}
  for fam in ("GPT", "Llama"):
    at = fams == fam
    ref = scipy.stats.linregress(x[at], y[at])
    assert sc["per_family"][fam]["slope"] == pytest.approx(ref.slope, rel=1e-9)
  with pytest.raises(ValueError, match="groups must have"):
    stats.ols_slope([0.0, 1.0, 2.0], [0.0, 1.0, 2.0], groups=["a", "b"])
  bad = {**_valid_scale(), "per_family": {"GPT": {"slope": 0.1, "slope_ci": [0.0, 0.2]}}}
  with pytest.raises(ValueError, match=r"scale.per_family.GPT: keys"):
    schema.validate_axis("scale", bad)
  one_family = block({"mini": 0.2, "small": 0.4, "base": 0.6})
  assert "per_family" not in one_family


def test_a_size_whose_effect_is_n_a_is_kept_and_left_out_of_the_fit_and_figure(tmp_path):
  """A primary effect can be n/a at a size (eigenvalue-constrained: AdamW never diverged), so
  its value is NaN at every seed: the run still finishes, the row says so, the fit and the
  figure use the finite sizes only."""
  effect = {"mini": math.nan, "small": 0.4, "base": math.nan}
  res, run_dir = runner.run_claim(scale_claim(fake_run(effect)), sizes=("mini", "base"),
                                  root=str(tmp_path), log=quiet)
  schema.validate_results(jsonio.load_strict(os.path.join(run_dir, "results.json")), ["toy"])
  rows = {r["model"]: r for r in res["axes"]["scale"]["rows"]}
  assert set(rows) == {"mini", "small", "base"}
  assert rows["small"]["effect"] == pytest.approx(0.41)
  assert rows["mini"]["effect"] is None and rows["base"]["effect"] is None  # n/a in the JSON
  sc = res["axes"]["scale"]
  assert sc["slope"] is None and sc["trend"] == "not measured"  # one size
  assert res["axes"]["scale"]["excluded"] == [["mini", "not measured"], ["base", "not measured"]]
  assert os.path.exists(os.path.join(run_dir, "scale.png"))
  effect["small"] = math.nan  # n/a at every size (its log-x figure once crashed on that)
  res, run_dir = runner.run_claim(scale_claim(fake_run(effect)), sizes=("mini", "base"),
                                  root=str(tmp_path / "c"), log=quiet)
  assert [r["effect"] for r in res["axes"]["scale"]["rows"]] == [None, None, None]
  assert res["axes"]["scale"]["trend"] == "not measured" and os.path.exists(os.path.join(run_dir,
                                                                                "scale.png"))
  effect.update(small=0.4, base=0.2)  # two finite sizes: the slope is theirs alone
  res, _ = runner.run_claim(scale_claim(fake_run(effect)), sizes=("mini", "base"),
                            root=str(tmp_path / "b"), log=quiet)
  x, y = points(effect, ["small", "base"])
  assert res["axes"]["scale"]["slope"] == pytest.approx(scipy.stats.linregress(x, y).slope,
                                                        rel=1e-9)


def test_a_from_scratch_size_records_the_bits_per_byte_its_models_reached():
  """A claim whose sizes train from scratch names a held-out loss (`bits_metric`); each scale
  row carries its seeds' mean / ln 2. A claim that names none records none."""
  effect = linear(0.2, 0.1)
  loss = {"mini": 2.0, "small": 1.7, "base": 1.5}
  per_size = {m: {"treated": {s: {"score": effect[m] + 0.01 * s} for s in SEEDS},
                  "control": {s: {"score": 0.0, "loss": loss[m] + 0.1 * s} for s in SEEDS}}
              for m in effect}
  sizes = {m: ScaleSizes(m) for m in effect}
  claim = scale_claim(fake_run(effect), bits_metric=("control", "loss"))
  rows = axes.scale(()).block(claim, per_size, sizes, SEEDS)["rows"]
  for row in rows:
    ref = np.mean([loss[row["model"]] + 0.1 * s for s in SEEDS]) / math.log(2)
    assert row["bits_per_byte"] == pytest.approx(ref, rel=1e-12)
  plain = axes.scale(()).block(scale_claim(fake_run(effect)), per_size, sizes, SEEDS)["rows"]
  assert not any("bits_per_byte" in r for r in plain)
