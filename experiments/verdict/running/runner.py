"""The claims runner: runs a claim at its registered sizes and along its axes, writes its folder.

    python -m experiments claim ID [--quick] [--seeds 0 1 2] [--sizes mini,small,base]

A `Claim` is frozen before it runs: its definition is written to `claim.json` first, then
`claim.run(spec)` measures, per arm and seed, a flat dict of metrics. `results.results_of` turns
those into arm means and standard deviations over seeds, paired effects (`arm − baseline`
seed by seed, since arms with the same seed share initialisation and data stream) with 95%
t-intervals, and the verdict (`rule.decide`, the one rule). The run writes
`runs/claims/ID/<run-id>/{claim.json, results.json, report.md, *.png}`; `results.json` is
strict JSON (`null`, never `NaN`) and `schema.validate_results` checks it.

The axes (`Claim.axes`, each an `experiments.verdict.declare.axis.Axis`): the registered sizes run
first and the verdict is read there alone; then one loop runs each axis's other points on the
same seeds, each into its own subfolder, and each axis becomes one block of `results.json`'s
`axes`, one section of the report and one figure. `run_claim(resume=RUN, axes=...)` adds axes
onto a finished result. See `run_claim`.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence

from experiments import jsonio
from experiments.verdict.declare.claim import Claim
from experiments.verdict.declare.sizes import Sizes, Spec
from experiments.verdict.render import report
from experiments.verdict.render.figures import axis_figure
from experiments.verdict.render.findings import rendered
from experiments.verdict.running import folders, history
from experiments.verdict.running.results import results_of
from experiments.verdict.running.schema import load_results, validate_results


def _run_once(claim: Claim, sizes: Sizes, *, quick: bool, seeds, run_dir: str, log,
              saved: str | None = None, reuse: bool = False) -> dict:
  """`claim.run` at `sizes`, its declared notes and figures rendered (`render.findings`); with
  `saved`, its findings are written there (and reused if equal).

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
  findings = rendered(findings, run_dir)  # the notes and figures it declared, as data
  if "config" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'config'; the runner writes the "
                     "config from the claim's sizes. Fix: declare what the run reads in its "
                     "Sizes dataclass; return facts about the setup (model configs, tuned "
                     "rates) under 'setup'.")
  if "context" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'context'; the runner computes it "
                     "from the lengths it runs. Fix: declare the context axis in the Claim (or "
                     "pass --axes context=...) and drop 'context' from the findings.")
  if "scale" in findings or "axes" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'scale' or 'axes'; the runner "
                     "computes them from the points it runs. Fix: declare the axes in the Claim "
                     "(or pass --axes NAME=...) and drop them from the findings.")
  if saved:
    os.makedirs(os.path.dirname(saved), exist_ok=True)
    try:
      jsonio.dump_strict({"key": key, "findings": findings}, saved)
    except (TypeError, ValueError) as e:  # findings that are not JSON: run again on a rerun
      log(f"[{claim.id}] could not save {saved} ({e}); a rerun will run this size again")
  return findings


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
    failed.append(_failure(label, f"{type(e).__name__}: {e}"))
    return None


def _failure(label: str, why: str) -> str:
  """The report's note on a point that crashed (`label`: e.g. "size `mini`")."""
  return f"- {label[0].upper() + label[1:]} failed and is left out of the trend: {why}"


def _key(sizes: Sizes) -> str:
  """Sizes as a key: two points with equal sizes are one run."""
  return jsonio.dumps_line(sizes.to_dict())


def plan_axes(claim: Claim, registered: Sizes, quick: bool,
              asked: Mapping[str, Sequence] | None = None, only: bool = False) -> list[tuple]:
  """`[(axis, [(value, sizes), ...]), ...]`: the axes a run measures and their points, checked
  before any compute. `asked` (`--axes NAME=v1,v2`) overrides the named axes' values (`()`:
  none); the others run at their declared values (none in a quick run), or, with `only`, not
  at all."""
  names = [a.name for a in claim.axes if not only]
  names += [n for n in (asked or {}) if n not in names]
  plans = []
  for name in names:
    axis = claim.axis(name)
    points = axis.points(claim, registered, quick,
                         axis.chosen(claim, quick, (asked or {}).get(name)))
    if points:
      plans.append((axis, points))
  return plans


