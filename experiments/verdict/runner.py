"""The claims runner: runs a claim at its registered sizes and along its axes, writes its folder.

    python -m experiments claim ID [--quick] [--seeds 0 1 2] [--sizes mini,small,base]

A `Claim` is frozen before it runs: its definition is written to `claim.json` first, then
`claim.run(spec)` measures, per arm and seed, a flat dict of metrics. `results.results_of` turns
those into arm means and standard deviations over seeds, paired effects (`arm − baseline`
seed by seed, since arms with the same seed share initialisation and data stream) with 95%
t-intervals, and the verdict (`rule.decide`, the one rule). The run writes
`runs/claims/ID/<run-id>/{claim.json, results.json, report.md, *.png}`; `results.json` is
strict JSON (`null`, never `NaN`) and `schema.validate_results` checks it.

The axes (`experiments.verdict.axes`): the registered size runs first and its verdict is read
there alone; each other size, length and budget then runs on the same seeds into its own
subfolder, and feeds only its axis's trend. `add_budgets` adds the budget axis onto a
finished result. See `run_claim`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
import traceback
from collections.abc import Callable, Sequence

from experiments import jsonio
from experiments.verdict import folders, report
from experiments.verdict.axes import (
  budget_block,
  budget_multiples,
  budget_plan,
  context_block,
  context_lengths,
  model_card,
  scale_block,
  scale_models,
)
from experiments.verdict.cells import params_text
from experiments.verdict.claim import Claim
from experiments.verdict.figures import budget_figure, context_figure, scale_figure
from experiments.verdict.results import results_of
from experiments.verdict.schema import validate_results
from experiments.verdict.sizes import Sizes, Spec


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
  run_dir = (folders.resume_dir(resume, claim, quick, seeds, root) if resume
             else folders.new_run_dir(root, claim.id, quick))
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
            f"{params_text(c['params'])} params)")

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
  results, evals = results_of(claim, quick=quick, seeds=seeds, sizes=registered,
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
    figures.append(scale_figure(claim, scale, run_dir, registered.model))
    notes.append(f"- Sizes other than the registered `{registered.model}` ran in "
                 "`size-<model>/` (their findings and figures); they feed only the trend.")
  if per_length:
    context, context_trend = context_block(claim, per_length, seeds)
    models_at = sorted({getattr(claim.at_length(registered, T), "model", "") for T in per_length}
                       - {""})
    figures.append(context_figure(claim, context, context_trend, run_dir, models_at))
    notes.append("- The runs at other lengths ran in `context-T<T>/` (their findings and "
                 "figures); they feed only the trend with context, never the verdict.")
  if 1 in per_budget and len(per_budget) > 1:
    budget_trend = budget_block(claim, per_budget, seeds, base)
    figures.append(budget_figure(claim, budget_trend, run_dir))
    notes.append(BUDGET_NOTE)
  results, evals = results_of(claim, quick=quick, seeds=seeds, sizes=registered,
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
  run_dir = folders.resume_dir(onto, claim, quick, seeds, root)
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
  block.update(git=folders.git_revision(), runtime_s=time.perf_counter() - start)
  results = jsonio.strict({**old, "budgets": block})
  validate_results(results)
  budget_figure(claim, block, run_dir)
  report.add_budget_report(claim, results, os.path.join(run_dir, "report.md"),
                           [BUDGET_NOTE, *failed])
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
  return results, run_dir
