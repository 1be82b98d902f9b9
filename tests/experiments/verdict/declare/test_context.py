"""The context-length axis of the claims runner: lengths, the slope on log T, crashes and resume,
the CLI."""

import dataclasses
import math
import os

import numpy as np
import pytest
import scipy.stats

from experiments import jsonio
from experiments.commands import tour
from experiments.verdict import Claim, Sizes
from experiments.verdict.arithmetic import stats
from experiments.verdict.declare import axes
from experiments.verdict.running import runner, schema
from tests.experiments.verdict.toy_claims import GAIN, SEEDS, quiet

pytestmark = pytest.mark.usefixtures("cards")


@dataclasses.dataclass(frozen=True)
class LengthSizes(Sizes):
  model: str
  seq_len: int


def length_claim(effect_at, calls=None, fail=(), *, lengths=(), at="base", **kw):
  """A claim whose paired effect at length T and seed s is `effect_at(T) + 0.01 s`, with a
  context axis `axes.context(lengths, at)` (`at="base"`: the `base` model at `T`)."""
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

  declared = (axes.context(lengths, at_length if at == "base" else at),)
  kw = {"seeds": SEEDS, "trains": False, "thresholds": (GAIN,), "axes": declared, **kw}
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               run=run, QUICK=LengthSizes("mini", 32), FULL=LengthSizes("small", 128), **kw)


def test_context_lengths_run_through_the_runner_with_a_slope_on_log_T(tmp_path):
  def effect_at(T):  # off the line a little, so the fit has residuals and an interval
    return 0.05 * math.log(T) + {256: 2e-4, 512: -4e-4, 1024: 2e-4}.get(T, 0.0)

  calls = []
  claim = length_claim(effect_at, calls, lengths=(1024, 256, 512))
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
  same = length_claim(effect_at, calls, lengths=(128, 256),
                      at=lambda sizes, T: dataclasses.replace(sizes, seq_len=T))
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
  claim = length_claim(lambda T: 0.3, calls, fail=(512,), lengths=(256, 512))
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
    length_claim(lambda T: 0.0, lengths=(256, 256))
  with pytest.raises(ValueError, match="declares no at_length"):
    length_claim(lambda T: 0.0, lengths=(256,), at=None)
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
