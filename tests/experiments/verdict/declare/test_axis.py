"""A fourth axis costs one declaration: the runner, the schema, the report, the figure, the
command line and `--resume` take any `Axis` (`experiments.verdict.declare.axis`) as they take
the three the claims share.

The toy axis here is the batch size. `BATCH` is the whole cost of the axis in its bare form
(the generic texts); `BatchAxis` is the cost of an axis with its own words (one small class,
in one module). Nothing under `experiments/` changes for either.
"""

import dataclasses
import math
import os

import pytest

from experiments import jsonio
from experiments.commands import tour
from experiments.verdict import Claim, Sizes, Threshold
from experiments.verdict.declare.axis import Axis, trend_clause
from experiments.verdict.render import report
from experiments.verdict.running import runner, schema

SEEDS = (0, 1, 2)
GAIN = Threshold.beyond("gain", "treated", "score", baseline="control", margin=0.1, unit="nats")


@dataclasses.dataclass(frozen=True)
class BatchSizes(Sizes):
  batch: int
  steps: int = 10


# --- the fourth axis, bare: one line -------------------------------------------------------
BATCH = Axis("batch", (4, 16), at=lambda sizes, b: dataclasses.replace(sizes, batch=b))


# --- the same axis with its own words: one class -------------------------------------------
@dataclasses.dataclass(frozen=True)
class BatchAxis(Axis):
  """The primary effect at other batch sizes (windows per step), the steps unchanged."""

  word = "batch size"

  def title(self) -> str:
    return "Batch: the primary effect against the batch size"

  def headers(self, block: dict) -> list[str]:
    return ["batch (windows per step)"]

  def sentence(self, block: dict) -> str:
    first, last = block["rows"][0]["batch"], block["rows"][-1]["batch"]
    return (f"From batch {first} to batch {last} "
            f"{trend_clause(block, 'batch', 'batch sizes', 'under 3 points')}.")


def batch_run(calls: list):
  """The paired effect at batch `b` and seed `s`: `0.3 + 0.05 log2(b / 8) + 0.01 s`."""
  def run(spec):
    b = spec.sizes.batch
    calls.append((b, spec.run_dir))
    return {"runs": {"treated": {s: {"score": 0.3 + 0.05 * math.log2(b / 8) + 0.01 * s
                                     + 0.002 * (b % 3)} for s in spec.seeds},
                     "control": {s: {"score": 0.0} for s in spec.seeds}},
            "notes": [f"- ran at batch {b}"]}
  return run


def batch_claim(run, axes=(BATCH,)):
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               thresholds=(GAIN,), seeds=SEEDS, trains=False, run=run,
               QUICK=BatchSizes(8, steps=2), FULL=BatchSizes(8), axes=axes)


def quiet(*_):
  pass


@pytest.mark.parametrize("axis", [BATCH, BatchAxis("batch", (4, 16), at=BATCH.at)])
def test_a_fourth_axis_runs_end_to_end(tmp_path, axis):
  calls = []
  claim = batch_claim(batch_run(calls), axes=(axis,))
  assert claim.to_dict()["axes"] == {"batch": [4, 16]}
  res, run_dir = runner.run_claim(claim, root=str(tmp_path), log=quiet)
  # the registered batch 8 first (the verdict), then each other batch in its own folder
  assert [b for b, _ in calls] == [8, 4, 16]
  assert calls[1][1] == os.path.join(run_dir, "batch-4")
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  schema.validate_results(on_disk, ["toy"])
  assert on_disk == res and schema.upgrade(res) == res
  block = res["axes"]["batch"]
  assert [r["batch"] for r in block["rows"]] == [4, 16]
  assert block["rows"][1]["effect"] == pytest.approx(0.3 + 0.05 + 0.01 + 0.002)
  assert block["trend"] == "not measured" and block["points"] == 2  # two points: no interval
  assert block["slope"] == pytest.approx(0.1 / math.log(4), rel=1e-9)  # per e-fold of batch
  text = open(os.path.join(run_dir, "report.md")).read()
  assert f"## {axis.title()}" in text and f"**Trend with {axis.trend_title()}.**" in text
  assert "![batch.png](batch.png)" in text and os.path.exists(os.path.join(run_dir, "batch.png"))
  assert text == "\n".join(report.claim_markdown(claim, res))  # the report is the file's
  assert res["verdict"] == "supported"  # read at batch 8 alone


def test_a_fourth_axis_from_the_command_line_and_onto_a_finished_run(tmp_path, monkeypatch,
                                                                     capsys):
  calls = []
  claim = batch_claim(batch_run(calls))
  monkeypatch.setattr(tour, "CLAIMS", {"toy": claim})
  # quick runs measure no axis unless asked; --axes asks
  assert tour.claim_main(["toy", "--quick", "--seeds", "0", "1", "2", "--out", str(tmp_path),
                          "--axes", "batch="]) == 0
  assert [b for b, _ in calls] == [8]  # QUICK's batch alone
  run_dir = capsys.readouterr().out.split("report: ")[1].split("\n")[0].rsplit("/", 1)[0]
  calls.clear()
  assert tour.claim_main(["toy", "--resume", run_dir, "--axes", "batch=4,16"]) == 0
  assert [b for b, _ in calls] == [4, 16]  # the verdict is not run again
  out = capsys.readouterr().out
  assert "From batch = 4 to batch = 16 the trend is not measured" in out
  res = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  assert res["axes"]["batch"]["added"]["runtime_s"] >= 0
  assert "This axis was added onto the finished result" in open(
      os.path.join(run_dir, "report.md")).read()
  assert tour.claim_main(["toy", "--axes", "colour=red", "--out", str(tmp_path)]) == 2
  assert "has no axis 'colour'" in capsys.readouterr().err
