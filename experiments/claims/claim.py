"""The frozen declarations a claim is made of: `Threshold`, `Anchor`, `Sizes`, `Claim`, `Spec`.

A claim is written down whole before it runs: the preface's sentence, our hypothesis, what
would refute it, the thresholds its verdict is computed from, the published anchors, and its
`QUICK` and `FULL` sizes (a frozen `Sizes` subclass, written whole into the run's config).
Nothing here runs or computes a statistic: `experiments.claims.stats` does the arithmetic,
`experiments.claims.runner` the running and the verdict, `experiments.claims.report` the
markdown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

VERDICTS = ("supported", "refuted", "inconclusive", "not built")
KINDS = ("existing", "new")
INDICATIVE = "indicative (quick)"
FULL_SEEDS = (0, 1, 2)
QUICK_SEEDS = (0,)

_CONDITION = re.compile(r"^\s*(<=|>=|<|>|==)\s*([-+0-9.eE]+|inf|-inf)\s*$")


def parse_condition(text: str) -> tuple[str, float]:
  """`">= 0.9"` -> `(">=", 0.9)`; raises `ValueError` naming the accepted forms."""
  match = _CONDITION.match(text)
  if not match:
    raise ValueError(f"condition {text!r} cannot be read. Fix: write an operator (<, <=, >, >=, "
                     "==) and a number, e.g. '>= 0.9'.")
  return match.group(1), float(match.group(2))


@dataclasses.dataclass(frozen=True)
class Threshold:
  """One number the verdict is computed from, with the conditions that decide it.

  Attributes:
    name: what is measured, in words (also the name of its effect in `results.json`).
    arm: the arm measured.
    metric: the metric of that arm.
    baseline: if set, the quantity is the paired effect `arm − baseline`, seed by seed.
    stat: `"ci"`: the 95% t-interval of the mean over seeds; `"range"`: min to max over seeds.
    supports: condition (e.g. `">= 0.9"`) that the whole interval must meet to support.
    refutes: condition that, met by the whole interval, refutes the claim.
    control: a sanity check of the instrument: if its `supports` fails, the verdict is
      `inconclusive` whatever else holds.
  """

  name: str
  arm: str
  metric: str
  baseline: str | None = None
  stat: Literal["ci", "range"] = "ci"
  supports: str | None = None
  refutes: str | None = None
  control: bool = False

  def __post_init__(self):
    if self.stat not in ("ci", "range"):
      raise ValueError(f"Threshold.stat={self.stat!r} is unknown. Fix: use 'ci' or 'range'.")
    if self.supports is None and self.refutes is None:
      raise ValueError(f"Threshold {self.name!r} has neither `supports` nor `refutes`. Fix: give "
                       "at least one condition, e.g. supports='>= 0.9'.")
    if self.control and self.supports is None:
      raise ValueError(f"Threshold {self.name!r} is a control without `supports`. Fix: a control "
                       "states what must hold, e.g. supports='== 1'.")
    for cond in (self.supports, self.refutes):
      if cond is not None:
        parse_condition(cond)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Anchor:
  """A published number (or finding) a claim's key number is read beside."""

  what: str
  value: float | str
  source: str

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Spec:
  """What `Claim.run` is asked to do: its sizes, the seeds, and where figures go.

  Attributes:
    quick: whether these are the `QUICK` sizes (the verdict is then indicative).
    seeds: the seeds to report, in order.
    run_dir: the run's folder (figures are written there).
    sizes: the claim's `QUICK` or `FULL` sizes; everything the run reads about its size.
    log: where progress lines go.
  """

  quick: bool
  seeds: tuple[int, ...]
  run_dir: str
  sizes: Sizes | None = None
  log: Callable[[str], None] = print



@dataclasses.dataclass(frozen=True)
class Sizes:
  """The base of every claim's frozen sizes: subclass it, then declare `QUICK` and `FULL`.

  A subclass lists the sizes its experiment reads (model name, steps, sequence lengths, rate
  grid, ...) as typed fields; the runner writes `dataclasses.asdict(sizes)` into the run's
  `config`, so a run records exactly the sizes it ran with.

  Example:
    >>> import dataclasses
    >>> from experiments.claims.claim import Sizes
    >>> @dataclasses.dataclass(frozen=True)
    ... class MySizes(Sizes):
    ...   steps: int
    ...   seq_lens: tuple[int, ...]
    >>> MySizes(steps=30, seq_lens=(32, 64)).to_dict()
    {'steps': 30, 'seq_lens': [32, 64]}
  """

  def to_dict(self) -> dict[str, Any]:
    """The fields as JSON-ready values (tuples become lists)."""
    def plain(v):
      return [plain(x) for x in v] if isinstance(v, (tuple, list)) else v

    return {k: plain(v) for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class Claim:
  """One preface sentence, made testable.

  Attributes:
    id: the DESIGN.md id, e.g. `causal-mask`.
    topic: one of the seven matrix properties.
    kind: `existing` (an application the preface cites) or `new` (one it proposes).
    preface: the sentence tested, quoted from the preface.
    hypothesis: ours, precise enough to fail.
    refuted_if: the result that would refute it, in words.
    thresholds: the numbers the verdict is computed from (frozen before the real run); the
      first is the claim's key number.
    anchors: published numbers the key number is compared with.
    run: `run(spec) -> findings`, a dict with `config` (JSON-able), `runs`
      (`{arm: {seed: {metric: float}}}`), and optionally `figures` (PNG names in
      `spec.run_dir`), `notes` (markdown lines) and `effects` (extra `(name, arm, baseline,
      metric)` comparisons). None: the claim is not built yet.
    QUICK: the sizes of `--quick` runs (one seed, minutes for the whole tour).
    FULL: the sizes of full runs.
  """

  id: str
  topic: str
  kind: Literal["existing", "new"]
  preface: str
  hypothesis: str = ""
  refuted_if: str = ""
  thresholds: tuple[Threshold, ...] = ()
  anchors: tuple[Anchor, ...] = ()
  run: Callable[[Spec], dict] | None = None
  QUICK: Sizes | None = None
  FULL: Sizes | None = None

  def __post_init__(self):
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.id):
      raise ValueError(f"Claim.id={self.id!r} must be kebab-case, e.g. 'causal-mask'.")
    if self.kind not in KINDS:
      raise ValueError(f"Claim.kind={self.kind!r} is unknown. Fix: use one of {KINDS}.")
    if self.built and not (self.hypothesis and self.refuted_if and self.thresholds):
      raise ValueError(f"Claim {self.id!r} has a `run` but no hypothesis, refuted_if or "
                       "thresholds. Fix: freeze all three before the claim can run.")

  def sizes(self, quick: bool) -> Sizes:
    """`QUICK` or `FULL`; raises `ValueError` naming the claim if it declares none."""
    sizes = self.QUICK if quick else self.FULL
    if sizes is None:
      raise ValueError(f"Claim {self.id!r} declares no {'QUICK' if quick else 'FULL'} sizes. "
                       "Fix: pass QUICK=... and FULL=... (instances of its Sizes dataclass).")
    return sizes

  @property
  def built(self) -> bool:
    return self.run is not None

  def to_dict(self) -> dict[str, Any]:
    """The frozen definition (everything but `run`), as written to `claim.json`."""
    return {"id": self.id, "topic": self.topic, "kind": self.kind, "preface": self.preface,
            "hypothesis": self.hypothesis, "refuted_if": self.refuted_if,
            "thresholds": [t.to_dict() for t in self.thresholds],
            "anchors": [a.to_dict() for a in self.anchors], "built": self.built}


