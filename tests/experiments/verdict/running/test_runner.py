"""The claims runner: registry, statistics, verdict logic, schema, folders, tour."""

import dataclasses
import json
import math
import os

import jax
import numpy as np
import pytest
import scipy.stats

from experiments import jsonio
from experiments.claims import CLAIMS, not_built
from experiments.commands import tour
from experiments.verdict import Claim, Extension, Sizes, Threshold
from experiments.verdict.arithmetic import rule, stats
from experiments.verdict.arithmetic.rule import VERDICTS
from experiments.verdict.running import folders, runner, schema
from tests.experiments.verdict.toy_claims import valid_results


@pytest.mark.parametrize("dof", [1, 2, 3, 7, 29, 30, 31, 45, 200, 10_000])
def test_t_quantile_matches_scipy(dof):
  assert stats.t_quantile_975(dof) == pytest.approx(scipy.stats.t.ppf(0.975, dof), rel=2e-6)


def test_mean_ci95_matches_scipy():
  x = np.array([0.3, 0.9, 0.4, 1.7])
  m, (lo, hi) = stats.mean_ci95(x)
  ref = scipy.stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=scipy.stats.sem(x))
  assert m == pytest.approx(x.mean()) and (lo, hi) == pytest.approx(ref, rel=1e-6)
  assert stats.mean_ci95([2.0]) == (2.0, None)


@pytest.mark.parametrize("cond, interval, expected", [
    (">= 0.9", (0.9, 1.0), True), (">= 0.9", (0.89, 1.0), False), ("> 0", (0.0, 1.0), False),
    ("< 1", (0.2, 0.99), True), ("<= 1", (0.2, 1.0), True), ("== 1", (1.0, 1.0), True),
    ("== 1", (0.99, 1.0), False), (">= 0", (math.nan, math.nan), False)])
def test_condition_holds_only_for_the_whole_interval(cond, interval, expected):
  assert stats.holds(cond, interval) is expected


def test_bad_condition_and_bad_claim_are_value_errors():
  with pytest.raises(ValueError, match="cannot be read"):
    Threshold("x", arm="a", metric="m", supports="at least 3")
  with pytest.raises(ValueError, match="neither"):
    Threshold("x", arm="a", metric="m")
  with pytest.raises(ValueError, match="kebab-case"):
    Claim(id="Causal_Mask", topic="t", kind="existing", preface="p")
  with pytest.raises(ValueError, match="freeze"):
    Claim(id="x", topic="t", kind="new", preface="p", run=lambda spec: {})


@dataclasses.dataclass(frozen=True)
class ToySizes(Sizes):
  n: int


def _claim(thresholds, run=None, **kw):
  kw = {"seeds": (0, 1, 2), "trains": False, **kw}
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               thresholds=tuple(thresholds), run=run or (lambda spec: {}), QUICK=ToySizes(1),
               FULL=ToySizes(3), **kw)


RUNS = {"a": {0: {"m": 1.0}, 1: {"m": 1.2}, 2: {"m": 1.1}},
        "b": {0: {"m": 0.0}, 1: {"m": 0.1}, 2: {"m": 0.3}}}


@pytest.mark.parametrize("thresholds, expected", [
    ([Threshold("gain", "a", "m", baseline="b", supports="> 0.5")], "supported"),
    ([Threshold("gain", "a", "m", baseline="b", supports="> 5", refutes="< 2")], "refuted"),
    ([Threshold("gain", "a", "m", baseline="b", supports="> 1.05")], "inconclusive"),
    ([Threshold("gain", "a", "m", baseline="b", supports="> 0.5"),
      Threshold("ctl", "b", "m", stat="range", supports="== 0", control=True)], "inconclusive"),
])
def test_verdict_from_thresholds(thresholds, expected):
  v, reason, evals = rule.verdict(_claim(thresholds), RUNS, (0, 1, 2), indicative=False)
  assert v == expected and reason
  # The paired effect a − b over seeds is (1.0, 1.1, 0.8): mean 0.9667.
  assert evals[0]["mean"] == pytest.approx(np.mean([1.0, 1.1, 0.8]))


def _toy_run(spec):
  runs = {"treated": {s: {"score": 1.0 + 0.1 * s, "maybe": math.nan} for s in spec.seeds},
          "control": {s: {"score": 0.5, "maybe": 1.0} for s in spec.seeds}}
  return {"setup": {"n": spec.sizes.n}, "runs": runs, "notes": ["- a note"], "figures": [],
          "effects": [("maybe diff", "treated", "control", "maybe")]}


