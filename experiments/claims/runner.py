"""The claims runner: seeds, paired effects with 95% t-intervals, a verdict computed by code.

    python -m experiments claim ID [--quick] [--seeds 0 1 2] [--sizes mini,small,base]

A `Claim` is frozen before it runs: its `thresholds` are written to `claim.json` first, then
`claim.run(spec)` measures, per arm and seed, a flat dict of metrics. The runner turns those
into arm means and standard deviations over seeds, paired effects (`arm − baseline` seed by
seed, since arms with the same seed share initialisation and data stream) with 95%
t-intervals, and the verdict:

* a **control** threshold whose `supports` condition fails makes the verdict `inconclusive`
  (the instrument is broken, so nothing else can be read);
* else any threshold whose `refutes` condition holds makes it `refuted`;
* else, when every non-control `supports` condition holds, `supported`;
* otherwise `inconclusive`.

A condition such as `">= 0.9"` holds only when the whole interval satisfies it: the 95%
t-interval of the mean over seeds (`stat="ci"`) or the range over seeds (`stat="range"`, for
properties that must hold in every run). With one seed the interval is the single value, and
the verdict is labelled "indicative (quick)". The run writes
`runs/claims/ID/<run-id>/{claim.json, results.json, report.md, *.png}`; `results.json` is
strict JSON (`null`, never `NaN`) and `validate_results` checks its schema.

**The scale axis.** A claim that declares `scale_models` (or a run given `--sizes`) measures
its primary effect (the first non-control threshold) at each of those base models, on the same
seeds; the verdict is read only at the registered size (the `Sizes`' own `model`), and the
other sizes feed `results.json`'s `scale`: the effect per size, the least-squares slope of the
per-seed effect on log(parameters) with its 95% interval, and the trend (`grows`, `shrinks`,
`no trend`). See `run_claim`.
"""


from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np

from experiments import jsonio
from experiments.claims import report
from experiments.claims.claim import INDICATIVE, Claim, Sizes, Spec, Threshold
from experiments.claims.schema import validate_results
from experiments.claims.stats import (
  arm_summary,
  effect,
  evaluate,
  fit_trend,
  fmt,
  holds,
  mean_ci95,
  paired_values,
)


def describe(th: Threshold, ev: dict) -> str:
  """`name = mean [lo, hi] (supports '>= 0.9': yes)`, one line per threshold."""
  lo, hi = ev["interval"]
  parts = []
  for label, cond, met in (("supports", th.supports, ev["supports"]),
                           ("refutes", th.refutes, ev["refutes"])):
    if cond is not None:
      parts.append(f"{label} {cond}: {'yes' if met else 'no'}")
  what = ev["what"]
  role = "control " if th.control else ""
  return (f"{role}{th.name} = {fmt(ev['mean'])} ({what} [{fmt(lo)}, {fmt(hi)}]; "
          + "; ".join(parts) + ")")


def decide(thresholds, runs: dict, seeds) -> tuple[str, str, list[dict]]:
  """The verdict of one group of thresholds (the primary question, or one extension).

  The rule, written once: a control whose `supports` fails blocks every threshold that
  `needs` it (default: every threshold of the group), and a blocked threshold decides
  nothing; then any unblocked threshold whose `refutes` holds refutes the group; it is
  supported when every non-control threshold is unblocked and its `supports` holds;
  otherwise inconclusive.

  Returns:
    `(verdict, why, evaluations)`, one evaluation per threshold, with `blocked` added.
  """
  evals = [evaluate(th, runs, seeds) for th in thresholds]
  failed = {th.name for th, ev in zip(thresholds, evals, strict=True)
            if th.control and not ev["supports"]}
  for th, ev in zip(thresholds, evals, strict=True):
    needs = set(th.needs) if th.needs is not None else {t.name for t in thresholds if t.control}
    ev["blocked"] = (not th.control) and bool(needs & failed)
  refuting = [th.name for th, ev in zip(thresholds, evals, strict=True)
              if not th.control and ev["refutes"] and not ev["blocked"]]
  needed = [ev for th, ev in zip(thresholds, evals, strict=True) if not th.control]
  blocked = [th.name for th, ev in zip(thresholds, evals, strict=True) if ev["blocked"]]
  if refuting:
    v, why = "refuted", "refuted by: " + ", ".join(refuting)
  elif needed and all(ev["supports"] and not ev["blocked"] for ev in needed):
    v, why = "supported", "every support condition holds"
  elif blocked:
    v, why = "inconclusive", ("a control failed (" + ", ".join(sorted(failed)) + "), so these "
                              "cannot be read: " + ", ".join(blocked))
  else:
    v, why = "inconclusive", "not every support condition holds, and no refutation does"
  if failed and not blocked:
    why += "; failed controls block nothing here: " + ", ".join(sorted(failed))
  lines = "; ".join(describe(th, ev) for th, ev in zip(thresholds, evals, strict=True))
  return v, f"{why}. {lines}", evals


def verdict(claim: Claim, runs: dict, seeds, *, indicative: bool) -> tuple[str, str, list]:
  """The primary verdict (the headline) from the frozen thresholds: `(verdict, reason, evals)`."""
  v, why, evals = decide(claim.thresholds, runs, seeds)
  prefix = f"{INDICATIVE}: " if indicative else ""
  return v, prefix + why, evals


def extension_verdicts(claim: Claim, runs: dict, seeds, *, indicative: bool) -> list[dict]:
  """Each extension's `{"name", "verdict", "reason", "thresholds"}`, by the same rule."""
  out = []
  prefix = f"{INDICATIVE}: " if indicative else ""
  for ext in claim.extensions:
    v, why, _ = decide(ext.thresholds, runs, seeds)
    out.append({"name": ext.name, "verdict": v, "reason": prefix + why,
                "thresholds": [th.to_dict() for th in ext.thresholds]})
  return out


