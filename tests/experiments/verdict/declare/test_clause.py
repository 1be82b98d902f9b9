"""Clauses: a sentence decided clause by clause, the headline their conjunction (issue 47)."""

import os

import pytest

from experiments import jsonio
from experiments.verdict import Claim, Threshold
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare.clause import Clause, conjunction, settled_label
from experiments.verdict.running import runner, schema
from tests.experiments.verdict.running.test_runner import ToySizes

# Causality holds exactly (leak 0 on every seed); invertibility fails (κ far above the bound).
RUNS = {"model": {s: {"leak": 0.0, "kappa": 1e6 + s, "loss": 2.0 + 0.01 * s, "ok": 1.0}
                  for s in range(3)},
        "base": {s: {"loss": 2.2 + 0.01 * s} for s in range(3)}}
LEAK = Threshold("future leak", "model", "leak", stat="range", supports="== 0", refutes="> 0")
KAPPA = Threshold("condition number", "model", "kappa", supports="< 1000", refutes="> 1e4")
GAIN = Threshold("loss gain", "base", "loss", baseline="model", supports="> 0.1", refutes="< 0")
CONTROL = Threshold("probe works", "model", "ok", stat="range", supports="== 1", control=True)


def _claim(clauses, thresholds=(LEAK, KAPPA, GAIN, CONTROL), run=None):
  return Claim(id="toy", topic="t", kind="new", preface="sees the past, not the future, and "
               "stays invertible", hypothesis="h", refuted_if="r", thresholds=thresholds,
               clauses=clauses, seeds=(0, 1, 2), trains=False, QUICK=ToySizes(1),
               FULL=ToySizes(3), run=run or (lambda spec: {"runs": RUNS}))


CLAUSES = (Clause("sees the past but not the future", ("future leak",),
                  proof="a masked score is −∞ before the softmax: weight exactly 0"),
           Clause("stays invertible", ("condition number",)),
           Clause("and learns", ("loss gain",)))


def test_each_clause_is_decided_on_its_own_and_the_headline_is_the_conjunction():
  claim = _claim(CLAUSES)
  parts = rule.clause_verdicts(claim, RUNS, (0, 1, 2), indicative=False)
  assert [p["verdict"] for p in parts] == ["supported", "refuted", "supported"]
  assert [p["proof"] for p in parts] == [True, False, False]
  v, why, evals = rule.verdict(claim, RUNS, (0, 1, 2), indicative=False)
  assert v == "refuted" and "clause 1 (sees the past but not the future): supported (proof, " \
      "verified exactly)" in why
  assert len(evals) == 4  # every threshold is still evaluated for the effects table
  # Read on the whole sentence without clauses, the same thresholds also refute it: the
  # clauses change what the table says about each part, and the headline agrees here.
  assert rule.verdict(_claim(()), RUNS, (0, 1, 2), indicative=False)[0] == "refuted"


def test_a_clause_reads_only_its_own_controls():
  broken = {**RUNS, "model": {s: {**m, "ok": 0.0} for s, m in RUNS["model"].items()}}
  leak = Threshold("future leak", "model", "leak", stat="range", supports="== 0", needs=())
  gain = Threshold("loss gain", "base", "loss", baseline="model", supports="> 0.1",
                   needs=("probe works",))
  claim = _claim((Clause("no future", ("future leak",)), Clause("learns", ("loss gain",))),
                 thresholds=(leak, gain, CONTROL))
  parts = rule.clause_verdicts(claim, broken, (0, 1, 2), indicative=False)
  assert [p["verdict"] for p in parts] == ["supported", "inconclusive"]
  assert "probe works" not in parts[0]["reason"] and "a control failed" in parts[1]["reason"]
  assert rule.verdict(claim, broken, (0, 1, 2), indicative=False)[0] == "inconclusive"


@pytest.mark.parametrize("clauses, message", [
    ((Clause("a", ("future leak", "condition number")),), r"\['loss gain'\] decide no clause"),
    ((Clause("a", ("future leak",)), Clause("b", ("future leak", "condition number", "loss gain"))),
     "decides two clauses"),
    ((Clause("a", ("probe works", "future leak", "condition number", "loss gain")),),
     "not primary thresholds"),
])
def test_bad_clauses_are_refused_naming_the_fix(clauses, message):
  with pytest.raises(ValueError, match=message):
    _claim(clauses)


def test_conjunction_and_labels():
  assert conjunction(["supported", "supported"]) == "supported"
  assert conjunction(["inconclusive", "refuted"]) == "refuted"
  assert conjunction(["supported", "inconclusive"]) == "inconclusive"
  assert settled_label("refuted", True) == "refuted (proof)"
  assert settled_label("inconclusive", True) == "inconclusive"


def test_results_json_records_every_clause_and_claim_json_freezes_them(tmp_path):
  claim = _claim(CLAUSES)
  results, run_dir = runner.run_claim(claim, seeds=(0, 1, 2), root=str(tmp_path), log=lambda s: 0)
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  schema.validate_results(on_disk, claim_ids=["toy"])
  assert [c["verdict"] for c in on_disk["clauses"]] == ["supported", "refuted", "supported"]
  assert on_disk["verdict"] == "refuted"
  frozen = Claim.from_dict(jsonio.load_strict(os.path.join(run_dir, "claim.json")))
  assert frozen.clauses == CLAUSES
  bad = {**on_disk, "clauses": [{**on_disk["clauses"][0], "verdict": "maybe"}]}
  with pytest.raises(ValueError, match=r"clauses\[0\]\.verdict"):
    schema.validate_results(bad, claim_ids=["toy"])
