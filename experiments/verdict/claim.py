"""The frozen declaration of one claim: `Claim`.

A claim is written down whole before it runs: the preface's sentence, our hypothesis, what
would refute it, the thresholds its verdict is computed from (`experiments.verdict.thresholds`),
the published anchors, and its `QUICK` and `FULL` sizes (`experiments.verdict.sizes`), with
the axes a full run also measures (model sizes, context lengths, training budgets). Nothing
here runs or computes a statistic: `stats` does the arithmetic, `rule` the verdict, `runner`
the running, `report` the markdown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

from experiments.verdict.sizes import Sizes, Spec
from experiments.verdict.thresholds import Anchor, Extension, Threshold

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
    scale_models: the base models (keys of `experiments.models.RECIPES`, or of `SHAPES` for a
      claim that trains its shapes from scratch) a full run also measures the primary effect
      on, for its trend with model size; the `Sizes` must have a `model` field. The verdict
      is read only at the `FULL` sizes' own `model` (added to the list when missing);
      `claim ID --sizes ...` overrides the list, and quick runs use one size unless given
      `--sizes`. Empty: one size (`results.json`'s `scale` is null).
    context_lengths: the lengths `T` (tokens) a full run also measures the primary effect at,
      for its trend with context (`results.json`'s `context`); `claim ID --lengths ...`
      overrides them, and quick runs measure none unless given `--lengths`. Needs `at_length`.
    at_length: `at_length(sizes, T) -> Sizes`, the claim's own sizes for a run at length `T`
      (typically a base model trained at `T` or longer, `seq_len = T`, and fewer windows so the
      tokens measured stay about constant). The verdict is never read from these runs.
    budgets: whole multiples `k ≥ 2` of the registered run's training tokens at which a full
      run also measures the primary effect (`results.json`'s `budgets`), for its trend with
      training length: the whole protocol again, every rate tuned again, on `k` times the
      tokens. `claim ID --budgets ...` overrides them, and quick runs measure none unless
      given `--budgets`. Needs `at_budget` and sizes that train (`Sizes.train_tokens`).
    at_budget: `at_budget(sizes, k) -> Sizes`, the claim's sizes on `k` times the tokens
      (typically `steps` times `k`, with whatever counts steps, such as an evaluation
      interval, scaled alike); the runner refuses sizes whose `train_tokens()` is not `k`
      times the registered run's. The verdict is never read from these runs.
    budget_model: the base model the budget axis trains (a key of `RECIPES` or `SHAPES`;
      default: the registered size's own `model`). A smaller model than the registered one
      reaches more tokens per parameter at `k` times the tokens for the same compute, nearer
      the regime optimizer comparisons are published in. Its 1× run is the scale axis's run
      of that model when the scale axis runs it (else it runs into `budget-x1/`); quick runs
      keep their own model. The verdict is never read from these runs.
    version: the registration's number, 1 for the first. A claim whose setup changes (steps,
      batch, context, model, metric, margin) is registered again under the next version,
      before it runs; `revisions` says why, one line per version after the first, and
      `results.json` records the version it ran under.
    revisions: `("v2: <why>", ...)`, exactly `version − 1` lines.
    bits_metric: `(arm, metric)` of a held-out loss in nats per byte that the claim's runs
      report, read as the bits per byte its models reach (`results.json`'s
      `config.regime`); None: the base model's stored held-out loss, when it reads one.
    reads_base: the claim measures (or fine-tunes) the shared base models of its sizes'
      `model` (`experiments.models`) instead of training its own from scratch: its rows
      then carry that model's tokens per parameter and held-out bits per byte.
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
  scale_models: tuple[str, ...] = ()
  context_lengths: tuple[int, ...] = ()
  at_length: Callable[[Sizes, int], Sizes] | None = None
  budgets: tuple[int, ...] = ()
  at_budget: Callable[[Sizes, int], Sizes] | None = None
  budget_model: str | None = None
  version: int = 1
  revisions: tuple[str, ...] = ()
  bits_metric: tuple[str, str] | None = None
  reads_base: bool = False

  def __post_init__(self):
    if not (isinstance(self.version, int) and self.version >= 1
            and len(self.revisions) == self.version - 1
            and all(r.startswith(f"v{i + 2}: ") for i, r in enumerate(self.revisions))):
      raise ValueError(f"Claim {self.id!r}: version={self.version!r} needs exactly "
                       f"{max(self.version - 1, 0)} revisions, 'v2: <why>', 'v3: <why>', ...; got "
                       f"{list(self.revisions)}. Fix: add one line per new registration saying "
                       "what changed and why, written before the run.")
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
    if self.scale_models:
      self.check_scale_models(self.scale_models, "scale_models")
    if self.context_lengths:
      self.check_context_lengths(self.context_lengths, "context_lengths")
    if self.budgets:
      self.check_budgets(self.budgets, "budgets")
    if self.budget_model is not None:
      self.check_budget_model()

  def check_budgets(self, multiples, field: str) -> None:
    """Raises `ValueError` unless `multiples` are distinct whole numbers `≥ 2` this claim can run.

    The claim must declare `at_budget` (how its sizes change with the tokens), a non-control
    threshold (the primary effect measured against the budget), and `FULL` sizes that train
    (`train_tokens()` not None). `field` names the setting in the error (`"budgets"`, or
    `"--budgets"` on the command line).
    """
    multiples = tuple(multiples) if not isinstance(multiples, (str, int)) else ()
    if not (multiples and len(set(multiples)) == len(multiples)
            and all(isinstance(k, int) and not isinstance(k, bool) and k >= 2
                    for k in multiples)):
      raise ValueError(f"Claim {self.id!r}: {field}={multiples!r} must be distinct whole "
                       "multiples of the registered run's tokens, each at least 2, e.g. (4,).")
    self._check_axis(field, self.at_budget, "on more tokens", "at_budget(sizes, k)",
                     "the budget (e.g. steps times k)", "the budget")
    if self.FULL is not None and self.FULL.train_tokens() is None:
      raise ValueError(f"Claim {self.id!r}: {field} multiplies the training tokens, but its FULL "
                       f"sizes ({type(self.FULL).__name__}) train nothing (train_tokens() is "
                       "None). Fix: give its Sizes a train_tokens (e.g. subclass TrainedSizes), "
                       "or drop " + field + ".")

  def check_budget_model(self) -> None:
    """Raises `ValueError` unless `budget_model` names a base model the budget axis can train.

    It must be a key of `experiments.models.RECIPES` or `SHAPES`, the claim must declare
    `budgets`, and its `FULL` sizes must have a `model` field (the runner replaces it).
    """
    from experiments import models  # deferred: a claim's declaration trains nothing

    known = sorted({*models.RECIPES, *models.SHAPES})
    if not isinstance(self.budget_model, str) or self.budget_model not in known:
      raise ValueError(f"Claim {self.id!r}: budget_model={self.budget_model!r} is not a base "
                       f"model. Fix: name one of {known}.")
    if not self.budgets:
      raise ValueError(f"Claim {self.id!r}: budget_model={self.budget_model!r} names the "
                       "model of a budget axis, but the claim declares no budgets. Fix: "
                       "declare budgets=(4,) (or drop budget_model).")
    if self.FULL is not None and not hasattr(self.FULL, "model"):
      raise ValueError(f"Claim {self.id!r}: budget_model needs FULL sizes with a `model` field "
                       f"({type(self.FULL).__name__} has none). Fix: add one, or drop "
                       "budget_model.")

  def check_context_lengths(self, lengths, field: str) -> None:
    """Raises `ValueError` unless `lengths` are distinct positive token counts this claim can run.

    The claim must declare `at_length` (how its sizes change with `T`) and a non-control
    threshold (the primary effect measured against `T`). `field` names the setting in the
    error (`"context_lengths"`, or `"--lengths"` on the command line).
    """
    lengths = tuple(lengths) if not isinstance(lengths, (str, int)) else ()
    ok = (lengths and len(set(lengths)) == len(lengths)
          and all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in lengths))
    if not ok:
      raise ValueError(f"Claim {self.id!r}: {field} must be distinct positive integers "
                       "(tokens), e.g. (256, 512, 1024).")
    self._check_axis(field, self.at_length, "at other lengths", "at_length(sizes, T)", "T",
                     "T")

  def _check_axis(self, field: str, at, runs: str, signature: str, changes: str,
                  against: str) -> None:
    """What every extra axis needs: its `at_*` function and a primary effect to measure."""
    if at is None:
      raise ValueError(f"Claim {self.id!r}: {field} asks for runs {runs}, but the claim "
                       f"declares no {signature}. Fix: declare how its sizes change with "
                       f"{changes}, or drop {field}.")
    if self.primary is None:
      raise ValueError(f"Claim {self.id!r}: {field} needs a primary effect to measure against "
                       f"{against}, and every threshold is a control. Fix: declare a "
                       "non-control threshold first.")

  def check_scale_models(self, names, field: str) -> None:
    """Raises `ValueError` unless `names` are distinct base models this claim can run at.

    Each must be a key of `experiments.models.RECIPES` (or of `SHAPES`, the shapes a claim
    trains from scratch, which `model_card` reads alike), the claim must have a non-control
    threshold (its primary effect is what scales), and its `QUICK` and `FULL` sizes must have
    a `model` field (the runner replaces it per size). `field` names the setting in the error
    (`"scale_models"`, or `"--sizes"` on the command line).
    """
    from experiments import models  # deferred: a claim's declaration trains nothing

    if isinstance(names, str) or not names or len(set(names)) != len(tuple(names)):
      raise ValueError(f"Claim {self.id!r}: {field}={names!r} must be distinct model names, "
                       "e.g. ('mini', 'small', 'base').")
    names = tuple(names)
    unknown = [n for n in names if n not in models.RECIPES and n not in models.SHAPES]
    if unknown:
      raise ValueError(f"Claim {self.id!r}: {field} names {unknown}, not base models. Fix: "
                       f"choose from experiments.models.RECIPES: {sorted(models.RECIPES)} (or, "
                       f"for a claim that trains its shape, SHAPES: {sorted(models.SHAPES)}).")
    if self.primary is None:
      raise ValueError(f"Claim {self.id!r}: {field} needs a primary effect to scale, and every "
                       "threshold is a control. Fix: declare a non-control threshold first.")
    for label, sizes in (("QUICK", self.QUICK), ("FULL", self.FULL)):
      if sizes is not None and "model" not in {f.name for f in dataclasses.fields(sizes)}:
        raise ValueError(f"Claim {self.id!r}: {field} runs the claim at several base models, "
                         f"but its {label} sizes ({type(sizes).__name__}) have no `model` field. "
                         f"Fix: add `model: str` to {type(sizes).__name__} and read "
                         "`spec.sizes.model` in run(), or drop " + field + ".")

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

    `scale_models`, `context_lengths`, `budgets` and `budget_model` appear only when declared,
    so a one-size claim's `claim.json` is unchanged.
    """
    d = {"id": self.id, "topic": self.topic, "kind": self.kind, "preface": self.preface,
         "theorem": self.theorem, "hypothesis": self.hypothesis,
         "refuted_if": self.refuted_if,
         "thresholds": [t.to_dict() for t in self.thresholds],
         "extensions": [e.to_dict() for e in self.extensions],
         "anchors": [a.to_dict() for a in self.anchors], "seeds": list(self.seeds),
         "tuning_seeds": list(self.tuning_seeds), "trains": self.trains,
         "built": self.built}
    if self.scale_models:
      d["scale_models"] = list(self.scale_models)
    if self.context_lengths:
      d["context_lengths"] = list(self.context_lengths)
    if self.budgets:
      d["budgets"] = list(self.budgets)
    if self.budget_model is not None:
      d["budget_model"] = self.budget_model
    if self.version > 1:
      d["version"], d["revisions"] = self.version, list(self.revisions)
    return d