def environment() -> dict:
  import jax

  dev = jax.devices()[0]
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device": getattr(dev, "device_kind", str(dev))}


def git_revision() -> str | None:
  """`HEAD`'s commit (with `-dirty` for uncommitted changes), or None outside a git checkout."""
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                         timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return rev + ("-dirty" if dirty else "")


def new_run_dir(root: str, claim_id: str, quick: bool) -> str:
  """`root/claims/ID/<timestamp>[-quick]`, made unique with a counter if it exists."""
  base = os.path.join(root, "claims", claim_id, time.strftime("%Y%m%d-%H%M%S")
                      + ("-quick" if quick else ""))
  path, n = base, 1
  while os.path.exists(path):
    n += 1
    path = f"{base}-{n}"
  os.makedirs(path)
  return path


def model_card(name: str) -> dict:
  """`{"family", "model", "params"}` of base model `name`, from `experiments.models.model_card`.

  Example:
    >>> from experiments.claims.runner import model_card
    >>> model_card("mini")["family"], model_card("mini")["model"]
    ('gpt', 'mini')
  """
  from experiments import models  # deferred: reading a card trains nothing

  card_of = getattr(models, "model_card", None)
  if card_of is None:
    raise ValueError("experiments.models has no model_card(name); the scale axis reads each "
                     "base model's family and parameter count from it. Fix: run at one size "
                     "(drop --sizes) until the base-model family is in experiments.models.")
  card = card_of(name)
  get = card.get if isinstance(card, dict) else (lambda k: getattr(card, k, None))
  family, params = get("family"), get("params")
  if not isinstance(family, str) or not isinstance(params, (int, float)) or not params > 0:
    raise ValueError(f"experiments.models.model_card({name!r}) gave family={family!r}, "
                     f"params={params!r}. Fix: a family name and a positive parameter count.")
  return {"family": family, "model": name, "params": int(params)}


def budget(sizes: Sizes, params: int | None) -> dict | None:
  """`config.budget`: what each reported model trains on, per parameter; None if it trains none.

  Example:
    >>> from experiments.claims import muon
    >>> budget(muon.FULL, 858_880)
    {'train_tokens': 61440, 'params': 858880, 'tokens_per_param': 0.07153502235469448}
  """
  tokens = sizes.train_tokens()
  if tokens is None or not params:
    return None
  return {"train_tokens": int(tokens), "params": int(params),
          "tokens_per_param": tokens / params}


def scale_models(claim: Claim, quick: bool, sizes: Sequence[str] | None = None) -> tuple[str, ...]:
  """The base models a run measures, the registered one first; `()` for a one-size run.

  `sizes` (the command line's `--sizes`) overrides the claim's `scale_models`, and `()` asks
  for the registered size alone; a quick run uses one size unless `sizes` is given. The
  registered model (the run's `Sizes.model`, where the verdict is read) is added when missing.
  """
  names = tuple(sizes) if sizes is not None else (() if quick else claim.scale_models)
  if not names:
    return ()
  claim.check_scale_models(names, "--sizes" if sizes else "scale_models")
  registered = claim.sizes(quick).model
  ordered = (registered, *(n for n in names if n != registered))
  return ordered if len(ordered) > 1 else ()


def reading(claim: Claim, runs: dict, seeds) -> dict:
  """`{"verdict", "failed_controls"}`: the registered rule (`decide`) applied to one size's or
  length's runs, every threshold and control included; it never replaces the verdict."""
  v, _, evals = decide(claim.thresholds, runs, seeds)
  return {"verdict": v, "failed_controls": [th.name for th, ev in
                                            zip(claim.thresholds, evals, strict=True)
                                            if th.control and not ev["supports"]]}


def excluded(claim: Claim, runs: dict, seeds, row: dict) -> str | None:
  """Why an axis point is left out of its trend fit, or None.

  In order: a failed control (`row["failed_controls"]`); a censored seed (a value of the
  primary's metric, in its arm or its baseline, that meets the primary's `censored`
  condition: a sentinel or a floor, not a measurement); an effect that is not measured (no
  finite seed); a size trained below the regime's tokens per parameter
  (`row["under_trained"]`, set by `_flag_under_trained`).

  Example:
    >>> from experiments.claims.claim import Claim, Threshold
    >>> th = Threshold.beyond("ratio", "a", "steps", baseline="b", margin=0.1, censored=">= 1.5")
    >>> c = Claim(id="x", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
    ...           thresholds=(th,), trains=False, run=print)
    >>> runs = {"a": {0: {"steps": 1.5}, 1: {"steps": 0.4}},
    ...         "b": {0: {"steps": 1.0}, 1: {"steps": 1.0}}}
    >>> excluded(c, runs, (0, 1), {}), excluded(c, runs, (1,), {"failed_controls": ["edge"]})
    ("censored: a seed's a.steps >= 1.5", 'control failed: edge')
  """
  th = claim.primary
  if row.get("failed_controls"):
    return "control failed: " + ", ".join(row["failed_controls"])
  if runs is None:  # a kept row whose per-seed findings were not kept: what the row says
    finite = row.get("effect") is not None and math.isfinite(row["effect"])
    return row.get("under_trained") if finite else "not measured"
  if th.censored is not None:
    for arm in (th.arm, th.baseline):
      vals = [runs[arm][s].get(th.metric) for s in seeds] if arm in runs else []
      if any(v is not None and holds(th.censored, (float(v), float(v))) for v in vals):
        return f"censored: a seed's {arm}.{th.metric} {th.censored}"
  if not np.isfinite(paired_values(runs, th.arm, th.metric, th.baseline, seeds)).any():
    return "not measured"
  return row.get("under_trained")


