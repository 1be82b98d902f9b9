"""The `results.json` of a run: verdicts, effects, arms, config (budget, regime), machine.

`results_of` turns one run's findings into the validated dict (the primary verdict and the
extensions' by `rule`, paired effects and arm summaries by `stats`), with the training budget
each reported model had (`budget`) and the regime of the registered size (`regime`: its model,
parameters, tokens per parameter and held-out bits per byte).
"""

from __future__ import annotations

from experiments import jsonio
from experiments.verdict.arithmetic.rule import clause_verdicts, extension_verdicts, verdict
from experiments.verdict.arithmetic.stats import arm_summary, effect, threshold_effect
from experiments.verdict.declare.axes import model_card, run_bits, trained_params
from experiments.verdict.declare.claim import Claim
from experiments.verdict.declare.sizes import Sizes
from experiments.verdict.running import folders
from experiments.verdict.running.schema import SCHEMA, validate_results


def results_of(claim: Claim, *, quick: bool, seeds, sizes: Sizes, findings: dict, runs: dict,
               runtime: float, axes: dict | None = None, notes=None, figures=None
               ) -> tuple[dict, list]:
  """The `results.json` dict of a run (validated, schema 2) and the primary thresholds'
  evaluations.

  `axes` is `{name: block}` (`Axis.block`) of the axes measured; `notes` and `figures` (the
  report's, default the findings') are kept so the report is made from the file alone.
  `split` is the split the primary's metrics were read on: the findings' `split` (a claim that
  reads its verdict on `test` says so), else `val`, where every claim registered before the
  test split existed read it; `corpus_sha256` the pinned corpus (`folders.corpus_sha256`)."""
  indicative = quick or len(seeds) < 3
  v, reason, evals = verdict(claim, runs, seeds, indicative=indicative)
  extensions = extension_verdicts(claim, runs, seeds, indicative=indicative)
  effects = [threshold_effect(th, runs, seeds)
             for th in claim.thresholds + tuple(t for e in claim.extensions for t in e.thresholds)]
  names = {e["name"] for e in effects}
  for name, arm, baseline, metric in findings.get("effects", ()):
    if name not in names:
      effects.append(effect(runs, seeds, name, arm, baseline, metric))
  results = {
      "claim": claim.id, "schema": SCHEMA, "quick": quick, "seeds": list(seeds),
      "tuning_seeds": list(claim.tuning_seeds),
      "config": {"sizes": sizes.to_dict(), "setup": findings.get("setup", {}),
                 **({"budget": spent} if (spent := budget(sizes, trained_params(sizes))) else {})},
      "arms": {arm: arm_summary(per_seed) for arm, per_seed in runs.items()},
      "effects": effects, "verdict": v, "reason": reason,
      **({"clauses": clause_verdicts(claim, runs, seeds, indicative=indicative)}
         if claim.clauses else {}),
      "thresholds": [th.to_dict() for th in claim.thresholds], "extensions": extensions,
      "axes": dict(axes or {}),
      "anchors": [a.to_dict() for a in claim.anchors], "runtime_s": runtime,
      "env": folders.environment(), "git": folders.git_revision(),
      "corpus_sha256": folders.corpus_sha256(), "split": findings.get("split", "val"),
      **({"version": claim.version} if claim.version > 1 else {}),
      "notes": list(findings.get("notes", ()) if notes is None else notes),
      "figures": list(findings.get("figures", ()) if figures is None else figures),
  }
  results["config"]["regime"] = regime(claim, sizes, seeds, runs)
  results = jsonio.strict(results)
  validate_results(results, new=True)
  return results, evals


def budget(sizes: Sizes, params: int | None) -> dict | None:
  """`config.budget`: what each reported model trains on, per parameter; None if it trains none.

  Example:
    >>> import dataclasses
    >>> from experiments.verdict.declare.sizes import TrainedSizes
    >>> @dataclasses.dataclass(frozen=True)
    ... class S(TrainedSizes):
    ...   steps: int
    ...   batch_size: int
    ...   seq_len: int
    >>> budget(S(steps=409, batch_size=16, seq_len=128), 41_856)  # micro-20's regime
    {'train_tokens': 837632, 'params': 41856, 'tokens_per_param': 20.01223241590214}
  """
  tokens = sizes.train_tokens()
  if tokens is None or not params:
    return None
  return {"train_tokens": int(tokens), "params": int(params),
          "tokens_per_param": tokens / params}


def regime(claim: Claim, sizes: Sizes, seeds, runs: dict) -> dict:
  """`config.regime`: the registered size's model, parameters, tokens per parameter and the
  held-out bits per byte its models reach (None where the run does not measure it).

  Tokens per parameter are what each reported model trains on (`budget`) for a claim whose
  sizes count them, else, for a claim that reads the shared base models (`reads_base`), the
  base model's own recipe; bits per byte come from `claim.bits_metric`, else from the stored
  base models' held-out loss (`experiments.models.heldout_bits`).
  """
  from experiments import models

  name = getattr(sizes, "model", None)
  known = name in models.RECIPES or name in models.SHAPES
  params = model_card(name)["params"] if known else None
  spent = budget(sizes, trained_params(sizes))
  tpp = spent["tokens_per_param"] if spent else (
      models.model_card(name).get("tokens_per_param") if known and claim.reads_base else None)
  bits = run_bits(claim, runs, seeds)
  if bits is None and claim.bits_metric is None and claim.reads_base and name in models.RECIPES:
    bits = models.heldout_bits(name, seeds)
  return {"model": name, "params": params, "tokens_per_param": tpp, "bits_per_byte": bits}
