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
from experiments.verdict import (
  Claim,
  Sizes,
  Threshold,
  TrainedSizes,
  axes,
  axis_report,
  folders,
  more_steps,
  runner,
  schema,
  stats,
)

PARAMS = {"mini": 100_000, "small": 860_000, "base": 2_000_000, "llama-mini": 120_000,
          "llama-base": 2_300_000}
FAMILY = {"mini": "GPT", "small": "GPT", "base": "GPT", "llama-mini": "Llama",
          "llama-base": "Llama"}


@pytest.fixture(autouse=True)
def cards(monkeypatch):
  """Known base models: every name is a recipe, and its card gives a family and a size."""
  for name in PARAMS:
    monkeypatch.setitem(models.RECIPES, name, models.RECIPES["quick"])
  monkeypatch.setattr(models, "model_card",
                      lambda name: {"family": FAMILY[name], "params": PARAMS[name]},
                      raising=False)


@dataclasses.dataclass(frozen=True)
class ScaleSizes(Sizes):
  model: str
  n: int = 1


@dataclasses.dataclass(frozen=True)
class NoModelSizes(Sizes):
  n: int


SEEDS = (0, 1, 2)
GAIN = Threshold.beyond("gain", "treated", "score", baseline="control", margin=0.1, unit="nats")


def fake_run(effect: dict, calls: list | None = None, fail=()):
  """A claim's `run` whose paired effect at model `m` and seed `s` is `effect[m] + 0.01 s`."""
  def run(spec):
    m = spec.sizes.model
    if calls is not None:
      calls.append((m, spec.run_dir))
    if m in fail:
      raise RuntimeError(f"out of memory at {m}")
    return {"runs": {"treated": {s: {"score": effect[m] + 0.01 * s} for s in spec.seeds},
                     "control": {s: {"score": 0.0} for s in spec.seeds}},
            "notes": [f"- ran {m}"]}
  return run


def scale_claim(run, **kw):
  kw = {"seeds": SEEDS, "trains": False, "thresholds": (GAIN,), **kw}
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               run=run, QUICK=ScaleSizes("mini"), FULL=ScaleSizes("small"), **kw)


def quiet(*_):
  pass


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


def block(effect: dict, noise: dict | None = None) -> dict:
  """The scale axis's block over sizes whose seed-s effect is `effect[m] + noise[s]`."""
  noise = noise or {s: 0.01 * s for s in SEEDS}
  per_size = {m: {"treated": {s: {"score": effect[m] + noise[s]} for s in SEEDS},
                  "control": {s: {"score": 0.0} for s in SEEDS}} for m in effect}
  claim = scale_claim(fake_run(effect))
  return axes.scale(()).block(claim, per_size, {m: ScaleSizes(m) for m in effect}, SEEDS)


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
  assert base["model"] == "base" and axis_report.size_test(GAIN, base)[0] == "refuted"
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "**Verdict: supported.**" in text and "would be **refuted**" in text