def axis_fit(claim: Claim, rows: list[dict], runs_of, seeds, *, x: str, label: str | None = None,
             family: str | None = None, regime: bool = False) -> dict:
  """The one statistics block of every axis: flags why each row is left out, then fits.

  Args:
    claim: the claim; its `primary` threshold is the effect on the axis.
    rows: the axis's rows (`effect`, `ci`, the reading, the axis quantity `x`); each gains
      `excluded` (the reason) when it is left out of the fit (`excluded`), in place.
    runs_of: `runs_of(row) -> {arm: {seed: metrics}}` of that point, or None when its
      per-seed findings are not at hand (a kept row: then only what the row says is used).
    seeds: the seeds every point ran.
    x: the key of the axis quantity (`"params"`, `"T"`, `"train_tokens"`).
    label: the key naming a row in the fit's `excluded` list.
    family: the key of the family label (the scale axis), or None.
    regime: whether rows trained below `TOKENS_PER_PARAM` are left out (the scale axis).

  Returns:
    The fit fields of a results block (`stats.fit_trend`, `per_family` stored as `families`
    when there are two families or more).
  """
  if regime:
    _flag_under_trained(rows)
  for row in rows:
    why = excluded(claim, runs_of(row), seeds, row)
    row.pop("under_trained", None)
    row.pop("excluded", None)
    if why:
      row["excluded"] = why
  fit = fit_trend(rows, x, family=family, label=label)
  if family is not None and len({r[family] for r in rows}) < 2:
    fit.pop("per_family")
    fit.pop("pooled")
  return _fit_fields(fit)


def _fit_fields(fit: dict) -> dict:
  """The fit as a results block stores it: `per_family` is written as `families`."""
  out = {k: v for k, v in fit.items() if k != "per_family"}
  if "per_family" in fit:
    out["families"] = {f: {k: b[k] for k in ("slope", "slope_ci", "trend", "dof", "points")}
                       for f, b in fit["per_family"].items()}
  return out