def test_run_claim_writes_folder_and_strict_json(tmp_path):
  claim = _claim([Threshold("gain", "treated", "score", baseline="control", supports="> 0.2",
                            refutes="< 0")], run=_toy_run)
  results, run_dir = runner.run_claim(claim, seeds=(0, 1, 2), root=str(tmp_path), log=lambda s: 0)
  assert sorted(os.listdir(run_dir)) == ["claim.json", "report.md", "results.json"]
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  schema.validate_results(on_disk, claim_ids=["toy"])
  assert on_disk["verdict"] == "supported" and on_disk["seeds"] == [0, 1, 2]
  assert on_disk["arms"]["treated"]["runs"]["2"]["maybe"] is None  # NaN -> null
  gain = on_disk["effects"][0]
  ref = scipy.stats.t.interval(0.95, 2, loc=0.6, scale=scipy.stats.sem([0.5, 0.6, 0.7]))
  assert gain["mean"] == pytest.approx(0.6) and gain["ci95"] == pytest.approx(list(ref))
  assert [e["name"] for e in on_disk["effects"]] == ["gain", "maybe diff"]
  frozen = json.load(open(os.path.join(run_dir, "claim.json")))
  assert frozen["thresholds"][0]["supports"] == "> 0.2"
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "**Verdict: supported.**" in text and "a note" in text


def test_quick_run_is_labelled_indicative(tmp_path):
  claim = _claim([Threshold("gain", "treated", "score", supports="> 0.2")], run=_toy_run)
  results, run_dir = runner.run_claim(claim, quick=True, root=str(tmp_path), log=lambda s: 0)
  assert results["seeds"] == [0] and results["reason"].startswith("indicative (quick)")
  assert results["effects"][0]["ci95"] == [None, None]
  assert "indicative (quick)" in open(os.path.join(run_dir, "report.md")).read()


@pytest.mark.parametrize("breakage, message", [
    (lambda r: r.pop("git"), "keys"),
    (lambda r: r.update(extra=1), "keys"),
    (lambda r: r.update(verdict="probably"), "verdict"),
    (lambda r: r["arms"]["a"]["mean"].update(m=math.nan), "not finite"),
    (lambda r: r["arms"]["a"]["runs"].update({"1": {}}), "seeds"),
    (lambda r: r["effects"][0].update(ci95=[0.0]), "ci95"),
    (lambda r: r.update(seeds=[]), "seeds"),
    (lambda r: r.update(tuning_seeds=[0]), "disjoint"),
    (lambda r: r["extensions"][0].update(verdict="maybe"), "extensions"),
    (lambda r: r.update(axes={"scale": {"rows": [], "slope": 0, "slope_ci": [0, 0],
                                        "trend": "up"}}), "trend"),
    (lambda r: r.update(schema=1), "schema"),
    (lambda r: r.update(notes="- a"), "notes"),
    (lambda r: r["env"].pop("device"), "env"),
    (lambda r: r["env"].update(torch="2"), "env"),
    (lambda r: r["env"].update(jax=None), "env"),
    (lambda r: r["env"].update(numpy=2), "env"),
])
def test_validator_rejects_schema_breaks_but_not_verdict_values(breakage, message):
  schema.validate_results(valid_results())
  schema.validate_results({**valid_results(), "env": folders.environment()})  # versions recorded
  absent = {**valid_results(), "env": {**valid_results()["env"], "flax": None}}
  schema.validate_results(absent)  # a package not installed
  for v in VERDICTS:
    schema.validate_results({**valid_results(), "verdict": v})
  broken = valid_results()
  breakage(broken)
  with pytest.raises(ValueError, match=message):
    schema.validate_results(broken)


def test_load_strict_refuses_nan(tmp_path):
  path = tmp_path / "r.json"
  path.write_text('{"x": NaN}')
  with pytest.raises(ValueError, match="strict JSON"):
    jsonio.load_strict(str(path))


def test_tour_lists_every_claim_and_not_built_are_never_verdicts(tmp_path, monkeypatch):
  toy = _claim([Threshold("gain", "treated", "score", supports="> 0.2")], run=_toy_run)
  fast = {cid: dataclasses.replace(toy, id=cid) for cid in ("causal-mask", "softmax-kernel")}
  # One claim registered as not built (all are built now): it must show as such.
  last = list(CLAIMS.values())[-1]
  unbuilt = {last.id: not_built(last.id, last.topic, last.kind, last.preface)}
  monkeypatch.setattr(tour, "CLAIMS", {**CLAIMS, **fast, **unbuilt})
  monkeypatch.setattr(tour, "_opening", lambda log: ["opening"])
  lines = []
  res, tour_dir = tour.run_tour(quick=True, only=["causal-mask"], root=str(tmp_path),
                                log=lines.append)
  schema.validate_tour(jsonio.load_strict(os.path.join(tour_dir, "results.json")),
                       list(CLAIMS))
  by_id = {c["claim"]: c for c in res["claims"]}
  assert [c["claim"] for c in res["claims"]] == list(CLAIMS)
  assert by_id["causal-mask"]["verdict"] == "supported"
  assert by_id["softmax-kernel"]["results"] is None  # not selected by --only
  for c in res["claims"]:
    if not tour.CLAIMS[c["claim"]].built:
      assert c["verdict"] == "not built" and c["results"] is None
  assert by_id[last.id]["verdict"] == "not built"
  schema.validate_results(jsonio.load_strict(by_id["causal-mask"]["results"]))
  assert _claim_lines(lines) == len(CLAIMS) and lines[-1].endswith("report.md")
  text = open(os.path.join(tour_dir, "report.md")).read()
  assert text.count("| `") >= len(CLAIMS) and "not built" in text