def test_two_families_and_declared_sizes_but_quick_runs_one_size(tmp_path):
  effect = {"mini": 0.5, "small": 0.4, "base": 0.3, "llama-mini": 0.6, "llama-base": 0.35}
  claim = scale_claim(fake_run(effect), scale_models=("mini", "base", "llama-mini",
                                                      "llama-base"))
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
  claim = dataclasses.replace(scale_claim(fake_run({"mini": 0.5, "small": 0.4, "base": 0.3},
                                                   calls), scale_models=("mini", "base")),
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
  claim = scale_claim(run, thresholds=(GAIN, works), context_lengths=(256,),
                      at_length=lambda sizes, T: dataclasses.replace(sizes, model="base"))
  res, run_dir = runner.run_claim(claim, sizes=("mini", "base"), root=str(tmp_path), log=quiet)
  schema.validate_results(jsonio.load_strict(os.path.join(run_dir, "results.json")), ["toy"])
  by_model = {r["model"]: r for r in res["axes"]["scale"]["rows"]}
  assert res["verdict"] == "supported"  # read at `small` only
  assert (by_model["mini"]["verdict"], by_model["mini"]["failed_controls"]) == ("supported", [])
  assert (by_model["base"]["verdict"], by_model["base"]["failed_controls"]) == (
      "inconclusive", ["control learns"])
  assert axis_report.size_test(GAIN, by_model["base"])[0] == "supported"  # the threshold alone
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
    scale_claim(run, scale_models=("mini", "huge"))
  with pytest.raises(ValueError, match="distinct"):
    scale_claim(run, scale_models=("mini", "mini"))
  with pytest.raises(ValueError, match="no `model` field. Fix: add `model: str`"):
    Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
          thresholds=(GAIN,), run=run, trains=False, QUICK=NoModelSizes(1),
          FULL=NoModelSizes(2), scale_models=("mini",))
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
    if not claim.scale_models:
      assert "scale_models" not in claim.to_dict()
  for cid in table.committed_runs():
    frozen = jsonio.load_strict(os.path.join(folders.RESULTS_DIR, cid, "claim.json"))
    assert CLAIMS[cid].scale_models or "scale_models" not in frozen


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
  from tests.experiments.verdict.test_runner import _valid

  context = {"rows": [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]}], "slope": None,
             "slope_ci": [None, None], "trend": "not measured"}
  good = {**_valid(), "axes": {"scale": _valid_scale(), "context": context}}
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


def test_the_table_shows_the_trend_with_the_slope_interval(tmp_path):
  committed = table.committed_runs()
  cid = next(iter(committed))

  def trend_cell(scale, folder):
    (folder / cid).mkdir(parents=True)
    jsonio.dump_strict({**committed[cid], "axes": {"scale": scale} if scale else {}},
                       str(folder / cid / "results.json"))
    row = next(line for line in table.table_lines(str(folder)) if f"`{cid}`" in line)
    return [c.strip() for c in row.strip("|").split(" | ")][9]

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


@dataclasses.dataclass(frozen=True)
class LengthSizes(Sizes):
  model: str
  seq_len: int


def length_claim(effect_at, calls=None, fail=(), **kw):
  """A claim whose paired effect at length T and seed s is `effect_at(T) + 0.01 s`."""
  def run(spec):
    T = spec.sizes.seq_len
    if calls is not None:
      calls.append((spec.sizes.model, T, spec.run_dir))
    if T in fail:
      raise RuntimeError(f"out of memory at T = {T}")
    return {"runs": {"treated": {s: {"score": effect_at(T) + 0.01 * s} for s in spec.seeds},
                     "control": {s: {"score": 0.0} for s in spec.seeds}}}

  def at_length(sizes, T):
    return LengthSizes(model="base", seq_len=T)

  kw = {"seeds": SEEDS, "trains": False, "thresholds": (GAIN,), "at_length": at_length, **kw}
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               run=run, QUICK=LengthSizes("mini", 32), FULL=LengthSizes("small", 128), **kw)