def scale_block(claim: Claim, per_size: dict[str, dict], seeds, cards: dict[str, dict],
                tokens: dict[str, int | None] | None = None) -> dict:
  """`results.json`'s `scale`: the primary effect per size, its slope on log(params), the trend.

  Args:
    claim: the claim; its `primary` threshold (first non-control) is the effect that scales.
    per_size: `{model: runs}`, the runs of each size (`{arm: {seed: {metric: value}}}`).
    seeds: the seeds every size ran.
    cards: `{model: model_card(model)}`.
    tokens: `{model: tokens each model trains on}` (`Sizes.train_tokens`); where given, the
      size's row adds `tokens_per_param`.

  Returns:
    `{"sizes": [{"family", "model", "params", "effect", "ci", "verdict", "failed_controls"},
    ...] (by params), "slope", "slope_ci", "trend"}`: `effect`/`ci` are the paired mean and its
    95% t-interval at that size, `verdict` the registered rule at that size (`reading`); the
    slope is the least-squares fit of every (size, seed) point's effect on `log(params)` (per
    e-fold of parameters), its interval from t. With two families or more
    the slope is the common one with an intercept per family (`stats.ols_slope`'s `groups`),
    and `"families"` adds `{family: {"slope", "slope_ci", "trend"}}`, each family's own fit.
  """
  th = claim.primary
  rows = []
  for name, runs in per_size.items():
    v = paired_values(runs, th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    row = {**cards[name], "effect": m, "ci": list(ci) if ci else [None, None],
           **reading(claim, runs, seeds)}
    if (tokens or {}).get(name) is not None:
      row["tokens_per_param"] = tokens[name] / cards[name]["params"]
    rows.append(row)
  rows.sort(key=lambda r: (r["params"], r["family"], r["model"]))
  return {"sizes": rows, **axis_fit(claim, rows, lambda r: per_size[r["model"]], seeds,
                                    x="params", label="model", family="family", regime=True)}


def _flag_under_trained(rows: list[dict]) -> None:
  """Marks the rows trained on fewer tokens per parameter than the regime, when the regime
  holds at all: a size that could not afford it is shown apart and left out of the fit."""
  from experiments.models import TOKENS_PER_PARAM

  tpp = [r.get("tokens_per_param") for r in rows]
  if not any(t is not None and t >= TOKENS_PER_PARAM * 0.995 for t in tpp):
    return  # no size reaches the regime: a run registered before it, read as it was
  for r, t in zip(rows, tpp, strict=True):
    if t is not None and t < TOKENS_PER_PARAM * 0.995:
      r["under_trained"] = f"under-trained: {t:.3g} tokens per parameter"


def context_lengths(claim: Claim, quick: bool, lengths: Sequence[int] | None = None
                    ) -> tuple[int, ...]:
  """The lengths `T` a run also measures the primary effect at; `()` for none.

  `lengths` (the command line's `--lengths`) overrides the claim's `context_lengths`; a quick
  run measures none unless `lengths` is given.
  """
  Ts = tuple(lengths) if lengths else (() if quick else claim.context_lengths)
  if Ts:
    claim.check_context_lengths(Ts, "--lengths" if lengths else "context_lengths")
  return tuple(sorted(Ts))


def context_block(claim: Claim, per_length: dict[int, dict], seeds) -> tuple[list, dict]:
  """`results.json`'s `context` and the trend of the primary effect with `log T`.

  Args:
    claim: the claim; its `primary` threshold is the effect measured against `T`.
    per_length: `{T: runs}` (`{arm: {seed: {metric: value}}}`), the runs at each length.
    seeds: the seeds every length ran.

  Returns:
    `([{"T", "effect", "ci", "verdict", "failed_controls"}, ...] by T, {"slope", "slope_ci",
    "trend"})`: the paired mean and its 95% t-interval at each `T` and the registered rule
    there (`reading`); the least-squares slope of every (T, seed) point's effect
    on `log T` (per e-fold of context) and the trend it implies (`stats.trend`).
  """
  th = claim.primary
  rows = []
  for T in sorted(per_length):
    v = paired_values(per_length[T], th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    rows.append({"T": int(T), "effect": m, "ci": list(ci) if ci else [None, None],
                 **reading(claim, per_length[T], seeds)})
  return rows, axis_fit(claim, rows, lambda r: per_length[r["T"]], seeds, x="T")


def budget_multiples(claim: Claim, quick: bool, budgets: Sequence[int] | None = None
                     ) -> tuple[int, ...]:
  """The multiples `k` of the registered tokens a run also measures the primary effect at.

  `budgets` (the command line's `--budgets`) overrides the claim's `budgets`, and `()` asks
  for none; a quick run measures none unless `budgets` is given. `()` for none.
  """
  ks = tuple(budgets) if budgets is not None else (() if quick else claim.budgets)
  if ks:
    claim.check_budgets(ks, "--budgets" if budgets is not None else "budgets")
  return tuple(sorted(ks))


def budget_base(claim: Claim, registered: Sizes, quick: bool) -> Sizes:
  """The sizes the budget axis multiplies: the registered ones, on `claim.budget_model` when
  the claim names one (a quick run keeps its own model)."""
  if quick or claim.budget_model in (None, getattr(registered, "model", None)):
    return registered
  return dataclasses.replace(registered, model=claim.budget_model)


def sizes_at_budget(claim: Claim, base: Sizes, k: int) -> Sizes:
  """`claim.at_budget(base, k)`, checked: it must train on `k` times the tokens."""
  at = claim.at_budget(base, k)
  want, got = k * base.train_tokens(), at.train_tokens()
  if got != want:
    raise ValueError(f"Claim {claim.id!r}: at_budget(sizes, {k}) trains on {got} tokens, not "
                     f"{k} × {base.train_tokens()} = {want}. Fix: scale the steps (or "
                     "batch) by k and nothing else that sets the tokens.")
  return at


def budget_plan(claim: Claim, registered: Sizes, quick: bool, ks) -> tuple[Sizes, dict]:
  """`(base, {k: sizes})` of the budget axis, checked before any compute: the sizes it
  multiplies (`budget_base`) and each multiple's `at_budget` (a wrong one, or a budget model
  without a card, fails now)."""
  base = budget_base(claim, registered, quick)
  at_k = {k: sizes_at_budget(claim, base, k) for k in ks}
  if ks and base != registered:
    model_card(base.model)
  return base, at_k


def budget_block(claim: Claim, per_budget: dict[int, dict], seeds, base: Sizes) -> dict:
  """`results.json`'s `budgets`: the primary effect at each multiple of the tokens, its trend.

  Args:
    claim: the claim; its `primary` threshold is the effect measured against the budget.
    per_budget: `{k: runs}` (`{arm: {seed: {metric: value}}}`); `1` is the run at the
      registered tokens (on `base`).
    seeds: the seeds every budget ran.
    base: the sizes the axis multiplies (`budget_base`): `k` times its `train_tokens()` per
      reported model, over its model's parameters (no `tokens_per_param` when it names no
      model), and its `model`.

  Returns:
    `{"model", "runs": [{"multiple", "train_tokens", "tokens_per_param", "effect", "ci",
    "verdict", "failed_controls"}, ...] (by k), "slope", "slope_ci", "trend"}`: the paired
    mean and its 95% t-interval at each budget and the registered rule there (`reading`);
    the slope of every (budget, seed) point's effect on `log(tokens)` (per e-fold of
    tokens), with one intercept per seed: a seed's models share their init and first
    batches across budgets, so the fit pairs them (`stats.ols_slope`'s `groups`).
  """
  th = claim.primary
  tokens = {k: k * base.train_tokens() for k in per_budget}
  params, model = _params(base), getattr(base, "model", None)
  rows = []
  for k in sorted(per_budget):
    v = paired_values(per_budget[k], th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    rows.append({"multiple": int(k), "train_tokens": int(tokens[k]),
                 "tokens_per_param": tokens[k] / params if params else None,
                 "effect": m, "ci": list(ci) if ci else [None, None],
                 **reading(claim, per_budget[k], seeds)})
  return {"model": model, "runs": rows, **axis_fit(
      claim, rows, lambda r: per_budget[r["multiple"]], seeds, x="train_tokens",
      label="multiple")}


def _run_once(claim: Claim, sizes: Sizes, *, quick: bool, seeds, run_dir: str, log,
              saved: str | None = None, reuse: bool = False) -> dict:
  """`claim.run` at `sizes`; with `saved`, its findings are written there (and reused if equal).

  A rerun (`reuse`) loads `saved` instead of running when it records the same claim, quick
  flag, seeds and sizes.
  """
  key = jsonio.strict({"claim": claim.id, "quick": quick, "seeds": list(seeds),
                       "sizes": sizes.to_dict()})
  if saved and reuse and os.path.exists(saved):
    obj = jsonio.load_strict(saved)
    if obj.get("key") == key:
      log(f"[{claim.id}] reusing {saved}")
      found = obj["findings"]
      found["runs"] = {arm: {int(s): m for s, m in per.items()}
                       for arm, per in found["runs"].items()}
      return found
  findings = claim.run(Spec(quick=quick, seeds=seeds, run_dir=run_dir, sizes=sizes, log=log))
  if "config" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'config'; the runner writes the "
                     "config from the claim's sizes. Fix: declare what the run reads in its "
                     "Sizes dataclass; return facts about the setup (model configs, tuned "
                     "rates) under 'setup'.")
  if "context" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'context'; the runner computes it "
                     "from the lengths it runs. Fix: declare context_lengths and at_length in "
                     "the Claim (or pass --lengths) and drop 'context' from the findings.")
  if "scale" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'scale'; the runner computes it "
                     "from the sizes it runs. Fix: declare scale_models in the Claim (or pass "
                     "--sizes) and drop 'scale' from the findings.")
  if saved:
    os.makedirs(os.path.dirname(saved), exist_ok=True)
    try:
      jsonio.dump_strict({"key": key, "findings": findings}, saved)
    except (TypeError, ValueError) as e:  # findings that are not JSON: run again on a rerun
      log(f"[{claim.id}] could not save {saved} ({e}); a rerun will run this size again")
  return findings