def run_claim(claim: Claim, *, quick: bool = False, seeds: Sequence[int] | None = None,
              root: str = "runs", log: Callable[[str], None] = print,
              resume: str | None = None, axes: Mapping[str, Sequence] | None = None,
              sizes: Sequence[str] | None = None, lengths: Sequence[int] | None = None,
              budgets: Sequence[int] | None = None, keep: bool = False,
              results_root: str = folders.RESULTS_DIR) -> tuple[dict, str]:
  """Runs `claim` and writes its folder; returns `(results, run_dir)`.

  The registered sizes run first, into the run folder, and `results.json` and the report are
  written at once: the verdict and every threshold are read there and only there. Then one
  loop runs each axis (`Claim.axes`, or those `axes` names): each of its points on the same
  seeds into `run_dir/<axis.folder(value)>/` (its findings saved there as it finishes, its
  own figures), a point whose sizes were measured already (the registered ones, or another
  axis's) reused, a point that crashes logged and left out (the others are kept). Each axis
  with enough points becomes a block of `results.json`'s `axes` (`Axis.block`), a section
  and a trend sentence of the report, and a figure (`<axis>.png`).

  Args:
    claim: a built `Claim`.
    quick: small sizes and one seed; the verdict is labelled indicative.
    seeds: the seeds (default: the claim's pre-registered `seeds`; quick: the first of them).
      Other seeds make an addendum: its verdict is reported, the registered one stays.
    root: the `runs` folder.
    log: where progress lines go.
    resume: an earlier run folder of this claim (same quick flag and seeds) to finish or add
      to: points whose `findings.json` records the same sizes and seeds are reused, and a
      finished registered run (its `results.json`, the claim's thresholds unchanged) is not
      run again; axes it holds that this run does not measure are kept. A kept result
      (`results/<id>/`) is not written to: it is copied into a new run folder under `root`.
    axes: `{name: values}` (`--axes NAME=v1,v2`): measure these axes at these values (`()`:
      none), the others at their declared values; added onto a finished run (`resume`), only
      these.
    sizes, lengths, budgets: the older spelling of `axes={"scale": ..., "context": ...,
      "budget": ...}`.
    keep: the run is to be kept (`--keep`): before any compute, `history.check_fresh`
      refuses a new version on seeds an earlier kept version ran on; at the end the result
      kept now is recorded in the history (`history.record`), so the keep may replace it.
    results_root: the kept results (`results/`) `keep` reads and records in.

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
  if keep:
    history.check_fresh(claim, seeds, results_root)
  asked = {name: tuple(v) for name, v in (axes or {}).items()}
  for name, values in (("scale", sizes), ("context", lengths), ("budget", budgets)):
    if values is not None:
      asked[name] = tuple(values)
  registered = claim.sizes(quick)
  only = bool(axes) and bool(resume) and os.path.exists(os.path.join(resume, "results.json"))
  plans = plan_axes(claim, registered, quick, asked, only)  # a wrong axis fails now
  run_dir = (folders.resume_dir(resume, claim, quick, seeds, root) if resume
             else folders.new_run_dir(root, claim.id, quick))
  old = _finished(claim, run_dir, registered, resume) if resume else None
  ran = os.path.join(resume or "", "claim.json")
  frozen = jsonio.load_strict(ran) if old and os.path.exists(ran) else {}
  jsonio.dump_strict({**frozen, **claim.to_dict(), "quick": quick, "seeds": list(seeds)},
                     os.path.join(run_dir, "claim.json"))
  start = time.perf_counter()
  if old is None:
    at = next((os.path.join(run_dir, axis.folder(v), "findings.json") for axis, points in plans
               for v, here in points if here == registered), None)
    findings = _run_once(claim, registered, quick=quick, seeds=seeds, run_dir=run_dir, log=log,
                         saved=at or (os.path.join(run_dir, "findings.json") if plans else None),
                         reuse=bool(resume))
    runs = {arm: {s: per_seed[s] for s in seeds} for arm, per_seed in findings["runs"].items()}
    results, _ = results_of(claim, quick=quick, seeds=seeds, sizes=registered,
                            findings=findings, runs=runs, runtime=time.perf_counter() - start)
    jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
    report.write_claim_report(claim, results, run_dir)
    if not plans:
      if keep:
        history.record(claim.id, results_root)
      return results, run_dir
  else:  # the registered run's own per-seed metrics, as it wrote them
    results = old
    runs = {arm: {int(s): {m: (math.nan if v is None else v) for m, v in per.items()}
                  for s, per in body["runs"].items()} for arm, body in old["arms"].items()}
  failed: list[str] = []
  measured = {_key(registered): runs}
  blocks, notes, figures = {}, [], []
  for axis, points in plans:
    per, sizes_of = {}, dict(points)
    for i, (value, here) in enumerate(points, 1):
      head = f"[{claim.id}] {axis.name} {i}/{len(points)}: {axis.describe(value, here)}"
      if _key(here) in measured:
        log(head + (f": the registered {axis.word}, where the verdict is read"
                    if here == registered else ": measured already; reused"))
        per[value] = measured[_key(here)]
        continue
      log(head)
      got = _measure(claim, here, label=f"{axis.word} `{value}`",
                     here=os.path.join(run_dir, axis.folder(value)), quick=quick, seeds=seeds,
                     log=log, reuse=bool(resume), failed=failed)
      if got is not None:
        per[value] = measured[_key(here)] = got
    if axis.enough(per):
      blocks[axis.name] = axis.block(claim, per, sizes_of, seeds)
      notes.append(axis.note(registered))
      figures.append(axis_figure(axis, claim, blocks[axis.name], run_dir, registered))
  spent = time.perf_counter() - start
  again = tuple(f"- {axis.word[0].upper()}{axis.word[1:]} `" for axis, _ in plans)
  kept = [n for n in results.get("notes", ()) if n not in notes and not n.startswith(again)]
  if old is not None:
    for name, block in blocks.items():
      if name not in old["axes"]:
        block["added"] = {"git": folders.git_revision(), "runtime_s": spent}
  results = jsonio.strict({
      **results, "axes": {**results["axes"], **blocks},
      "runtime_s": (old["runtime_s"] if old else 0.0) + spent,
      "notes": kept + failed + notes,
      "figures": [*results.get("figures", ()), *(f for f in figures
                                                 if f not in results.get("figures", ()))]})
  validate_results(results)
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))
  report.write_claim_report(claim, results, run_dir)
  if keep:
    history.record(claim.id, results_root)
  return results, run_dir


def _finished(claim: Claim, run_dir: str, registered: Sizes, resume: str) -> dict | None:
  """The finished registered run of `run_dir` (its `results.json`), checked to be this claim's
  as registered now; None when it has none."""
  if not os.path.exists(os.path.join(run_dir, "results.json")):
    return None
  old = load_results(run_dir)
  if old["claim"] != claim.id:
    raise ValueError(f"--resume {resume}: that is a run of {old['claim']!r}, not {claim.id!r}. "
                     "Fix: give a run of this claim.")
  if old["config"]["sizes"] != jsonio.strict(registered.to_dict()):
    raise ValueError(f"--resume {resume}: that run's sizes {old['config']['sizes']} are not the "
                     f"claim's registered {registered.to_dict()} (the claim changed since). "
                     f"Fix: run the claim again: python -m experiments claim {claim.id}.")
  path = os.path.join(resume, "claim.json")  # the claim as that run froze it
  frozen = jsonio.load_strict(path) if os.path.exists(path) else {}
  now = jsonio.strict(claim.to_dict())

  def verdict_part(ths):  # `censored` decides only which points a trend fits, not a verdict
    return [{k: v for k, v in th.items() if k != "censored"} for th in ths or ()]
  changed = [k for k in ("thresholds", "extensions", "seeds", "tuning_seeds")
             if (verdict_part(frozen.get(k)) != verdict_part(now[k]) if k == "thresholds"
                 else frozen.get(k) != now[k])]
  if changed:
    raise ValueError(f"--resume {resume}: the claim's {changed} changed since that run, so its "
                     f"verdict is not this claim's. Fix: run the claim again: python -m "
                     f"experiments claim {claim.id}.")
  return old


def add_budgets(claim: Claim, onto: str, *, budgets: Sequence[int] | None = None,
                root: str = "runs", log: Callable[[str], None] = print) -> tuple[dict, str]:
  """The older `--onto RUN [--budgets K]`: `run_claim(claim, resume=onto, axes={"budget": K})`
  on the run's own quick flag and seeds (default `K`: the claim's budgets)."""
  if not os.path.exists(os.path.join(onto, "results.json")):
    raise ValueError(f"--onto {onto}: no results.json there. Fix: give a finished run of "
                     f"{claim.id!r} (runs/claims/{claim.id}/<run-id>, or results/{claim.id}).")
  ks = tuple(budgets if budgets is not None else claim.axis("budget").values)
  if not ks:
    asked = ("--budgets asks for none" if budgets is not None
             else f"{claim.id!r} declares no budgets")
    raise ValueError(f"--onto adds the budget axis, but {asked}. Fix: pass --budgets 4 (a "
                     "multiple of the registered tokens above 1).")
  old = jsonio.load_strict(os.path.join(onto, "results.json"))
  return run_claim(claim, quick=old["quick"], seeds=old["seeds"], root=root, log=log,
                   resume=onto, axes={"budget": ks})
