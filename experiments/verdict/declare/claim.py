"""The frozen declaration of one claim: `Claim`.

A claim is written down whole before it runs: the preface's sentence, our hypothesis, what
would refute it, the thresholds its verdict is computed from (`declare.thresholds`), the
published anchors, and its `QUICK` and `FULL` sizes (`declare.sizes`), with
the axes a full run also measures (model sizes, context lengths, training budgets). Nothing
here runs or computes a statistic: `stats` does the arithmetic, `rule` the verdict, `runner`
the running, `report` the markdown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

from experiments.verdict.declare.axis import Axis
from experiments.verdict.declare.clause import Clause, check_clauses
from experiments.verdict.declare.revision import Revision, check_revisions, revision_from_json
from experiments.verdict.declare.sizes import Sizes, Spec
from experiments.verdict.declare.thresholds import Anchor, Extension, Threshold

KINDS = ("existing", "new")
DEFAULT_SEEDS = (0, 1, 2, 3, 4)  # pre-registered seeds unless a claim declares its own
MIN_TRAINING_SEEDS = 5  # a claim that trains reports at least this many seeds


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
    thresholds: the numbers the primary verdict (the headline: the preface's own question) is
      computed from, frozen before the real run; the first is the claim's key number.
    anchors: published numbers the key number is compared with.
    theorem: where mathematics fixes part of the outcome, the argument in words (a float64
      test confirms it; the report says "settled by proof"); None otherwise.
    extensions: questions we add to probe a mechanism, each with its own verdict, reported
      beneath the headline and never changing it.
    seeds: the pre-registered seeds of the full run (at least 5 for a claim that trains).
      A run on other seeds is an addendum under the registered verdict.
    tuning_seeds: the seeds every rate, grid and arm choice is made on; disjoint from `seeds`
      (the runner refuses overlap).
    trains: whether the claim trains models (then it needs at least 5 seeds).
    run: `run(spec) -> findings`, a dict with `config` (JSON-able), `runs`
      (`{arm: {seed: {metric: float}}}`), and optionally `figures` (PNG names in
      `spec.run_dir`), `notes` (markdown lines) and `effects` (extra `(name, arm, baseline,
      metric)` comparisons). None: the claim is not built yet.
    QUICK: the sizes of `--quick` runs (one seed, minutes for the whole tour).
    FULL: the sizes of full runs.
    axes: the axes a full run also measures the primary effect along (`Axis`; the factories
      `declare.axes.scale`, `.context` and `.budget`, or any `Axis`): model sizes,
      context lengths, training budgets... The verdict is read only at the registered sizes;
      each axis's other points feed only its trend (`results.json`'s `axes`). `claim ID --axes
      NAME=v1,v2` overrides an axis's values, and quick runs measure none unless given them.
      The one spelling: `axes=(axes.scale(models), axes.context(Ts, at_length),
      axes.budget(ks, at_budget, model))`, read back with `claim.axis(name)` (`.values`, `.at`,
      `.model`). An axis with no values still carries its `at` for `--axes NAME=...`.
    version: the registration's number, 1 for the first. A claim whose setup changes (steps,
      batch, context, model, metric, margin) is registered again under the next version,
      before it runs; `revisions` says why, one per version after the first, and
      `results.json` records the version it ran under. A version registered after an earlier
      version's result was kept runs on seeds and tuning seeds no kept version ran on
      (`experiments.verdict.running.history`; `--keep` refuses otherwise).
    revisions: exactly `version − 1` entries: `Revision(N, "defect" | "protocol", why,
      test=...)` (a defect names the test that fails on the old code), or for versions
      registered before `Revision` existed, their line `"vN: <why>"`.
    bits_metric: `(arm, metric)` of a held-out loss in nats per byte that the claim's runs
      report, read as the bits per byte its models reach (`results.json`'s
      `config.regime`); None: the base model's stored held-out loss, when it reads one.
    reads_base: the claim measures (or fine-tunes) the shared base models of its sizes'
      `model` (`experiments.models`) instead of training its own from scratch: its rows
      then carry that model's tokens per parameter and held-out bits per byte.
    key: the name of the threshold whose effect the verdict table shows as the key number
      (a display choice, not frozen in `claim.json`); None: the first effect.
    clauses: the preface's sentence split into its clauses (`declare.clause.Clause`), each
      decided by the primary thresholds it names; the headline is their conjunction. Every
      primary threshold decides exactly one clause. Empty: one clause, the whole sentence,
      decided by every primary threshold (claims registered before clauses existed).
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
  theorem: str | None = None
  extensions: tuple[Extension, ...] = ()
  seeds: tuple[int, ...] = DEFAULT_SEEDS
  tuning_seeds: tuple[int, ...] = ()
  trains: bool = True
  version: int = 1
  revisions: tuple[str | Revision, ...] = ()
  bits_metric: tuple[str, str] | None = None
  reads_base: bool = False
  axes: tuple[Axis, ...] = ()
  key: str | None = None
  clauses: tuple[Clause, ...] = ()

  def __post_init__(self):
    check_revisions(self.id, self.version, self.revisions)
    object.__setattr__(self, "clauses", tuple(self.clauses))
    check_clauses(self.id, self.clauses, self.thresholds)
    if self.key is not None and self.key not in {t.name for t in self.thresholds}:
      raise ValueError(f"Claim {self.id!r}: key={self.key!r} names no threshold. Fix: one of "
                       f"{[t.name for t in self.thresholds]}, or None (the first).")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.id):
      raise ValueError(f"Claim.id={self.id!r} must be kebab-case, e.g. 'causal-mask'.")
    if self.kind not in KINDS:
      raise ValueError(f"Claim.kind={self.kind!r} is unknown. Fix: use one of {KINDS}.")
    if self.built and not (self.hypothesis and self.refuted_if and self.thresholds):
      raise ValueError(f"Claim {self.id!r} has a `run` but no hypothesis, refuted_if or "
                       "thresholds. Fix: freeze all three before the claim can run.")
    if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
      raise ValueError(f"Claim {self.id!r}: seeds={self.seeds} must be distinct and non-empty.")
    overlap = sorted(set(self.seeds) & set(self.tuning_seeds))
    if overlap:
      raise ValueError(f"Claim {self.id!r}: seeds {overlap} are both reported and tuning seeds. "
                       "Fix: choose rates, grids and arms on seeds that are never reported.")
    if self.built and self.trains and len(self.seeds) < MIN_TRAINING_SEEDS:
      raise ValueError(f"Claim {self.id!r} trains but pre-registers {len(self.seeds)} seeds. "
                       f"Fix: register at least {MIN_TRAINING_SEEDS} (default {DEFAULT_SEEDS}).")
    names = [e.name for e in self.extensions]
    if len(set(names)) != len(names):
      raise ValueError(f"Claim {self.id!r}: extension names {names} repeat. Fix: name each once.")
    self._check_axes()

  def _check_axes(self) -> None:
    """Every declared axis is an `Axis`, one per name, with values its kind accepts."""
    by_name = {a.name: a for a in self.axes}
    if len(by_name) != len(self.axes) or not all(isinstance(a, Axis) for a in self.axes):
      raise ValueError(f"Claim {self.id!r}: axes={self.axes!r} must be distinct `Axis` objects, "
                       "one per name. Fix: declare each axis once.")
    object.__setattr__(self, "axes", tuple(self.axes))
    for axis in self.axes:
      if axis.values:
        axis.check(self, axis.values, axis.field)
    if "budget" in by_name and by_name["budget"].model is not None:
      by_name["budget"].check_model(self)

  def axis(self, name: str) -> Axis:
    """The declared axis `name`, else an undeclared one of the shared kinds (`axes.KINDS`):
    the command line may ask for points of an axis the claim does not declare."""
    from experiments.verdict.declare import axes as kinds

    for axis in self.axes:
      if axis.name == name:
        return axis
    if name not in kinds.KINDS:
      known = sorted({*kinds.KINDS, *(a.name for a in self.axes)})
      raise ValueError(f"Claim {self.id!r} has no axis {name!r}. Fix: name one of {known}.")
    return kinds.KINDS[name](())

  def axis_of(self, name: str) -> Axis:
    """The axis that renders block `name` of a result: the declared one, else a shared kind
    (`axes.KINDS`), else a bare `Axis` of that name (a kept result may hold an axis the claim
    no longer declares)."""
    from experiments.verdict.declare import axes as kinds

    for axis in self.axes:
      if axis.name == name:
        return axis
    return kinds.KINDS[name](()) if name in kinds.KINDS else Axis(name)

  @classmethod
  def from_dict(cls, d: dict[str, Any], axes: tuple[Axis, ...] = ()) -> Claim:
    """The declaration a run's `claim.json` froze (`to_dict`), without `run` or sizes, with
    `axes`: a kept result's report is rendered with the claim as it ran.

    Example:
      >>> from experiments.verdict.declare.thresholds import Extension, Threshold
      >>> gain = Threshold.beyond("gain", "new", "loss", baseline="old", margin=0.1, unit="nats")
      >>> c = Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h",
      ...           refuted_if="r", thresholds=(gain,), trains=False,
      ...           extensions=(Extension("why?", "q", (gain,)),))
      >>> d = Claim.from_dict(c.to_dict())
      >>> (d.thresholds, d.extensions, d.seeds) == (c.thresholds, c.extensions, c.seeds)
      True
    """
    return cls(id=d["id"], topic=d["topic"], kind=d["kind"], preface=d["preface"],
               hypothesis=d["hypothesis"], refuted_if=d["refuted_if"], theorem=d["theorem"],
               thresholds=tuple(Threshold.from_dict(t) for t in d["thresholds"]),
               extensions=tuple(Extension.from_dict(e) for e in d["extensions"]),
               anchors=tuple(Anchor(**a) for a in d["anchors"]), trains=d["trains"],
               seeds=tuple(d.get("seeds", DEFAULT_SEEDS)),
               tuning_seeds=tuple(d.get("tuning_seeds", ())),
               version=d.get("version", 1),
               revisions=tuple(revision_from_json(r) for r in d.get("revisions", ())),
               clauses=tuple(Clause.from_dict(c) for c in d.get("clauses", ())),
               axes=tuple(axes))

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

  @property
  def primary(self) -> Threshold | None:
    """The first non-control threshold: the primary effect, the one reported against size."""
    return next((th for th in self.thresholds if not th.control), None)

  def to_dict(self) -> dict[str, Any]:
    """The frozen definition (everything but `run`), as written to `claim.json`.

    Each axis with values writes its own keys (`scale_models`, `context_lengths`, `budgets`
    and `budget_model`, another axis `axes: {name: values}`), so a one-size claim's
    `claim.json` is unchanged.
    """
    d = {"id": self.id, "topic": self.topic, "kind": self.kind, "preface": self.preface,
         "theorem": self.theorem, "hypothesis": self.hypothesis,
         "refuted_if": self.refuted_if,
         "thresholds": [t.to_dict() for t in self.thresholds],
         "extensions": [e.to_dict() for e in self.extensions],
         "anchors": [a.to_dict() for a in self.anchors], "seeds": list(self.seeds),
         "tuning_seeds": list(self.tuning_seeds), "trains": self.trains,
         "built": self.built}
    for axis in self.axes:
      if axis.values:
        for key, value in axis.to_dict().items():
          d[key] = {**d[key], **value} if key in d else value
    if self.clauses:
      d["clauses"] = [c.to_dict() for c in self.clauses]
    if self.version > 1:
      d["version"] = self.version
      d["revisions"] = [r.to_dict() if isinstance(r, Revision) else r for r in self.revisions]
    return d
