"""Toy claims and base-model cards that the axis tests of the runner share (the `cards` fixture in
conftest.py installs the cards)."""

import dataclasses

from experiments.verdict import Claim, Sizes, Threshold
from experiments.verdict.declare import axes

PARAMS = {"mini": 100_000, "small": 860_000, "base": 2_000_000, "llama-mini": 120_000,
          "llama-base": 2_300_000}
FAMILY = {"mini": "GPT", "small": "GPT", "base": "GPT", "llama-mini": "Llama",
          "llama-base": "Llama"}


@dataclasses.dataclass(frozen=True)
class ScaleSizes(Sizes):
  model: str
  n: int = 1


SEEDS = (0, 1, 2)
GAIN = Threshold.beyond("gain", "treated", "score", baseline="control", margin=0.1, unit="nats")


def valid_results():
  """A minimal results.json that the schema accepts."""
  return {"claim": "toy", "schema": 2, "quick": False, "seeds": [0], "tuning_seeds": [100],
          "config": {},
          "arms": {"a": {"runs": {"0": {"m": 1.0}}, "mean": {"m": 1.0}, "std": {"m": 0.0}}},
          "effects": [{"name": "e", "arm": "a", "baseline": None, "metric": "m", "mean": 1.0,
                       "ci95": [None, None]}],
          "verdict": "supported", "reason": "r", "thresholds": [],
          "extensions": [{"name": "x", "verdict": "refuted", "reason": "r", "thresholds": []}],
          "axes": {}, "anchors": [],
          "runtime_s": 1.0, "env": {"jax": "0", "backend": "cpu", "device": "cpu"}, "git": None}


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


def block(effect: dict, noise: dict | None = None) -> dict:
  """The scale axis's block over sizes whose seed-s effect is `effect[m] + noise[s]`."""
  noise = noise or {s: 0.01 * s for s in SEEDS}
  per_size = {m: {"treated": {s: {"score": effect[m] + noise[s]} for s in SEEDS},
                  "control": {s: {"score": 0.0} for s in SEEDS}} for m in effect}
  claim = scale_claim(fake_run(effect))
  return axes.scale(()).block(claim, per_size, {m: ScaleSizes(m) for m in effect}, SEEDS)
