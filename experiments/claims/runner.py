"""The claims runner: seeds, paired effects with 95% t-intervals, a verdict computed by code.

    python -m experiments claim ID [--quick] [--seeds 0 1 2] [--out runs]

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
"""


from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence

from experiments import jsonio
from experiments.claims import report
from experiments.claims.claim import INDICATIVE, Claim, Spec, Threshold
from experiments.claims.schema import validate_results
from experiments.claims.stats import arm_summary, effect, evaluate, fmt


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


def run_claim(claim: Claim, *, quick: bool = False, seeds: Sequence[int] | None = None,
              root: str = "runs", log: Callable[[str], None] = print) -> tuple[dict, str]:
  """Runs `claim` and writes its folder; returns `(results, run_dir)`.

  Args:
    claim: a built `Claim`.
    quick: small sizes and one seed; the verdict is labelled indicative.
    seeds: the seeds (default: the claim's pre-registered `seeds`; quick: the first of them).
      Other seeds make an addendum: its verdict is reported, the registered one stays.
    root: the `runs` folder.
    log: where progress lines go.

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
  sizes = claim.sizes(quick)
  run_dir = new_run_dir(root, claim.id, quick)
  jsonio.dump_strict({**claim.to_dict(), "quick": quick, "seeds": list(seeds)},
                     os.path.join(run_dir, "claim.json"))
  start = time.perf_counter()
  findings = claim.run(Spec(quick=quick, seeds=seeds, run_dir=run_dir, sizes=sizes, log=log))
  if "config" in findings:
    raise ValueError(f"claim {claim.id!r}: run() returned a 'config'; the runner writes the "
                     "config from the claim's sizes. Fix: declare what the run reads in its "
                     "Sizes dataclass; return facts about the setup (model configs, tuned "
                     "rates) under 'setup'.")
  runtime = time.perf_counter() - start
  runs = {arm: {s: per_seed[s] for s in seeds} for arm, per_seed in findings["runs"].items()}
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
      "config": {"sizes": sizes.to_dict(), "setup": findings.get("setup", {})},
      "arms": {arm: arm_summary(per_seed) for arm, per_seed in runs.items()},
      "effects": effects, "verdict": v, "reason": reason,
      "thresholds": [th.to_dict() for th in claim.thresholds], "extensions": extensions,
      "scale": findings.get("scale"), "context": findings.get("context"),
      "anchors": [a.to_dict() for a in claim.anchors], "runtime_s": runtime,
      "env": environment(), "git": git_revision(),
  }
  results = jsonio.strict(results)
  validate_results(results)
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"))

  report.write_claim_report(claim, results, evals, findings, run_dir)
  return results, run_dir