def test_context_lengths_run_through_the_runner_with_a_slope_on_log_T(tmp_path):
  def effect_at(T):  # off the line a little, so the fit has residuals and an interval
    return 0.05 * math.log(T) + {256: 2e-4, 512: -4e-4, 1024: 2e-4}.get(T, 0.0)

  calls = []
  claim = length_claim(effect_at, calls, context_lengths=(1024, 256, 512))
  assert claim.to_dict()["context_lengths"] == [1024, 256, 512]
  one, _ = runner.run_claim(length_claim(effect_at), root=str(tmp_path / "a"), log=quiet)
  lines = []
  res, run_dir = runner.run_claim(claim, root=str(tmp_path / "b"), log=lines.append)
  assert [(m, T) for m, T, _ in calls] == [("small", 128), ("base", 256), ("base", 512),
                                          ("base", 1024)]
  assert calls[3][2] == os.path.join(run_dir, "context-T1024")
  assert "[toy] context 3/3: T = 1024 on `base`" in lines
  for key in ("verdict", "reason", "effects", "arms", "config"):
    assert res[key] == one[key], key  # the verdict never reads the other lengths
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  schema.validate_results(on_disk, ["toy"])
  assert [r["T"] for r in on_disk["axes"]["context"]["rows"]] == [256, 512, 1024]
  for row in on_disk["axes"]["context"]["rows"]:
    vals = [effect_at(row["T"]) + 0.01 * s for s in SEEDS]
    ci = scipy.stats.t.interval(0.95, 2, loc=np.mean(vals), scale=scipy.stats.sem(vals))
    assert row["effect"] == pytest.approx(np.mean(vals))
    assert row["ci"] == pytest.approx(list(ci))
  x = [math.log(T) for T in (256, 512, 1024) for _ in SEEDS]
  y = [effect_at(T) + 0.01 * s for T in (256, 512, 1024) for s in SEEDS]
  ref = scipy.stats.linregress(x, y)
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "## Context: the primary effect against the length T" in text
  assert f"From T = 256 to T = 1024 the effect grows: slope {stats.fmt(ref.slope)}" in text
  assert os.path.exists(os.path.join(run_dir, "context.png")) and "![context.png]" in text
  quick, quick_dir = runner.run_claim(claim, quick=True, root=str(tmp_path), log=quiet)
  assert "context" not in quick["axes"]  # quick runs measure no other length unless asked
  same = length_claim(effect_at, calls, context_lengths=(128, 256),
                      at_length=lambda sizes, T: dataclasses.replace(sizes, seq_len=T))
  calls.clear()
  reused, _ = runner.run_claim(same, root=str(tmp_path / "c"), log=quiet)
  assert [T for _, T, _ in calls] == [128, 256]  # T = 128 is the registered run, not rerun
  assert reused["axes"]["context"]["rows"][0]["effect"] == pytest.approx(effect_at(128) + 0.01)
  calls.clear()
  asked, _ = runner.run_claim(claim, quick=True, lengths=(64,), root=str(tmp_path), log=quiet)
  assert [r["T"] for r in asked["axes"]["context"]["rows"]] == [64]
  assert calls[-1][:2] == ("base", 64)


def test_a_crashed_length_is_left_out_and_resume_reruns_only_it(tmp_path):
  calls = []
  claim = length_claim(lambda T: 0.3, calls, fail=(512,), context_lengths=(256, 512))
  res, run_dir = runner.run_claim(claim, root=str(tmp_path), log=quiet)
  assert [r["T"] for r in res["axes"]["context"]["rows"]] == [256]
  assert "T `512` failed and is left out" in open(os.path.join(run_dir,
                                                                     "report.md")).read()
  calls.clear()
  fixed = dataclasses.replace(claim, run=length_claim(lambda T: 0.3, calls).run)
  again, _ = runner.run_claim(fixed, resume=run_dir, log=quiet)
  assert [T for _, T, _ in calls] == [512]
  assert [r["T"] for r in again["axes"]["context"]["rows"]] == [256, 512]
  assert again["runtime_s"] >= res["runtime_s"]  # the resumed run counts the earlier one


def test_context_declarations_are_checked():
  with pytest.raises(ValueError, match="context_lengths must be distinct positive integers"):
    length_claim(lambda T: 0.0, context_lengths=(256, 256))
  with pytest.raises(ValueError, match="declares no at_length"):
    length_claim(lambda T: 0.0, context_lengths=(256,), at_length=None)
  claim = length_claim(lambda T: 0.0)
  with pytest.raises(ValueError, match="--lengths must be distinct positive integers"):
    runner.run_claim(claim, lengths=(0,), log=quiet)
  def returns_context(spec):
    return {"runs": {"treated": {0: {"score": 1.0}}}, "context": []}
  with pytest.raises(ValueError, match="returned a 'context'"):
    runner.run_claim(dataclasses.replace(claim, run=returns_context), seeds=(0,), log=quiet)