# The committed results (`python -m experiments.claims.table` reads them; `--keep` writes them).
RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "results")


def saved_findings(run_dir: str) -> list[str]:
  """The findings a run saved for `--resume`, as paths relative to `run_dir`.

  The registered run's `findings.json` (saved when the run has lengths or budgets but no
  sizes), and each `size-<model>/`, `context-T<T>/` and `budget-x<k>/findings.json`, sorted.
  """
  subs = sorted(d for d in os.listdir(run_dir) if d.startswith(("size-", "context-T",
                                                                  "budget-x"))
                and os.path.isdir(os.path.join(run_dir, d)))
  found = [os.path.join(d, "findings.json") for d in ["", *subs]]
  return [f for f in found if os.path.isfile(os.path.join(run_dir, f))]


def _resume_dir(path: str, claim: Claim, quick: bool, seeds, root: str) -> str:
  """Checks that `path` is a run folder of this claim, quick flag and seeds; returns the folder
  the resumed run writes: `path` itself, or for a kept result (`results/<id>/`, which only
  `--keep` writes) a new run folder under `root` holding a copy of its saved findings."""
  frozen = os.path.join(path, "claim.json")
  if not os.path.exists(frozen):
    raise ValueError(f"--resume {path}: no claim.json there. Fix: give the folder of an earlier "
                     f"run of {claim.id!r} (runs/claims/{claim.id}/<run-id>).")
  old = jsonio.load_strict(frozen)
  if (old.get("id"), old.get("quick"), old.get("seeds")) != (claim.id, quick, list(seeds)):
    raise ValueError(f"--resume {path}: that run is claim {old.get('id')!r}, quick="
                     f"{old.get('quick')}, seeds {old.get('seeds')}; this one is {claim.id!r}, "
                     f"quick={quick}, seeds {list(seeds)}. Fix: resume with the same settings.")
  kept = os.path.realpath(RESULTS_DIR)
  if os.path.commonpath([os.path.realpath(path), kept]) != kept:
    return path
  run_dir = new_run_dir(root, claim.id, quick)
  for name in ["results.json", *saved_findings(path)]:
    if os.path.exists(os.path.join(path, name)):
      os.makedirs(os.path.dirname(os.path.join(run_dir, name)), exist_ok=True)
      shutil.copy2(os.path.join(path, name), os.path.join(run_dir, name))
  return run_dir


def _params(sizes: Sizes) -> int | None:
  """The parameters of the shape a run trains (its `model`'s card), None when it names none."""
  model = getattr(sizes, "model", None)
  return model_card(model)["params"] if model and sizes.train_tokens() is not None else None


def _results(claim: Claim, *, quick: bool, seeds, sizes: Sizes, findings: dict, runs: dict,
             runtime: float, scale: dict | None, budgets: dict | None = None
             ) -> tuple[dict, list]:
  """The `results.json` dict of a run (validated) and the primary thresholds' evaluations.

  `budgets` (`budget_block`) is written only when the run measured other budgets, so a run
  without them keeps the keys it always had."""
  indicative = quick or len(seeds) < 3
  v, reason, evals = verdict(claim, runs, seeds, indicative=indicative)
  extensions = extension_verdicts(claim, runs, seeds, indicative=indicative)
  effects = [effect(runs, seeds, th.name, th.arm, th.baseline, th.metric)
             for th in claim.thresholds + tuple(t for e in claim.extensions for t in e.thresholds)]
  names = {e["name"] for e in effects}
  for name, arm, baseline, metric in findings.get("effects", ()):
    if name not in names:
      effects.append(effect(runs, seeds, name, arm, baseline, metric))
  results = {
      "claim": claim.id, "quick": quick, "seeds": list(seeds),
      "tuning_seeds": list(claim.tuning_seeds),
      "config": {"sizes": sizes.to_dict(), "setup": findings.get("setup", {}),
                 **({"budget": spent} if (spent := budget(sizes, _params(sizes))) else {})},
      "arms": {arm: arm_summary(per_seed) for arm, per_seed in runs.items()},
      "effects": effects, "verdict": v, "reason": reason,
      "thresholds": [th.to_dict() for th in claim.thresholds], "extensions": extensions,
      "scale": scale, "context": findings.get("context"),
      "anchors": [a.to_dict() for a in claim.anchors], "runtime_s": runtime,
      "env": environment(), "git": git_revision(),
      **({"budgets": budgets} if budgets else {}),
      **({"context_trend": findings["context_trend"]} if findings.get("context_trend") else {}),
      **({"version": claim.version} if claim.version > 1 else {}),
  }
  results["config"]["regime"] = regime(claim, sizes, seeds, runs)
  results = jsonio.strict(results)
  validate_results(results)
  return results, evals


