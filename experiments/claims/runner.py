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

import dataclasses
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

VERDICTS = ("supported", "refuted", "inconclusive", "not built")
KINDS = ("existing", "new")
INDICATIVE = "indicative (quick)"
FULL_SEEDS = (0, 1, 2)
QUICK_SEEDS = (0,)

# ------------------------------------------------------------------------------ statistics

# t_{0.975, ν} for ν = 1 … 30 (scipy.stats.t.ppf, 6 decimals); beyond, a Cornish–Fisher series.
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
         2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
         2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
         2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
_Z975 = 1.959963984540054


def t_quantile_975(dof: int) -> float:
  """The 0.975 quantile of Student's t with `dof` degrees of freedom (two-sided 95%).

  .. math:: t_\\nu \\approx z + \\frac{g_1(z)}{\\nu} + \\frac{g_2(z)}{\\nu^2}
     + \\frac{g_3(z)}{\\nu^3} + \\frac{g_4(z)}{\\nu^4}, \\quad z = \\Phi^{-1}(0.975)

  A table for `ν ≤ 30`, the Cornish–Fisher expansion above it (error below 1e-7).

  Args:
    dof: degrees of freedom, `n − 1` for `n` seeds; at least 1.

  Returns:
    The quantile.

  Example:
    >>> from experiments.claims.runner import t_quantile_975
    >>> round(t_quantile_975(2), 4)
    4.3027
  """
  if dof < 1:
    raise ValueError(f"t_quantile_975: {dof=} must be >= 1 (two seeds or more).")
  if dof <= len(_T975):
    return _T975[dof - 1]
  z = _Z975
  g = ((z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96,
       (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
       (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160)
  return z + sum(gi / dof ** (i + 1) for i, gi in enumerate(g))


def mean_ci95(values: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
  """Mean and 95% t-interval `mean ± t_{n−1} s / √n` of `values` (None below two values).

  Example:
    >>> from experiments.claims.runner import mean_ci95
    >>> m, (lo, hi) = mean_ci95([1.0, 2.0, 3.0])
    >>> m, round(lo, 3), round(hi, 3)
    (2.0, -0.484, 4.484)
  """
  x = np.asarray(values, np.float64)
  if x.size == 0:
    return math.nan, None
  m = float(x.mean())
  if x.size < 2:
    return m, None
  half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
  return m, (m - half, m + half)


# ------------------------------------------------------------------------------ the claim


_CONDITION = re.compile(r"^\s*(<=|>=|<|>|==)\s*([-+0-9.eE]+|inf|-inf)\s*$")


def parse_condition(text: str) -> tuple[str, float]:
  """`">= 0.9"` -> `(">=", 0.9)`; raises `ValueError` naming the accepted forms."""
  match = _CONDITION.match(text)
  if not match:
    raise ValueError(f"condition {text!r} cannot be read. Fix: write an operator (<, <=, >, >=, "
                     "==) and a number, e.g. '>= 0.9'.")
  return match.group(1), float(match.group(2))


def holds(condition: str, interval: tuple[float, float]) -> bool:
  """Whether every value of `interval = (lo, hi)` satisfies `condition` (False on NaN).

  Example:
    >>> from experiments.claims.runner import holds
    >>> holds(">= 0.9", (0.92, 0.99)), holds(">= 0.9", (0.85, 0.99))
    (True, False)
  """
  op, v = parse_condition(condition)
  lo, hi = interval
  if math.isnan(lo) or math.isnan(hi):
    return False
  return {"<": hi < v, "<=": hi <= v, ">": lo > v, ">=": lo >= v,
          "==": lo == v and hi == v}[op]


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
  """What `Claim.run` is asked to do: sizes (`quick`), seeds, and where figures go."""

  quick: bool
  seeds: tuple[int, ...]
  run_dir: str
  log: Callable[[str], None] = print


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

  def __post_init__(self):
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.id):
      raise ValueError(f"Claim.id={self.id!r} must be kebab-case, e.g. 'causal-mask'.")
    if self.kind not in KINDS:
      raise ValueError(f"Claim.kind={self.kind!r} is unknown. Fix: use one of {KINDS}.")
    if self.built and not (self.hypothesis and self.refuted_if and self.thresholds):
      raise ValueError(f"Claim {self.id!r} has a `run` but no hypothesis, refuted_if or "
                       "thresholds. Fix: freeze all three before the claim can run.")

  @property
  def built(self) -> bool:
    return self.run is not None

  def to_dict(self) -> dict[str, Any]:
    """The frozen definition (everything but `run`), as written to `claim.json`."""
    return {"id": self.id, "topic": self.topic, "kind": self.kind, "preface": self.preface,
            "hypothesis": self.hypothesis, "refuted_if": self.refuted_if,
            "thresholds": [t.to_dict() for t in self.thresholds],
            "anchors": [a.to_dict() for a in self.anchors], "built": self.built}


# ------------------------------------------------------------------------------ results


def to_strict_json(tree):
  """Numbers to Python floats/ints with non-finite floats as None; arrays to lists; recursive."""
  if isinstance(tree, dict):
    return {str(k): to_strict_json(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [to_strict_json(v) for v in tree]
  if isinstance(tree, (bool, np.bool_)):
    return bool(tree)
  if isinstance(tree, (int, np.integer)):
    return int(tree)
  if isinstance(tree, (float, np.floating)):
    return float(tree) if math.isfinite(tree) else None
  if hasattr(tree, "tolist"):
    return to_strict_json(np.asarray(tree).tolist())
  return tree


def write_json(path: str, obj) -> None:
  """Strict JSON (`allow_nan=False`), written to a temporary file and renamed into place."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(to_strict_json(obj), f, indent=1, allow_nan=False)
  os.replace(tmp, path)


def _num(x) -> float:
  return math.nan if x is None else float(x)


def arm_summary(runs: dict) -> dict:
  """`{seed: {metric: v}}` -> `{"runs", "mean", "std"}` (std with ddof 1; 0 for one seed)."""
  metrics = sorted({m for per_seed in runs.values() for m in per_seed})
  mean, std = {}, {}
  for m in metrics:
    x = np.array([_num(per_seed.get(m)) for per_seed in runs.values()], np.float64)
    mean[m] = float(x.mean())
    std[m] = float(x.std(ddof=1)) if x.size > 1 else 0.0
  return {"runs": {str(s): dict(v) for s, v in runs.items()}, "mean": mean, "std": std}


def _values(runs: dict, arm: str, metric: str, baseline: str | None, seeds) -> np.ndarray:
  """Per-seed values of `metric` in `arm`, minus `baseline`'s for the same seed when given."""
  def get(a):
    if a not in runs:
      raise KeyError(f"arm {a!r} is not among the measured arms {sorted(runs)}")
    return np.array([_num(runs[a][s].get(metric)) for s in seeds], np.float64)

  x = get(arm)
  return x - get(baseline) if baseline is not None else x


def effect(runs: dict, seeds, name: str, arm: str, baseline: str | None, metric: str) -> dict:
  """One `effects` entry: the mean of the (paired) quantity and its 95% t-interval."""
  m, ci = mean_ci95(_values(runs, arm, metric, baseline, seeds))
  return {"name": name, "arm": arm, "baseline": baseline, "metric": metric, "mean": m,
          "ci95": list(ci) if ci is not None else [None, None]}


def evaluate(th: Threshold, runs: dict, seeds) -> dict:
  """The interval a threshold is decided on, and whether its conditions hold."""
  x = _values(runs, th.arm, th.metric, th.baseline, seeds)
  m, ci = mean_ci95(x)
  if th.stat == "range" or ci is None:
    interval = (float(x.min()), float(x.max())) if not np.isnan(x).any() else (math.nan,) * 2
  else:
    interval = ci
  what = "range" if th.stat == "range" else ("95% CI" if ci is not None else "one seed")
  return {"mean": m, "interval": interval, "what": what,
          "supports": th.supports is not None and holds(th.supports, interval),
          "refutes": th.refutes is not None and holds(th.refutes, interval)}


def _fmt(x) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "n/a"
  if isinstance(x, str):
    return x
  x = float(x)
  if x == 0 or 1e-3 <= abs(x) < 1e4:
    return f"{x:.4g}"
  return f"{x:.3e}"


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
  return (f"{role}{th.name} = {_fmt(ev['mean'])} ({what} [{_fmt(lo)}, {_fmt(hi)}]; "
          + "; ".join(parts) + ")")


def verdict(claim: Claim, runs: dict, seeds, *, indicative: bool) -> tuple[str, str, list]:
  """The verdict from the frozen thresholds; returns `(verdict, reason, evaluations)`."""
  evals = [evaluate(th, runs, seeds) for th in claim.thresholds]
  failed_controls = [th for th, ev in zip(claim.thresholds, evals, strict=True)
                     if th.control and not ev["supports"]]
  refuting = [th for th, ev in zip(claim.thresholds, evals, strict=True) if ev["refutes"]]
  needed = [(th, ev) for th, ev in zip(claim.thresholds, evals, strict=True) if not th.control]
  if failed_controls:
    v = "inconclusive"
    why = "a control failed, so the instrument cannot be trusted: " + ", ".join(
        th.name for th in failed_controls)
  elif refuting:
    v = "refuted"
    why = "refuted by: " + ", ".join(th.name for th in refuting)
  elif needed and all(ev["supports"] for _, ev in needed):
    v = "supported"
    why = "every support condition holds"
  else:
    v = "inconclusive"
    why = "not every support condition holds, and no refutation condition does"
  lines = "; ".join(describe(th, ev) for th, ev in zip(claim.thresholds, evals, strict=True))
  prefix = f"{INDICATIVE}: " if indicative else ""
  return v, f"{prefix}{why}. {lines}", evals


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
    seeds: the seeds (default: `(0,)` quick, `(0, 1, 2)` full).
    root: the `runs` folder.
    log: where progress lines go.

  Returns:
    The `results.json` dict and the run folder.
  """
  if not claim.built:
    raise ValueError(f"claim {claim.id!r} is not built yet; nothing to run. Fix: choose a built "
                     "claim (python -m experiments tour lists them).")
  seeds = tuple(int(s) for s in (seeds if seeds else (QUICK_SEEDS if quick else FULL_SEEDS)))
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"--seeds {list(seeds)} repeats a seed. Fix: give distinct seeds.")
  run_dir = new_run_dir(root, claim.id, quick)
  write_json(os.path.join(run_dir, "claim.json"),
             {**claim.to_dict(), "quick": quick, "seeds": list(seeds)})
  start = time.perf_counter()
  findings = claim.run(Spec(quick=quick, seeds=seeds, run_dir=run_dir, log=log))
  runtime = time.perf_counter() - start
  runs = {arm: {s: per_seed[s] for s in seeds} for arm, per_seed in findings["runs"].items()}
  indicative = quick or len(seeds) < 3
  v, reason, evals = verdict(claim, runs, seeds, indicative=indicative)
  effects = [effect(runs, seeds, th.name, th.arm, th.baseline, th.metric)
             for th in claim.thresholds]
  names = {e["name"] for e in effects}
  for name, arm, baseline, metric in findings.get("effects", ()):
    if name not in names:
      effects.append(effect(runs, seeds, name, arm, baseline, metric))
  results = {
      "claim": claim.id, "quick": quick, "seeds": list(seeds), "config": findings["config"],
      "arms": {arm: arm_summary(per_seed) for arm, per_seed in runs.items()},
      "effects": effects, "verdict": v, "reason": reason,
      "thresholds": [th.to_dict() for th in claim.thresholds],
      "anchors": [a.to_dict() for a in claim.anchors], "runtime_s": runtime,
      "env": environment(), "git": git_revision(),
  }
  results = to_strict_json(results)
  validate_results(results)
  write_json(os.path.join(run_dir, "results.json"), results)
  from experiments.claims import report

  report.write_claim_report(claim, results, evals, findings, run_dir)
  return results, run_dir


# ------------------------------------------------------------------------------ schema


RESULT_KEYS = ("claim", "quick", "seeds", "config", "arms", "effects", "verdict", "reason",
               "thresholds", "anchors", "runtime_s", "env", "git")
EFFECT_KEYS = ("name", "arm", "baseline", "metric", "mean", "ci95")
TOUR_KEYS = ("quick", "runtime_s", "claims")
TOUR_ENTRY_KEYS = ("claim", "verdict", "reason", "results")


def _is_num(x) -> bool:
  return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)
                       and math.isfinite(x))


def _need(ok: bool, where: str, what: str) -> None:
  if not ok:
    raise ValueError(f"results.json schema: {where}: {what}")


def _keys(obj, keys, where: str) -> None:
  _need(isinstance(obj, dict), where, "must be an object")
  _need(set(obj) == set(keys), where,
        f"keys {sorted(obj)} must be exactly {sorted(keys)}")


def _finite_tree(tree, where: str) -> None:
  if isinstance(tree, dict):
    for k, v in tree.items():
      _finite_tree(v, f"{where}.{k}")
  elif isinstance(tree, list):
    for i, v in enumerate(tree):
      _finite_tree(v, f"{where}[{i}]")
  elif isinstance(tree, float):
    _need(math.isfinite(tree), where, f"{tree} is not finite (write null)")


def validate_results(obj: dict, claim_ids: Sequence[str] | None = None) -> None:
  """Checks a claim's `results.json` dict against the DESIGN.md schema; raises `ValueError`.

  Never looks at which verdict was reached, only that it is one of `VERDICTS`.

  Example:
    >>> from experiments.claims.runner import validate_results
    >>> validate_results({"claim": "x"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: results.json schema: results: keys ['claim'] must be exactly [...]
  """
  _keys(obj, RESULT_KEYS, "results")
  _finite_tree(obj, "results")
  _need(isinstance(obj["claim"], str), "claim", "must be a string")
  if claim_ids is not None:
    _need(obj["claim"] in claim_ids, "claim", f"{obj['claim']!r} is not a claim id")
  _need(isinstance(obj["quick"], bool), "quick", "must be true or false")
  _need(isinstance(obj["seeds"], list) and obj["seeds"]
        and all(isinstance(s, int) and not isinstance(s, bool) for s in obj["seeds"]),
        "seeds", "must be a non-empty list of integers")
  _need(isinstance(obj["config"], dict), "config", "must be an object")
  _need(isinstance(obj["arms"], dict) and obj["arms"], "arms", "must be a non-empty object")
  seeds = {str(s) for s in obj["seeds"]}
  for arm, body in obj["arms"].items():
    _keys(body, ("runs", "mean", "std"), f"arms.{arm}")
    _need(set(body["runs"]) == seeds, f"arms.{arm}.runs", f"keys must be the seeds {sorted(seeds)}")
    for seed, metrics in body["runs"].items():
      _need(isinstance(metrics, dict) and all(_is_num(v) for v in metrics.values()),
            f"arms.{arm}.runs.{seed}", "must map metric names to numbers or null")
    for part in ("mean", "std"):
      _need(isinstance(body[part], dict) and all(_is_num(v) for v in body[part].values()),
            f"arms.{arm}.{part}", "must map metric names to numbers or null")
  _need(isinstance(obj["effects"], list), "effects", "must be a list")
  for i, e in enumerate(obj["effects"]):
    _keys(e, EFFECT_KEYS, f"effects[{i}]")
    _need(all(isinstance(e[k], str) for k in ("name", "arm", "metric")), f"effects[{i}]",
          "name, arm and metric must be strings")
    _need(e["baseline"] is None or isinstance(e["baseline"], str), f"effects[{i}].baseline",
          "must be a string or null")
    _need(_is_num(e["mean"]), f"effects[{i}].mean", "must be a number or null")
    _need(isinstance(e["ci95"], list) and len(e["ci95"]) == 2 and all(map(_is_num, e["ci95"])),
          f"effects[{i}].ci95", "must be [lo, hi] of numbers or nulls")
  _need(obj["verdict"] in VERDICTS, "verdict", f"must be one of {VERDICTS}")
  _need(isinstance(obj["reason"], str) and obj["reason"], "reason", "must be a non-empty string")
  _need(isinstance(obj["thresholds"], list), "thresholds", "must be a list")
  _need(isinstance(obj["anchors"], list), "anchors", "must be a list")
  _need(_is_num(obj["runtime_s"]) and obj["runtime_s"] is not None, "runtime_s",
        "must be a number")
  _keys(obj["env"], ("jax", "backend", "device"), "env")
  _need(all(isinstance(v, str) for v in obj["env"].values()), "env", "values must be strings")
  _need(obj["git"] is None or isinstance(obj["git"], str), "git", "must be a string or null")


def validate_tour(obj: dict, claim_ids: Sequence[str]) -> None:
  """Checks a tour's `results.json` dict: `quick`, `runtime_s`, and one entry per claim in order."""
  _keys(obj, TOUR_KEYS, "tour")
  _finite_tree(obj, "tour")
  _need(isinstance(obj["quick"], bool), "tour.quick", "must be true or false")
  _need(_is_num(obj["runtime_s"]) and obj["runtime_s"] is not None, "tour.runtime_s",
        "must be a number")
  _need(isinstance(obj["claims"], list), "tour.claims", "must be a list")
  _need([c.get("claim") for c in obj["claims"]] == list(claim_ids), "tour.claims",
        f"must list the claims {list(claim_ids)} in this order")
  for c in obj["claims"]:
    _keys(c, TOUR_ENTRY_KEYS, f"tour.claims[{c['claim']}]")
    _need(c["verdict"] in VERDICTS, f"tour.claims[{c['claim']}].verdict",
          f"must be one of {VERDICTS}")
    _need(isinstance(c["reason"], str), f"tour.claims[{c['claim']}].reason", "must be a string")
    _need(c["results"] is None or isinstance(c["results"], str),
          f"tour.claims[{c['claim']}].results", "must be a path or null")


def load_strict(path: str):
  """Reads JSON refusing `NaN`/`Infinity` literals (which `json.load` would accept)."""
  def refuse(token):
    raise ValueError(f"{path}: {token} is not strict JSON (write null)")

  with open(path) as f:
    return json.load(f, parse_constant=refuse)


def validate_runs(root: str = "runs") -> int:
  """Validates every `results.json` under `root/claims` and `root/tour`; returns how many.

  Run as `python -m experiments.claims.validate [ROOT]` (CI does, after `tour --quick`).
  """
  from experiments.claims import CLAIMS

  count = 0
  for kind in ("claims", "tour"):
    for folder, _, names in sorted(os.walk(os.path.join(root, kind))):
      if "results.json" not in names:
        continue
      obj = load_strict(os.path.join(folder, "results.json"))
      try:
        if kind == "tour":
          validate_tour(obj, list(CLAIMS))
        else:
          validate_results(obj, list(CLAIMS))
      except ValueError as e:
        raise ValueError(f"{folder}/results.json: {e}") from None
      count += 1
  return count