def test_claim_cli_takes_lengths(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(tour, "CLAIMS", {"toy": length_claim(lambda T: 0.1 * T / 256)})
  assert tour.claim_main(["toy", "--lengths", "256,512", "--out", str(tmp_path)]) == 0
  assert "From T = 256 to T = 512 the trend is not measured" in capsys.readouterr().out
  assert tour.claim_main(["toy", "--lengths", "256,x", "--out", str(tmp_path)]) == 2
  assert "distinct positive integers" in capsys.readouterr().err


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


# ------------------------------------------------------------------- the budget axis


@dataclasses.dataclass(frozen=True)
class BudgetSizes(TrainedSizes):
  model: str
  steps: int
  batch_size: int = 2
  seq_len: int = 8


NOISE = {1: (0.03, -0.02, 0.01), 4: (-0.01, 0.02, 0.04)}  # per budget and seed


def budget_run(calls: list):
  """The paired effect at `k` times the steps: `0.5 − 0.1 log k + 0.01 s + NOISE[k][s]`."""
  def run(spec):
    k = spec.sizes.steps // 10
    calls.append((k, spec.run_dir))
    return {"runs": {"treated": {s: {"score": 0.5 - 0.1 * math.log(k) + 0.01 * s
                                     + NOISE[k][s]} for s in spec.seeds},
                     "control": {s: {"score": 0.0} for s in spec.seeds}}}
  return run


def budget_claim(run, **kw):
  kw = {"seeds": SEEDS, "trains": False, "thresholds": (GAIN,), "budgets": (4,),
        "at_budget": more_steps, **kw}
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               run=run, QUICK=BudgetSizes("mini", 10), FULL=BudgetSizes("small", 10), **kw)



def test_budgets_give_the_paired_slope_on_log_tokens(tmp_path):
  calls = []
  res, run_dir = runner.run_claim(budget_claim(budget_run(calls)), root=str(tmp_path),
                                  log=quiet)
  assert [k for k, _ in calls] == [1, 4]  # the registered run first, then 4× the steps
  schema.validate_results(jsonio.load_strict(os.path.join(run_dir, "results.json")))
  block = res["axes"]["budget"]
  assert [r["multiple"] for r in block["rows"]] == [1, 4]
  assert [r["train_tokens"] for r in block["rows"]] == [160, 640]
  assert block["rows"][1]["tokens_per_param"] == pytest.approx(640 / PARAMS["small"])
  # Reference: the line through the two budgets' seed means; two points leave no degree of
  # freedom, so there is no interval and the trend is not measured (never "no trend").
  d = np.array([-0.1 * math.log(4) + NOISE[4][s] - NOISE[1][s] for s in SEEDS])
  assert block["slope"] == pytest.approx(d.mean() / math.log(4), rel=1e-9)
  assert block["slope_ci"] == [None, None] and block["dof"] == 0
  assert block["trend"] == "not measured"
  e4 = [0.5 - 0.1 * math.log(4) + 0.01 * s + NOISE[4][s] for s in SEEDS]
  assert block["rows"][1]["effect"] == pytest.approx(np.mean(e4))
  assert block["rows"][0]["verdict"] == res["verdict"]  # 1× is the registered run
  assert os.path.exists(os.path.join(run_dir, "budget-x4", "findings.json"))
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "Budget: the primary effect against the training tokens" in text
  assert "**Trend with the training budget.** On `small`, from 1× to 4× the tokens" in text
  assert os.path.exists(os.path.join(run_dir, "budget.png"))
  calls.clear()  # a rerun of the same folder reuses both budgets
  again, _ = runner.run_claim(budget_claim(budget_run(calls)), root=str(tmp_path), log=quiet,
                              resume=run_dir)
  assert calls == [] and again["axes"]["budget"] == block
  calls.clear()  # `--budgets 1` (parsed to ()) runs the registered budget alone
  alone, _ = runner.run_claim(budget_claim(budget_run(calls)), root=str(tmp_path), log=quiet,
                              budgets=tour._budget_list("1"))
  assert [k for k, _ in calls] == [1] and "budget" not in alone["axes"]