def regime(claim: Claim, sizes: Sizes, seeds, runs: dict) -> dict:
  """`config.regime`: the registered size's model, parameters, tokens per parameter and the
  held-out bits per byte its models reach (None where the run does not measure it).

  Tokens per parameter are what each reported model trains on (`budget`) for a claim that
  trains, else the base model's own recipe; bits per byte come from `claim.bits_metric`, else
  from the stored base models' held-out loss (`experiments.models.heldout_bits`).
  """
  from experiments import models

  name = getattr(sizes, "model", None)
  known = name in models.RECIPES or name in models.SHAPES
  params = model_card(name)["params"] if known else None
  spent = budget(sizes, _params(sizes))
  tpp = spent["tokens_per_param"] if spent else (
      models.model_card(name).get("tokens_per_param") if known else None)
  bits = None
  if claim.bits_metric is not None:
    arm, metric = claim.bits_metric
    vals = [runs[arm][s].get(metric) for s in seeds if arm in runs]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    bits = float(np.mean(vals)) / math.log(2) if vals else None
  elif known and not spent:
    bits = models.heldout_bits(name, seeds)
  return {"model": name, "params": params, "tokens_per_param": tpp, "bits_per_byte": bits}


BUDGET_NOTE = ("- The runs on more tokens ran in `budget-x<k>/` (their findings and figures); "
               "they feed only the trend with the budget, never the verdict.")


def _measure(claim: Claim, sizes: Sizes, *, label: str, here: str, quick: bool, seeds, log,
             reuse: bool, failed: list[str]) -> dict | None:
  """One extra run (a size, a length or a budget) in folder `here`: its `{arm: {seed:
  metrics}}`, or None when it crashed (logged, and a line for the report added to `failed`)."""
  os.makedirs(here, exist_ok=True)
  try:
    found = _run_once(claim, sizes, quick=quick, seeds=seeds, run_dir=here, log=log,
                      saved=os.path.join(here, "findings.json"), reuse=reuse)
    return {arm: {s: per_seed[s] for s in seeds} for arm, per_seed in found["runs"].items()}
  except Exception as e:  # one size's, length's or budget's crash must not lose the others
    traceback.print_exc()
    log(f"[{claim.id}] {label} FAILED ({type(e).__name__}: {e}); the others are kept")
    failed.append(f"- {label[0].upper() + label[1:]} failed and is left out of the trend: "
                  f"{type(e).__name__}: {e}")
    return None


def _budget_axis(claim: Claim, base: Sizes, at_k: dict, measure, log, at_1: dict | None
                 ) -> dict[int, dict]:
  """`{k: runs}` of the budget axis: 1× (`at_1`, a run already made at `base`, else run into
  `budget-x1/`), then each `k` of `at_k` into `budget-x<k>/`; a crashed budget is left out."""
  if not at_k:
    return {}
  on = f" on `{base.model}`" if getattr(base, "model", None) else ""
  per_budget = {}
  if at_1 is not None:
    per_budget[1] = at_1
  else:
    log(f"[{claim.id}] budget 1×{on}: the registered tokens ({base.train_tokens():,} per model)")
    got = measure(f"budget ×1{on}", base, "budget-x1")
    if got is not None:
      per_budget[1] = got
  for i, (k, at) in enumerate(sorted(at_k.items()), 1):
    log(f"[{claim.id}] budget {i}/{len(at_k)}: {k}× the registered tokens{on} "
        f"({at.train_tokens():,} per model)")
    got = measure(f"budget ×{k}{on}", at, f"budget-x{k}")
    if got is not None:
      per_budget[k] = got
  return per_budget


