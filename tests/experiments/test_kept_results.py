"""Every committed result replays: its verdicts are recomputed from what `results/` keeps.

The verdict of a kept result is a function of its frozen thresholds (`claim.json`) and the
per-seed metrics it kept (`results.json`'s `arms`, and each axis point's `findings.json`), so a
change to the machinery that changed a verdict fails here.
"""

import os

import pytest

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.verdict import folders
from experiments.verdict.rule import INDICATIVE, decide
from experiments.verdict.thresholds import Extension, Threshold

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
  thresholds = tuple(Threshold.from_dict(t) for t in frozen["thresholds"])
  v, why, _ = decide(thresholds, runs, seeds)
  prefix = f"{INDICATIVE}: " if res["quick"] or len(seeds) < 3 else ""
  assert (v, prefix + why) == (res["verdict"], res["reason"])
  for ext, kept in zip(map(Extension.from_dict, frozen["extensions"]), res["extensions"],
                       strict=True):
    v, why, _ = decide(ext.thresholds, runs, seeds)
    assert (ext.name, v, prefix + why) == (kept["name"], kept["verdict"], kept["reason"])


def test_every_kept_result_is_replayed():
  assert len(KEPT) >= 14, KEPT