def test_a_wrong_at_budget_or_budget_list_is_refused_before_anything_runs(tmp_path):
  calls = []
  keep_tokens = lambda sizes, k: dataclasses.replace(sizes, steps=k * sizes.steps,  # noqa: E731
                                                      batch_size=sizes.batch_size // 2)
  with pytest.raises(ValueError, match=r"trains on 320 tokens, not 4 × 160 = 640"):
    runner.run_claim(budget_claim(budget_run(calls), at_budget=keep_tokens),
                     root=str(tmp_path), log=quiet)
  assert calls == []
  with pytest.raises(ValueError, match="at least 2"):
    budget_claim(budget_run(calls), budgets=(1,))
  with pytest.raises(ValueError, match="no at_budget"):
    budget_claim(budget_run(calls), at_budget=None)
  with pytest.raises(ValueError, match="train nothing"):
    scale_claim(budget_run(calls), budgets=(4,), at_budget=more_steps)
  with pytest.raises(ValueError, match="--budgets"):
    runner.run_claim(budget_claim(budget_run(calls)), budgets=(4, 4), log=quiet)
  assert tour._budget_list("1,4") == (4,) and tour._budget_list("2, 8") == (2, 8)
  for bad in ("0", "4,4", "x"):
    with pytest.raises(Exception, match="multiples"):
      tour._budget_list(bad)


def test_a_tour_runs_budgets_only_with_scale(tmp_path, monkeypatch):
  calls = []
  claim = dataclasses.replace(budget_claim(budget_run(calls)), id="muon")
  monkeypatch.setattr(tour, "CLAIMS", {claim.id: claim})
  monkeypatch.setattr(tour, "_opening", lambda log: ["opening"])
  tour.run_tour(root=str(tmp_path), log=quiet)
  assert [k for k, _ in calls] == [1]
  calls.clear()
  tour.run_tour(root=str(tmp_path), log=quiet, scale=True)
  assert [k for k, _ in calls] == [1, 4]


def _valid_budgets():
  return {"model": "small",
          "rows": [{"multiple": 1, "train_tokens": 160, "tokens_per_param": 0.1, "effect": 0.3,
                    "ci": [0.2, 0.4], "verdict": "supported", "failed_controls": []},
                   {"multiple": 4, "train_tokens": 640, "tokens_per_param": 0.4, "effect": 0.1,
                    "ci": [0.0, 0.2]}],
          "slope": -0.14, "slope_ci": [-0.2, -0.08], "trend": "shrinks"}


@pytest.mark.parametrize("breakage, message", [
    (lambda b: b.update(trend="falls"), "budget.trend"),
    (lambda b: b.update(model=3), "budget.model"),
    (lambda b: b.update(added={"git": None, "runtime_s": -1.0}), "budget.added.runtime_s"),
    (lambda b: b.update(extra=1), "budget: keys"),
    (lambda b: b.pop("slope_ci"), "budget: keys"),
    (lambda b: b["rows"].pop(), "at least two"),
    (lambda b: b["rows"][0].update(multiple=2), "start at 1"),
    (lambda b: b["rows"][1].update(train_tokens=6.4), "train_tokens"),
    (lambda b: b["rows"][1].update(tokens_per_param=0), "tokens_per_param"),
    (lambda b: b["rows"][1].update(ci=[0.1]), "ci"),
    (lambda b: b["rows"][1].update(verdict="maybe"), "verdict"),
])
def test_the_schema_rejects_malformed_budgets(breakage, message):
  from tests.experiments.verdict.test_runner import _valid

  good = {**_valid(), "axes": {"budget": _valid_budgets()}}
  schema.validate_results(good)
  schema.validate_results(_valid())  # no axis: a one-point result
  breakage(good["axes"]["budget"])
  with pytest.raises(ValueError, match=message):
    schema.validate_results(good)


@pytest.mark.parametrize("cid", [c.id for c in CLAIMS.values() if c.budgets])
def test_a_declared_budget_axis_runs_on_its_model_at_whole_multiples(cid):
  claim = CLAIMS[cid]
  axis = claim.axis("budget")
  base = axis.base(claim.FULL, quick=False)
  assert base == dataclasses.replace(claim.FULL, model=claim.budget_model or claim.FULL.model)
  assert base.model in (claim.FULL.model, *claim.scale_models)  # its 1× is a run made already
  assert axis.base(claim.QUICK, quick=True) == claim.QUICK
  for k in claim.budgets:
    assert axis.sizes_at(claim, base, k).train_tokens() == k * base.train_tokens()
  assert claim.to_dict()["budgets"] == list(claim.budgets)
  assert claim.to_dict().get("budget_model") == claim.budget_model


def model_budget_run(calls: list):
  """`budget_run`'s effect, plus 0.2 on `mini`: tells which model each budget trained."""
  inner = budget_run(calls)

  def run(spec):
    out = inner(spec)
    calls[-1] = (*calls[-1], spec.sizes.model)
    lift = 0.2 if spec.sizes.model == "mini" else 0.0
    for per in out["runs"]["treated"].values():
      per["score"] += lift
    return out
  return run


def test_a_budget_model_trains_the_axis_on_that_model(tmp_path):
  calls = []
  res, run_dir = runner.run_claim(budget_claim(model_budget_run(calls), budget_model="mini"),
                                  root=str(tmp_path), log=quiet)
  # the registered run (small), then 1× and 4× on mini: the verdict is read on small alone
  assert [(k, m) for k, _, m in calls] == [(1, "small"), (1, "mini"), (4, "mini")]
  assert calls[1][1].endswith("budget-x1") and calls[2][1].endswith("budget-x4")
  block = res["axes"]["budget"]
  assert block["model"] == "mini"
  assert [r["tokens_per_param"] for r in block["rows"]] == pytest.approx(
      [160 / PARAMS["mini"], 640 / PARAMS["mini"]])
  e1 = [0.7 + 0.01 * s + NOISE[1][s] for s in SEEDS]
  assert block["rows"][0]["effect"] == pytest.approx(np.mean(e1))
  registered = [e for e in res["effects"] if e["name"] == GAIN.name][0]
  assert registered["mean"] == pytest.approx(np.mean([0.5 + 0.01 * s + NOISE[1][s]
                                                      for s in SEEDS]))
  d = np.array([-0.1 * math.log(4) + NOISE[4][s] - NOISE[1][s] for s in SEEDS])
  assert block["slope"] == pytest.approx(d.mean() / math.log(4), rel=1e-9)  # the lift cancels
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "on `mini`, not the registered `small`" in text and "On `mini`, from 1×" in text
  assert json.load(open(os.path.join(run_dir, "claim.json")))["budget_model"] == "mini"
  calls.clear()  # with mini on the scale axis, its size run is the axis's 1×: not run twice
  res, run_dir = runner.run_claim(budget_claim(model_budget_run(calls), budget_model="mini",
                                               scale_models=("mini", "small")),
                                  root=str(tmp_path), log=quiet)
  assert [(k, m) for k, _, m in calls] == [(1, "small"), (1, "mini"), (4, "mini")]
  assert calls[1][1].endswith("size-mini") and res["axes"]["budget"]["rows"][0]["effect"] == (
      pytest.approx(np.mean(e1)))
  with pytest.raises(ValueError, match="budget_model='nope' is not a base model"):
    budget_claim(budget_run(calls), budget_model="nope")
  with pytest.raises(ValueError, match="declares no budgets"):
    budget_claim(budget_run(calls), budget_model="mini", budgets=())


def test_resume_adds_the_budget_axis_to_a_finished_run_and_runs_nothing_else(tmp_path,
                                                                             monkeypatch):
  calls = []
  claim = budget_claim(model_budget_run(calls), budget_model="mini")
  old, run_dir = runner.run_claim(claim, root=str(tmp_path / "runs"), log=quiet, budgets=())
  assert "budget" not in old["axes"] and [k for k, _, _ in calls] == [1]
  kept = tmp_path / "results" / "toy"  # a kept result: copied, never written to
  kept.parent.mkdir()
  import shutil
  shutil.copytree(run_dir, kept)
  before = {n: open(kept / n, "rb").read() for n in os.listdir(kept)}
  monkeypatch.setattr(folders, "RESULTS_DIR", str(tmp_path / "results"))
  calls.clear()  # --resume results/toy --axes budget=4
  res, new_dir = runner.run_claim(claim, resume=str(kept), axes={"budget": (4,)},
                                  root=str(tmp_path / "runs"), log=quiet)
  assert [(k, m) for k, _, m in calls] == [(1, "mini"), (4, "mini")]
  assert {n: open(kept / n, "rb").read() for n in os.listdir(kept)} == before
  assert new_dir != str(kept) and sorted(os.listdir(new_dir)) == [
      "budget-x1", "budget-x4", "budget.png", "claim.json", "report.md", "results.json"]
  for key in ("verdict", "reason", "arms", "effects", "extensions", "config", "git"):
    assert res[key] == old[key], key  # nothing else moves
  assert res["notes"] == old["notes"] + [axes.budget(()).note(None)]
  direct, _ = runner.run_claim(claim, root=str(tmp_path / "direct"), log=quiet)
  want = direct["axes"]["budget"]
  assert {k: v for k, v in res["axes"]["budget"].items() if k != "added"} == want
  assert res["axes"]["budget"]["added"]["runtime_s"] >= 0
  schema.validate_results(jsonio.load_strict(os.path.join(new_dir, "results.json")))
  text = open(os.path.join(new_dir, "report.md")).read()
  assert text.count("# Budget: the primary effect against the training tokens") == 1
  assert "This axis was added onto the finished result at git" in text
  calls.clear()  # again onto the new folder: budgets reused, the section replaced, not added
  again, same = runner.add_budgets(claim, new_dir, root=str(tmp_path / "runs"), log=quiet)
  assert calls == [] and same == new_dir  # `add_budgets` (--onto) is the older spelling
  assert open(os.path.join(new_dir, "report.md")).read().count("# Budget: the primary") == 1
  # onto the registered size (no budget_model): 1× is the kept per-seed metrics, not a rerun
  plain = budget_claim(model_budget_run(calls))
  res, _ = runner.run_claim(plain, resume=str(kept), axes={"budget": (4,)},
                            root=str(tmp_path / "runs"), log=quiet)
  assert [k for k, _, _ in calls] == [4] and res["axes"]["budget"]["model"] == "small"
  assert res["axes"]["budget"]["rows"][0]["effect"] == pytest.approx(
      [e for e in old["effects"] if e["name"] == GAIN.name][0]["mean"])
  assert res["axes"]["budget"]["rows"][0]["verdict"] == old["verdict"]


def test_onto_refuses_what_it_cannot_add_to(tmp_path, capsys):
  calls = []
  claim = budget_claim(budget_run(calls))
  _, run_dir = runner.run_claim(claim, root=str(tmp_path), log=quiet, budgets=())
  with pytest.raises(ValueError, match="no results.json"):
    runner.add_budgets(claim, str(tmp_path), log=quiet)
  with pytest.raises(ValueError, match="this one is 'other'"):
    runner.add_budgets(dataclasses.replace(claim, id="other"), run_dir, log=quiet)
  stricter = dataclasses.replace(claim, thresholds=(Threshold.beyond(
      GAIN.name, "treated", "score", baseline="control", margin=0.5),))
  with pytest.raises(ValueError, match=r"\['thresholds'\] changed"):
    runner.add_budgets(stricter, run_dir, log=quiet)
  with pytest.raises(ValueError, match="declares no budgets"):
    runner.add_budgets(budget_claim(budget_run(calls), budgets=()), run_dir, log=quiet)
  longer = dataclasses.replace(claim, FULL=BudgetSizes("small", 20))
  with pytest.raises(ValueError, match="not the claim's registered"):
    runner.add_budgets(longer, run_dir, log=quiet)
  assert len(calls) == 1  # only the first run_claim trained
  assert tour.claim_main(["causal-mask", "--onto", run_dir, "--sizes", "mini"]) == 2
  assert "--sizes" in capsys.readouterr().err


def test_the_claim_command_adds_budgets_onto_a_run(tmp_path, monkeypatch, capsys):
  calls = []
  claim = dataclasses.replace(budget_claim(model_budget_run(calls), budget_model="mini"),
                              id="muon")
  monkeypatch.setattr(tour, "CLAIMS", {claim.id: claim})
  _, run_dir = runner.run_claim(claim, root=str(tmp_path), log=quiet, budgets=())
  calls.clear()
  assert tour.claim_main(["muon", "--onto", run_dir, "--out", str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert [(k, m) for k, _, m in calls] == [(1, "mini"), (4, "mini")]
  assert "On `mini`, from 1× to 4× the tokens" in out and run_dir in out
  assert tour.claim_main(["muon", "--onto", run_dir, "--budgets", "1"]) == 2
  assert "--budgets asks for none" in capsys.readouterr().err


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