def run_claim(claim: Claim, *, quick: bool = False, seeds: Sequence[int] | None = None,
              root: str = "runs", log: Callable[[str], None] = print,
              sizes: Sequence[str] | None = None, resume: str | None = None,
              lengths: Sequence[int] | None = None,
              budgets: Sequence[int] | None = None) -> tuple[dict, str]:
  """Runs `claim` and writes its folder; returns `(results, run_dir)`.

  At several base models (the claim's `scale_models`, or `sizes`), the registered size (the
  run's `Sizes.model`) runs first, into the run folder, and its `results.json` and report are
  written at once; the verdict and every threshold are read there and only there. Each other
  size then runs on the same seeds into `run_dir/size-<model>/` (its own figures), every
  size's findings are saved as `size-<model>/findings.json` as it finishes, and a size that
  crashes is logged and left out (the others are kept). Finally `results.json` gains `scale`
  (`scale_block`) and the report its trend and `scale.png`.

  At several lengths (the claim's `context_lengths`, or `lengths`), the claim runs again on
  the same seeds at `claim.at_length(sizes, T)` for each `T`, into `run_dir/context-T<T>/`
  (crashes kept out the same way); `results.json` gains `context` (`context_block`: the
  primary effect at each `T`) and the report its trend with `log T` and `context.png`.

  At several budgets (the claim's `budgets`, or `budgets`), the claim runs again on the same
  seeds at `claim.at_budget(sizes, k)` for each multiple `k` of the registered tokens, into
  `run_dir/budget-x<k>/` (crashes kept out the same way); `results.json` gains `budgets`
  (`budget_block`) and the report its trend with `log(tokens)` and `budget.png`.

  Args:
    claim: a built `Claim`.
    quick: small sizes and one seed; the verdict is labelled indicative.
    seeds: the seeds (default: the claim's pre-registered `seeds`; quick: the first of them).
      Other seeds make an addendum: its verdict is reported, the registered one stays.
    root: the `runs` folder.
    log: where progress lines go.
    sizes: base models to measure the primary effect on (overrides `scale_models`; `()`:
      the registered size alone; a quick run measures one size unless this is given).
    resume: an earlier run folder of this claim (same quick flag and seeds) to finish: sizes
      and lengths whose `findings.json` records the same sizes and seeds are reused. A kept
      result (`results/<id>/`, with the findings `--keep` copied) is not written to: its
      findings are copied into a new run folder under `root`, which the run finishes.
    lengths: context lengths to measure the primary effect at (overrides `context_lengths`;
      a quick run measures none unless this is given).
    budgets: multiples of the registered tokens to measure the primary effect at (overrides
      the claim's `budgets`; `()`: none; a quick run measures none unless this is given).

  Returns:
    The `results.json` dict and the run folder.
  """
  if not claim.built:
    raise ValueError(f"claim {claim.id!r} is not built yet; nothing to run. Fix: choose a built "
                     "claim (python -m experiments tour lists them).")
  seeds = tuple(int(s) for s in (seeds if seeds else (claim.seeds[:1] if quick
                                                      else claim.seeds)))
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"--seeds {list(seeds)} repeats a seed. Fix: give distinct seeds.")
  tuning = sorted(set(seeds) & set(claim.tuning_seeds))
  if tuning:
    raise ValueError(f"--seeds {tuning}: tuning seeds of {claim.id!r} {list(claim.tuning_seeds)} "
                     "are never reported. Fix: report other seeds.")
  registered = claim.sizes(quick)
  names = scale_models(claim, quick, sizes)
  Ts = context_lengths(claim, quick, lengths)
  ks = budget_multiples(claim, quick, budgets)
  base, at_k = budget_plan(claim, registered, quick, ks)  # a wrong at_budget fails now
  cards = {n: model_card(n) for n in names}  # before any compute: a missing card fails now
  run_dir = (_resume_dir(resume, claim, quick, seeds, root) if resume
             else new_run_dir(root, claim.id, quick))
  jsonio.dump_strict({**claim.to_dict(), "quick": quick, "seeds": list(seeds)},
                     os.path.join(run_dir, "claim.json"))

  def saved(name):
    """Where a size's findings are kept for `resume`: none for a one-size, one-length run."""
    if names:
      return os.path.join(run_dir, f"size-{name}", "findings.json")
    return os.path.join(run_dir, "findings.json") if Ts or ks else None

  def head(i, name):
    c = cards[name]
    return (f"[{claim.id}] size {i}/{len(names)}: {name} ({c['family']}, "
            f"{report.params_text(c['params'])} params)")

  # A resumed run's runtime adds the earlier invocation's (what its saved sizes cost).
  earlier = os.path.join(run_dir, "results.json")
  before = (float(jsonio.load_strict(earlier).get("runtime_s") or 0.0)
            if resume and os.path.exists(earlier) else 0.0)
  start = time.perf_counter() - before
  if names:
    log(head(1, names[0]) + ": the registered size, where the verdict is read")
  findings = _run_once(claim, registered, quick=quick, seeds=seeds, run_dir=run_dir, log=log,
                       saved=saved(names[0] if names else ""), reuse=bool(resume))
  runs = {arm: {s: per_seed[s] for s in seeds} for arm, per_seed in findings["runs"].items()}
  results, evals = _results(claim, quick=quick, seeds=seeds, sizes=registered,
                            findings=findings, runs=runs, runtime=time.perf_counter() - start,
                            scale=None)
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
  report.write_claim_report(claim, results, evals, findings, run_dir)
  if not names and not Ts and not ks:
    return results, run_dir

  failed: list[str] = []

  def measure(label, sizes_here, sub):
    return _measure(claim, sizes_here, label=label, here=os.path.join(run_dir, sub),
                    quick=quick, seeds=seeds, log=log, reuse=bool(resume), failed=failed)

  per_size, per_length = ({names[0]: runs} if names else {}), {}
  for i, name in enumerate(names[1:], 2):
    log(head(i, name))
    got = measure(f"size `{name}`", dataclasses.replace(registered, model=name), f"size-{name}")
    if got is not None:
      per_size[name] = got
  for i, T in enumerate(Ts, 1):
    at_T = claim.at_length(registered, T)
    where = f" on `{at_T.model}`" if hasattr(at_T, "model") else ""
    if at_T == registered:  # the registered run already is this length's run: reuse it
      log(f"[{claim.id}] context {i}/{len(Ts)}: T = {T} is the registered run; reused")
      per_length[T] = runs
      continue
    log(f"[{claim.id}] context {i}/{len(Ts)}: T = {T}{where}")
    got = measure(f"length T = {T}", at_T, f"context-T{T}")
    if got is not None:
      per_length[T] = got
  per_budget = _budget_axis(claim, base, at_k, measure, log, at_1=(
      runs if base == registered else per_size.get(getattr(base, "model", None))))
  notes = list(findings.get("notes", ())) + failed
  figures = list(findings.get("figures", ()))
  scale = context = context_trend = budget_trend = None
  if len(per_size) > 1:
    scale = scale_block(claim, per_size, seeds, cards, {
        n: dataclasses.replace(registered, model=n).train_tokens() for n in per_size})
    figures.append(report.scale_figure(claim, scale, run_dir, registered.model))
    notes.append(f"- Sizes other than the registered `{registered.model}` ran in "
                 "`size-<model>/` (their findings and figures); they feed only the trend.")
  if per_length:
    context, context_trend = context_block(claim, per_length, seeds)
    models_at = sorted({getattr(claim.at_length(registered, T), "model", "") for T in per_length}
                       - {""})
    figures.append(report.context_figure(claim, context, context_trend, run_dir, models_at))
    notes.append("- The runs at other lengths ran in `context-T<T>/` (their findings and "
                 "figures); they feed only the trend with context, never the verdict.")
  if 1 in per_budget and len(per_budget) > 1:
    budget_trend = budget_block(claim, per_budget, seeds, base)
    figures.append(report.budget_figure(claim, budget_trend, run_dir))
    notes.append(BUDGET_NOTE)
  results, evals = _results(claim, quick=quick, seeds=seeds, sizes=registered,
                            findings={**findings, "context": context,
                                      "context_trend": context_trend}, runs=runs,
                            runtime=time.perf_counter() - start, scale=scale,
                            budgets=budget_trend)
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
  report.write_claim_report(claim, results, evals, {**findings, "notes": notes,
                                                    "figures": figures,
                                                    "context_trend": context_trend}, run_dir)
  return results, run_dir


