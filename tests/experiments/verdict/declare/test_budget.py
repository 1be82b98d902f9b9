"""The training-budget axis of the claims runner: the paired slope on log tokens, its model, resume
onto a finished run, the schema."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.commands import tour
from experiments.verdict import Claim, Threshold, TrainedSizes, more_steps
from experiments.verdict.declare import axes
from experiments.verdict.running import folders, runner, schema
from tests.experiments.verdict.toy_claims import (
  GAIN,
  PARAMS,
  SEEDS,
  quiet,
  scale_claim,
  valid_results,
)

# ------------------------------------------------------------------- the budget axis

pytestmark = pytest.mark.usefixtures("cards")


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


def budget_claim(run, *, budgets=(4,), at=more_steps, model=None, sizes=(), **kw):
  """A toy claim with a budget axis `axes.budget(budgets, at, model)`, after a scale axis over
  `sizes` when given."""
  declared = ((axes.scale(sizes),) if sizes else ()) + (axes.budget(budgets, at, model),)
  kw = {"seeds": SEEDS, "trains": False, "thresholds": (GAIN,), "axes": declared, **kw}
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
    runner.run_claim(budget_claim(budget_run(calls), at=keep_tokens),
                     root=str(tmp_path), log=quiet)
  assert calls == []
  with pytest.raises(ValueError, match="at least 2"):
    budget_claim(budget_run(calls), budgets=(1,))
  with pytest.raises(ValueError, match="no at_budget"):
    budget_claim(budget_run(calls), at=None)
  with pytest.raises(ValueError, match="train nothing"):
    scale_claim(budget_run(calls), axes=(axes.budget((4,), more_steps),))
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
  good = {**valid_results(), "axes": {"budget": _valid_budgets()}}
  schema.validate_results(good)
  schema.validate_results(valid_results())  # no axis: a one-point result
  breakage(good["axes"]["budget"])
  with pytest.raises(ValueError, match=message):
    schema.validate_results(good)


@pytest.mark.parametrize("cid", [c.id for c in CLAIMS.values() if c.axis("budget").values])
def test_a_declared_budget_axis_runs_on_its_model_at_whole_multiples(cid):
  claim = CLAIMS[cid]
  axis = claim.axis("budget")
  base = axis.base(claim.FULL, quick=False)
  assert base == dataclasses.replace(claim.FULL, model=axis.model or claim.FULL.model)
  # its 1× is a run made already
  assert base.model in (claim.FULL.model, *claim.axis("scale").values)
  assert axis.base(claim.QUICK, quick=True) == claim.QUICK
  for k in axis.values:
    assert axis.sizes_at(claim, base, k).train_tokens() == k * base.train_tokens()
  assert claim.to_dict()["budgets"] == list(axis.values)
  assert claim.to_dict().get("budget_model") == axis.model


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
  res, run_dir = runner.run_claim(budget_claim(model_budget_run(calls), model="mini"),
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
  res, run_dir = runner.run_claim(budget_claim(model_budget_run(calls), model="mini",
                                               sizes=("mini", "small")),
                                  root=str(tmp_path), log=quiet)
  assert [(k, m) for k, _, m in calls] == [(1, "small"), (1, "mini"), (4, "mini")]
  assert calls[1][1].endswith("size-mini") and res["axes"]["budget"]["rows"][0]["effect"] == (
      pytest.approx(np.mean(e1)))
  with pytest.raises(ValueError, match="budget_model='nope' is not a base model"):
    budget_claim(budget_run(calls), model="nope")
  with pytest.raises(ValueError, match="declares no budgets"):
    budget_claim(budget_run(calls), model="mini", budgets=())


def test_resume_adds_the_budget_axis_to_a_finished_run_and_runs_nothing_else(tmp_path,
                                                                             monkeypatch):
  calls = []
  claim = budget_claim(model_budget_run(calls), model="mini")
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
  claim = dataclasses.replace(budget_claim(model_budget_run(calls), model="mini"),
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