def _claim_lines(lines) -> int:
  """The tour's one line per claim, `[ 3/14] claim-id ...` (a quick tour also prints the
  committed findings above them)."""
  return sum(line.startswith("[") and f"/{len(CLAIMS)}] " in line for line in lines)


def _toy_run_marking_its_process(spec):
  with open(os.path.join(spec.run_dir, "pid"), "w") as f:
    json.dump({"pid": os.getpid(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
               "cache": jax.config.jax_compilation_cache_dir}, f)
  return _toy_run(spec)


def _broken_run(spec):
  raise RuntimeError("toy failure")


def test_a_tour_in_worker_processes_matches_one_in_this_process(tmp_path, monkeypatch):
  gain = Threshold("gain", "treated", "score", baseline="control", supports="> 0.2")
  toy = _claim([gain], run=_toy_run_marking_its_process)
  picked = ["causal-mask", "muon", "lora", "softmax-kernel"]
  high = Threshold("gain", "treated", "score", baseline="control", supports="> 5", refutes="< 2")
  fake = {"causal-mask": toy, "muon": dataclasses.replace(toy, thresholds=(high,)),
          "lora": dataclasses.replace(toy, run=_broken_run), "softmax-kernel": toy}
  fake = {cid: dataclasses.replace(c, id=cid) for cid, c in fake.items()}
  monkeypatch.setattr(tour, "CLAIMS", {**CLAIMS, **fake})
  monkeypatch.setattr(tour, "_opening", lambda log: ["opening"])
  with pytest.raises(ValueError, match="--jobs 0"):
    tour.run_tour(quick=True, only=picked, root=str(tmp_path), jobs=0)
  got = {}
  for jobs in (1, 2):
    lines = []
    res, _ = tour.run_tour(quick=True, only=picked, root=str(tmp_path / str(jobs)), jobs=jobs,
                           log=lines.append)
    got[jobs] = res
    assert _claim_lines(lines) == len(CLAIMS) and lines[-1].endswith("report.md")
    assert [c["claim"] for c in res["claims"]] == list(CLAIMS)  # whichever finished first
    for c in res["claims"]:
      if c["claim"] in picked[:2]:
        mark = json.load(open(os.path.join(os.path.dirname(c["results"]), "pid")))
        assert (mark["pid"] == os.getpid()) == (jobs == 1)  # jobs=2: each in a worker process
        if jobs == 2:  # the workers share a compilation cache and compile quick runs fast
          assert mark["cache"] == str(tmp_path / "2" / "cache" / "xla")
          assert "--xla_backend_optimization_level=0" in mark["xla_flags"]
    # a claim a quick tour measures again in full runs here, at XLA's default optimization
    mark = json.load(open(os.path.join(os.path.dirname(
        next(c["results"] for c in res["claims"] if c["claim"] == "softmax-kernel")), "pid")))
    assert mark["pid"] == os.getpid() and "optimization_level" not in mark["xla_flags"]
  strip = [{k: v for k, v in c.items() if k != "results"} for c in got[1]["claims"]]
  assert strip == [{k: v for k, v in c.items() if k != "results"} for c in got[2]["claims"]]
  by_id = {c["claim"]: c for c in got[2]["claims"]}
  assert [by_id[cid]["verdict"] for cid in picked[:2]] == ["supported", "refuted"]
  assert by_id["lora"]["reason"] == "the run failed: RuntimeError: toy failure"
  assert by_id["kv-compression"]["reason"] == "not run in this tour (--only)"
  for jobs in (1, 2):
    paths = {c["claim"]: c["results"] for c in got[jobs]["claims"]}
    got[jobs] = [jsonio.load_strict(paths[cid]) for cid in picked[:2]]
  assert [r["verdict"] for r in got[2]] == ["supported", "refuted"]
  assert [r["effects"] for r in got[1]] == [r["effects"] for r in got[2]]


def test_claim_cli_rejects_unbuilt_and_unknown(capsys):
  unbuilt = [c.id for c in CLAIMS.values() if not c.built]
  if unbuilt:
    assert tour.claim_main([unbuilt[0]]) == 2
  with pytest.raises(SystemExit):
    tour.claim_main(["no-such-claim"])


# ------------------------------------------------------------ the pre-registered contract


@pytest.mark.parametrize("effects, expected", [
    ((0.050, 0.055, 0.060), "supported"),    # the whole interval beyond the margin
    ((0.001, 0.002, 0.0015), "refuted"),     # inside the margin: too small to matter
    ((-0.05, -0.04, -0.06), "refuted"),      # the other side
    ((0.005, 0.04, 0.015), "inconclusive"),  # straddles the margin
])
def test_margin_rule_decides_both_ways(effects, expected):
  runs = {"new": {s: {"m": e} for s, e in enumerate(effects)},
          "old": {s: {"m": 0.0} for s in range(3)}}
  th = Threshold.beyond("gain", "new", "m", baseline="old", margin=0.01)
  v, _, _ = rule.decide((th,), runs, (0, 1, 2))
  assert v == expected
  # Mirrored: a claimed drop below −margin.
  flipped = {arm: {s: {"m": -m["m"]} for s, m in per.items()} for arm, per in runs.items()}
  th_down = Threshold.beyond("drop", "new", "m", baseline="old", margin=0.01, direction="<")
  assert rule.decide((th_down,), flipped, (0, 1, 2))[0] == expected


def test_a_failed_control_blocks_only_what_needs_it():
  runs = {"a": {s: {"m": 1.0, "ok": 0.0, "n": 5.0} for s in range(3)}}
  ctl = Threshold("recall works", "a", "ok", stat="range", supports="== 1", control=True)
  dependent = Threshold("sparse recall", "a", "m", supports="> 0.5", needs=("recall works",))
  independent = Threshold("text loss", "a", "n", supports="> 1", needs=())
  v, why, evals = rule.decide((dependent, independent, ctl), runs, (0, 1, 2))
  assert v == "inconclusive" and "sparse recall" in why
  assert [e["blocked"] for e in evals] == [True, False, False]
  # Without the dependent one, the failed control blocks nothing and the group is read.
  v, why, _ = rule.decide((independent, ctl), runs, (0, 1, 2))
  assert v == "supported" and "block nothing" in why
  # Old default (needs=None): every threshold of the group depends on its controls.
  assert rule.decide((Threshold("x", "a", "n", supports="> 1"), ctl), runs,
                       (0, 1, 2))[0] == "inconclusive"


def test_extensions_have_their_own_verdict_and_never_change_the_headline(tmp_path):
  ext = Extension("mechanism", "is it the split?",
                  (Threshold("split", "treated", "score", supports="> 5", refutes="< 5"),))
  claim = _claim([Threshold("gain", "treated", "score", baseline="control", supports="> 0.2")],
                 run=_toy_run, extensions=(ext,))
  results, run_dir = runner.run_claim(claim, root=str(tmp_path), log=lambda s: 0)
  assert results["verdict"] == "supported"
  assert results["extensions"][0]["name"] == "mechanism"
  assert results["extensions"][0]["verdict"] == "refuted"
  assert results["config"]["sizes"] == {"n": 3} and results["config"]["setup"] == {"n": 3}
  text = open(os.path.join(run_dir, "report.md")).read()
  assert "Extension *mechanism*: **refuted**" in text


def test_seeds_are_preregistered_and_tuning_seeds_never_reported(tmp_path):
  with pytest.raises(ValueError, match="both reported and tuning"):
    _claim([Threshold("g", "a", "m", supports="> 0")], seeds=(0, 1, 2), tuning_seeds=(2, 9))
  with pytest.raises(ValueError, match="at least 5"):
    _claim([Threshold("g", "a", "m", supports="> 0")], seeds=(0, 1, 2), trains=True)
  claim = _claim([Threshold("gain", "treated", "score", supports="> 0.2")], run=_toy_run,
                 tuning_seeds=(100,))
  with pytest.raises(ValueError, match="tuning seeds"):
    runner.run_claim(claim, seeds=(0, 100), root=str(tmp_path), log=lambda s: 0)
  results, _ = runner.run_claim(claim, root=str(tmp_path), log=lambda s: 0)
  assert results["seeds"] == [0, 1, 2] and results["tuning_seeds"] == [100]
  assert Claim(id="y", topic="t", kind="new", preface="p").seeds == (0, 1, 2, 3, 4)


def test_a_claim_may_not_write_its_config_by_hand(tmp_path):
  claim = _claim([Threshold("gain", "treated", "score", supports="> 0.2")],
                 run=lambda spec: {**_toy_run(spec), "config": {"steps": 3}})
  with pytest.raises(ValueError, match="sizes"):
    runner.run_claim(claim, root=str(tmp_path), log=lambda s: 0)