def add_budgets(claim: Claim, onto: str, *, budgets: Sequence[int] | None = None,
                root: str = "runs", log: Callable[[str], None] = print) -> tuple[dict, str]:
  """Runs only the budget axis of `claim` and adds it to the finished run `onto`.

  For a result whose verdict, sizes and lengths are already measured (a run folder, or a
  kept `results/<id>/`, which is copied into a new run folder and never written to): the
  budget axis runs on the same seeds (its 1× at `claim.budget_model` into `budget-x1/`, or
  the registered run's per-seed metrics from `results.json` when the axis trains the
  registered size), then each multiple into `budget-x<k>/`; budgets saved there already are
  reused. `results.json` keeps every key it had and gains `budgets`, with the `git` and
  `runtime_s` of this invocation; `report.md` gains the budget section (replacing one an
  earlier call added) and `budget.png`. The verdict is never read from these runs.

  Args:
    claim: a built `Claim` with `at_budget`.
    onto: the run folder (`results.json`, `report.md`) of a full or quick run of `claim`.
    budgets: multiples of the registered tokens (default: the claim's `budgets`).
    root: the `runs` folder (for the copy of a kept result).
    log: where progress lines go.

  Returns:
    The updated `results.json` dict and the run folder.
  """
  path = os.path.join(onto, "results.json")
  if not os.path.exists(path):
    raise ValueError(f"--onto {onto}: no results.json there. Fix: give a finished run of "
                     f"{claim.id!r} (runs/claims/{claim.id}/<run-id>, or results/{claim.id}).")
  old = jsonio.load_strict(path)
  validate_results(old)
  if old["claim"] != claim.id:
    raise ValueError(f"--onto {onto}: that is a run of {old['claim']!r}, not {claim.id!r}. "
                     "Fix: give a run of this claim.")
  quick, seeds = old["quick"], tuple(old["seeds"])
  ks = budget_multiples(claim, quick, budgets if budgets is not None else claim.budgets)
  if not ks:
    asked = ("--budgets asks for none" if budgets is not None
             else f"{claim.id!r} declares no budgets")
    raise ValueError(f"--onto adds the budget axis, but {asked}. Fix: pass --budgets 4 (a "
                     "multiple of the registered tokens above 1).")
  registered = claim.sizes(quick)
  if old["config"]["sizes"] != jsonio.strict(registered.to_dict()):
    raise ValueError(f"--onto {onto}: that run's sizes {old['config']['sizes']} are not the "
                     f"claim's registered {registered.to_dict()} (the claim changed since). "
                     f"Fix: run the claim again: python -m experiments claim {claim.id}.")
  frozen = jsonio.load_strict(os.path.join(onto, "claim.json")) if os.path.exists(
      os.path.join(onto, "claim.json")) else {}
  now = jsonio.strict(claim.to_dict())

  def verdict_part(ths):  # `censored` decides only which points a trend fits, not a verdict
    return [{k: v for k, v in th.items() if k != "censored"} for th in ths or ()]
  changed = [k for k in ("thresholds", "extensions", "seeds", "tuning_seeds")
             if (verdict_part(frozen.get(k)) != verdict_part(now[k]) if k == "thresholds"
                 else frozen.get(k) != now[k])]
  if changed:
    raise ValueError(f"--onto {onto}: the claim's {changed} changed since that run, so its "
                     f"verdict is not this claim's. Fix: run the claim again: python -m "
                     f"experiments claim {claim.id}.")
  base, at_k = budget_plan(claim, registered, quick, ks)
  run_dir = _resume_dir(onto, claim, quick, seeds, root)
  if run_dir != onto:  # a kept result: its report and figures too, so `--keep` keeps them
    for name in os.listdir(onto):
      if os.path.isfile(os.path.join(onto, name)) and not os.path.exists(
          os.path.join(run_dir, name)):
        shutil.copy2(os.path.join(onto, name), os.path.join(run_dir, name))
  jsonio.dump_strict({**frozen, **now, "quick": quick, "seeds": list(seeds)},
                     os.path.join(run_dir, "claim.json"))  # the claim as it ran: + budget axis
  start = time.perf_counter()
  failed: list[str] = []

  def measure(label, sizes_here, sub):
    return _measure(claim, sizes_here, label=label, here=os.path.join(run_dir, sub),
                    quick=quick, seeds=seeds, log=log, reuse=True, failed=failed)

  at_1 = None
  if base == registered:  # the registered run's own per-seed metrics, as it wrote them
    at_1 = {arm: {int(s): {m: (math.nan if v is None else v) for m, v in per.items()}
                  for s, per in body["runs"].items()} for arm, body in old["arms"].items()}
  per_budget = _budget_axis(claim, base, at_k, measure, log, at_1)
  if 1 not in per_budget or len(per_budget) < 2:
    lost = "its 1× run" if 1 not in per_budget else "every larger budget"
    raise RuntimeError(f"[{claim.id}] the budget axis lost {lost} ({' '.join(failed)}); "
                       f"nothing was added to {run_dir}. Fix: see the traceback above, then "
                       "run the same command again (what was saved is reused).")
  block = budget_block(claim, per_budget, seeds, base)
  block.update(git=git_revision(), runtime_s=time.perf_counter() - start)
  results = jsonio.strict({**old, "budgets": block})
  validate_results(results)
  report.budget_figure(claim, block, run_dir)
  report.add_budget_report(claim, results, os.path.join(run_dir, "report.md"),
                           [BUDGET_NOTE, *failed])
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
  return results, run_dir
