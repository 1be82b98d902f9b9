"""Every committed result replays: its verdicts are recomputed from what `results/` keeps.

The verdict of a kept result is a function of its frozen thresholds (`claim.json`) and the
per-seed metrics it kept (`results.json`'s `arms`, and each axis point's `findings.json`), so a
change to the machinery that changed a verdict fails here.
"""

import os

import pytest

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.commands import table
from experiments.verdict import Claim
from experiments.verdict.arithmetic import rule
from experiments.verdict.arithmetic.rule import INDICATIVE, decide
from experiments.verdict.declare.thresholds import Extension, Threshold
from experiments.verdict.running import folders
from experiments.verdict.running.schema import load_results

KEPT = sorted(cid for cid in CLAIMS
              if os.path.exists(os.path.join(folders.RESULTS_DIR, cid, "results.json")))


def _kept(cid: str) -> tuple[dict, dict]:
  folder = os.path.join(folders.RESULTS_DIR, cid)
  return (jsonio.load_strict(os.path.join(folder, "claim.json")),
          jsonio.load_strict(os.path.join(folder, "results.json")))


@pytest.mark.parametrize("cid", KEPT)
def test_a_kept_verdict_replays_from_its_kept_findings(cid):
  frozen, res = _kept(cid)
  seeds = [str(s) for s in res["seeds"]]
  runs = {arm: body["runs"] for arm, body in res["arms"].items()}
  claim = Claim.from_dict(frozen)  # a split sentence is decided clause by clause
  indicative = res["quick"] or len(seeds) < 3
  v, why, _ = rule.verdict(claim, runs, seeds, indicative=indicative)
  prefix = f"{INDICATIVE}: " if indicative else ""
  assert (v, why) == (res["verdict"], res["reason"])
  assert rule.clause_verdicts(claim, runs, seeds, indicative=indicative) == res.get("clauses", [])
  for ext, kept in zip(map(Extension.from_dict, frozen["extensions"]), res["extensions"],
                       strict=True):
    v, why, _ = decide(ext.thresholds, runs, seeds)
    assert (ext.name, v, prefix + why) == (kept["name"], kept["verdict"], kept["reason"])


@pytest.mark.parametrize("cid", KEPT)
def test_each_kept_axis_point_replays_its_reading_from_its_kept_findings(cid):
  """An axis row's `verdict` (the registered rule at that point) is recomputed from the point's
  kept `findings.json`, where it was kept."""
  frozen, _ = _kept(cid)
  res = load_results(os.path.join(folders.RESULTS_DIR, cid))
  thresholds = tuple(Threshold.from_dict(t) for t in frozen["thresholds"])
  for name, block in res["axes"].items():
    axis = CLAIMS[cid].axis_of(name)
    for row in block["rows"]:
      path = os.path.join(folders.RESULTS_DIR, cid, axis.folder(row[axis.key]), "findings.json")
      if "verdict" not in row or not os.path.exists(path):
        continue
      found = jsonio.load_strict(path)
      v, _, evals = decide(thresholds, found["findings"]["runs"], [str(s) for s in res["seeds"]])
      failed = [th.name for th, ev in zip(thresholds, evals, strict=True)
                if th.control and not ev["supports"]]
      assert (v, failed) == (row["verdict"], row["failed_controls"]), (name, row[axis.key])


def test_every_kept_report_is_made_from_its_results_json_byte_for_byte(capsys):
  """`python -m experiments.commands.table --reports --check`: each kept report.md is what its
  results.json (and the claim.json it ran under) gives, every axis's section and trend
  included."""
  assert table.stale_reports() == []
  assert table.main(["--reports", "--check"]) == 0
  assert capsys.readouterr().err == ""


def test_every_kept_result_is_replayed():
  assert len(KEPT) >= 14, KEPT
