"""The schema of `results.json` (a claim's run and the tour's): validators that raise.

They never look at which verdict was reached, only that the file has the shape DESIGN.md
states, strict JSON (`null`, never `NaN`) included.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from experiments.jsonio import load_strict
from experiments.verdict.arithmetic.rule import VERDICTS

# Versions a run records beside jax (`folders.environment`); results kept before them lack them.
ENV_VERSIONS = ("jaxlib", "flax", "optax", "numpy", "python")

SCHEMA = 2  # `results.json`'s version: 2 holds every axis under `axes` (since 2026-12-05)
RESULT_KEYS = ("claim", "schema", "quick", "seeds", "tuning_seeds", "config", "arms", "effects",
               "verdict", "reason", "thresholds", "extensions", "axes", "anchors", "runtime_s",
               "env", "git")
# optional: `version`, the claim's registration (absent: version 1); `notes` and `figures`,
# the report's notes (markdown lines) and figure names, so the report is made from the file;
# `corpus_sha256` (the pinned `stdlib` archive the run read, `experiments.data.pinned`) and
# `split` (the split its primary's metrics were read on): results kept before the pinned corpus
# (2026-12-07) lack them, so they are optional in a kept file and required in a new one
# (`validate_results(..., new=True)`, which also requires `env.python`); `clauses`, each clause's
# verdict, for a claim that splits its sentence (`Claim.clauses`)
OPTIONAL_RESULT_KEYS = ("version", "notes", "figures", "corpus_sha256", "split", "clauses")
NEW_RESULT_KEYS = ("corpus_sha256", "split")
SPLITS = ("train", "val", "test")
EXTENSION_KEYS = ("name", "verdict", "reason", "thresholds")
CLAUSE_KEYS = ("text", "thresholds", "proof", "verdict", "reason")
BUDGET_KEYS = ("train_tokens", "params", "tokens_per_param")
TRENDS = ("grows", "shrinks", "no trend", "not measured", "families disagree")
# an axis block: its rows and fit (`axis.Axis.block`), `model` (the budget axis), `added`
# (`{"git", "runtime_s"}` of an axis added onto a finished result)
AXIS_KEYS = ("rows", "slope", "slope_ci", "trend")
OPTIONAL_AXIS_KEYS = ("dof", "points", "excluded", "pooled", "per_family", "model", "added")
FIT_KEYS = ("slope", "slope_ci", "trend")  # `per_family.<family>`, + dof and points
ROW_KEYS = ("effect", "ci")
# optional in a row: the registered rule there, why the row is left out of its axis's fit,
# and the held-out bits per byte of the model it reads or trains
READING_KEYS = ("verdict", "failed_controls")
ROW_EXTRA_KEYS = ("excluded", "bits_per_byte")
V1_AXES = ("scale", "context", "context_trend", "budgets")
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


def _interval(x) -> bool:
  return isinstance(x, list) and len(x) == 2 and all(map(_is_num, x))


def _reading(row: dict, where: str) -> None:
  """A row's optional reading: `verdict` (one of `VERDICTS`) with `failed_controls` (names)."""
  if "verdict" in row or "failed_controls" in row:
    _need(row.get("verdict") in VERDICTS, f"{where}.verdict", f"must be one of {VERDICTS}")
    fc = row.get("failed_controls")
    _need(isinstance(fc, list) and all(isinstance(n, str) for n in fc),
          f"{where}.failed_controls", "must be a list of threshold names")


def _fit(fit: dict, where: str) -> None:
  _need(fit["trend"] in TRENDS, f"{where}.trend", f"must be one of {TRENDS}")
  _need(_is_num(fit["slope"]), f"{where}.slope", "must be a number or null")
  _need(_interval(fit["slope_ci"]), f"{where}.slope_ci", "must be [lo, hi] of numbers or nulls")


def validate_axis(name: str, block) -> None:
  """Checks one block of `results.json`'s `axes`; raises `ValueError` naming the field.

  Every axis: `rows` (each with `effect` and `ci`, optionally the reading and why it is left
  out of the fit) and the fit (`slope`, `slope_ci`, `trend`, ...); then the axis's own rows
  (`Axis.validate`: a shared axis by `axes.KINDS`, any other by its name).

  Example:
    >>> from experiments.verdict.running.schema import validate_axis
    >>> validate_axis("context", {"rows": [], "slope": None, "slope_ci": [None, None],
    ...                           "trend": "not measured"})
    Traceback (most recent call last):
    ...
    ValueError: results.json schema: axes.context.rows: must list at least one point
  """
  from experiments.verdict.declare.axes import KINDS  # deferred: the axes read the claim's modules
  from experiments.verdict.declare.axis import Axis

  where = f"axes.{name}"
  _keys({k: v for k, v in block.items() if k not in OPTIONAL_AXIS_KEYS}
        if isinstance(block, dict) else block, AXIS_KEYS, where)
  _fit(block, where)
  for fam, fit in (block.get("per_family") or {}).items():
    _keys({k: v for k, v in fit.items() if k not in ("dof", "points")}, FIT_KEYS,
          f"{where}.per_family.{fam}")
    _fit(fit, f"{where}.per_family.{fam}")
  added = block.get("added")
  if added is not None:
    _keys(added, ("git", "runtime_s"), f"{where}.added")
    _need(added["git"] is None or isinstance(added["git"], str), f"{where}.added.git",
          "must be a git revision or null")
    _need(_is_num(added["runtime_s"]) and (added["runtime_s"] or 0) >= 0,
          f"{where}.added.runtime_s", "must be a number of seconds")
  _need(isinstance(block["rows"], list) and block["rows"], f"{where}.rows",
        "must list at least one point")
  for i, row in enumerate(block["rows"]):
    here = f"{where}.rows[{i}]"
    _need(isinstance(row, dict), here, "must be an object")
    _need(all(k in row for k in ROW_KEYS), here, f"must hold {list(ROW_KEYS)}")
    _reading(row, here)
    _need(_is_num(row["effect"]), f"{here}.effect", "must be a number or null")
    _need(_interval(row["ci"]), f"{here}.ci", "must be [lo, hi] of numbers or nulls")
    _need(row.get("excluded") is None or isinstance(row["excluded"], str),
          f"{here}.excluded", "must be the reason, a string")
  (KINDS[name](()) if name in KINDS else Axis(name)).validate(block, _need, where)


def upgrade(obj: dict, report: str | None = None) -> dict:
  """A `results.json` dict in the current schema: a version 1 file (top-level `scale`,
  `context`, `context_trend`, `budgets`) becomes version 2 (`axes`); a current one is returned
  as it is. With `report` (the run's `report.md`), a file without `notes` gains the notes and
  figures that report lists (`report.lifted`).

  Example:
    >>> from experiments.verdict.running.schema import upgrade
    >>> v1 = {"claim": "x", "scale": None, "context": [{"T": 8, "effect": 1.0, "ci": [0, 2]}],
    ...       "context_trend": {"slope": None, "slope_ci": [None, None], "trend": "not measured"}}
    >>> v2 = upgrade(v1)
    >>> list(v2), list(v2["axes"]), v2["axes"]["context"]["rows"][0]["T"]
    (['claim', 'schema', 'axes'], ['context'], 8)
    >>> upgrade(v2) == v2
    True
  """
  if "axes" not in obj:
    axes = {}
    if obj.get("scale"):
      sc = {k: v for k, v in obj["scale"].items() if k not in ("sizes", "families")}
      fams = obj["scale"].get("families")
      axes["scale"] = {"rows": obj["scale"]["sizes"], **sc,
                       **({"per_family": fams} if fams else {})}
    if obj.get("context"):
      fit = obj.get("context_trend") or {"slope": None, "slope_ci": [None, None],
                                         "trend": "not measured"}
      axes["context"] = {"rows": obj["context"], **fit}
    if obj.get("budgets"):
      b = obj["budgets"]
      fit = {k: v for k, v in b.items() if k not in ("model", "runs", "git", "runtime_s")}
      axes["budget"] = {"model": b["model"], "rows": b["runs"], **fit, **(
          {"added": {"git": b["git"], "runtime_s": b.get("runtime_s")}} if "git" in b else {})}
    out = {}
    for k, v in obj.items():
      if k == "claim":
        out.update(claim=v, schema=SCHEMA)
      elif k == "scale" or (k in V1_AXES and "axes" not in out):
        out["axes"] = axes
      elif k not in V1_AXES:
        out[k] = v
    out.setdefault("schema", SCHEMA)
    out.setdefault("axes", axes)
    obj = out
  if report is not None and "notes" not in obj:
    from experiments.verdict.render.report import lifted

    obj = {**obj, **lifted(report)}
  return obj


def load_results(folder: str) -> dict:
  """`folder/results.json`, in the current schema (`upgrade`, with the folder's report), and
  validated; raises `ValueError` naming the file."""
  path = os.path.join(folder, "results.json")
  obj = load_strict(path)
  report = os.path.join(folder, "report.md")
  text = None
  if "notes" not in obj and os.path.exists(report):
    with open(report) as f:
      text = f.read()
  obj = upgrade(obj, text)
  try:
    validate_results(obj)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  return obj


def validate_results(obj: dict, claim_ids: Sequence[str] | None = None, *,
                     new: bool = False) -> None:
  """Checks a claim's `results.json` dict against the DESIGN.md schema; raises `ValueError`.

  Never looks at which verdict was reached, only that it is one of `VERDICTS`. `new` (a run
  made now, `results.results_of`) also requires the fields added since results were first
  kept: `corpus_sha256`, `split` and `env.python`.

  Example:
    >>> from experiments.verdict.running.schema import validate_results
    >>> validate_results({"claim": "x"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: results.json schema: results: keys ['claim'] must be exactly [...]
  """
  _keys({k: v for k, v in obj.items() if k not in OPTIONAL_RESULT_KEYS}
        if isinstance(obj, dict) else obj, RESULT_KEYS, "results")
  _finite_tree(obj, "results")
  _need(isinstance(obj["claim"], str), "claim", "must be a string")
  if claim_ids is not None:
    _need(obj["claim"] in claim_ids, "claim", f"{obj['claim']!r} is not a claim id")
  _need(isinstance(obj["quick"], bool), "quick", "must be true or false")
  _need(isinstance(obj["seeds"], list) and obj["seeds"]
        and all(isinstance(s, int) and not isinstance(s, bool) for s in obj["seeds"]),
        "seeds", "must be a non-empty list of integers")
  _need(isinstance(obj["tuning_seeds"], list)
        and all(isinstance(s, int) and not isinstance(s, bool) for s in obj["tuning_seeds"]),
        "tuning_seeds", "must be a list of integers")
  _need(not set(obj["seeds"]) & set(obj["tuning_seeds"]), "tuning_seeds",
        "must be disjoint from seeds (a tuning seed is never reported)")
  _need(isinstance(obj["config"], dict), "config", "must be an object")
  if obj["config"].get("budget") is not None:
    spent = obj["config"]["budget"]
    _keys(spent, BUDGET_KEYS, "config.budget")
    _need(all(_is_num(spent[k]) and spent[k] is not None and spent[k] > 0 for k in BUDGET_KEYS),
          "config.budget", "train_tokens, params and tokens_per_param must be positive numbers")
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
  _need(isinstance(obj["extensions"], list), "extensions", "must be a list")
  for i, c in enumerate(obj.get("clauses", ())):
    _keys(c, CLAUSE_KEYS, f"clauses[{i}]")
    _need(c["verdict"] in VERDICTS, f"clauses[{i}].verdict", f"must be one of {VERDICTS}")
    _need(isinstance(c["proof"], bool), f"clauses[{i}].proof", "must be true or false")
  for i, e in enumerate(obj["extensions"]):
    _keys(e, EXTENSION_KEYS, f"extensions[{i}]")
    _need(isinstance(e["name"], str) and e["name"], f"extensions[{i}].name", "must be a string")
    _need(e["verdict"] in VERDICTS, f"extensions[{i}].verdict", f"must be one of {VERDICTS}")
    _need(isinstance(e["reason"], str), f"extensions[{i}].reason", "must be a string")
    _need(isinstance(e["thresholds"], list), f"extensions[{i}].thresholds", "must be a list")
  _need(obj["schema"] == SCHEMA, "schema", f"must be {SCHEMA} (an older file: read it with "
        "`upgrade`, or rewrite it with python -m experiments.commands.refit)")
  _need(isinstance(obj["axes"], dict), "axes", "must be an object (empty for one point)")
  for name, block in obj["axes"].items():
    validate_axis(name, block)
  for key in ("notes", "figures"):
    _need(key not in obj or (isinstance(obj[key], list)
                             and all(isinstance(x, str) for x in obj[key])), key,
          "must be a list of strings")
  _need(isinstance(obj["anchors"], list), "anchors", "must be a list")
  _need(_is_num(obj["runtime_s"]) and obj["runtime_s"] is not None, "runtime_s",
        "must be a number")
  env = obj["env"]
  _need(isinstance(env, dict), "env", "must be an object")
  _need({"jax", "backend", "device"} <= set(env) <= {"jax", "backend", "device", *ENV_VERSIONS},
        "env", f"keys {sorted(env)} must be jax, backend, device and any of {list(ENV_VERSIONS)}")
  _need(all(isinstance(v, str) for k, v in env.items() if k not in ENV_VERSIONS), "env",
        "jax, backend and device must be strings")
  _need(all(v is None or isinstance(v, str) for v in env.values()), "env",
        "versions must be strings or null (not installed)")
  _need(obj["git"] is None or isinstance(obj["git"], str), "git", "must be a string or null")
  if new:
    missing = [k for k in NEW_RESULT_KEYS if k not in obj] + (
        ["env.python"] if not env.get("python") else [])
    _need(not missing, "results", f"a new run must record {missing}. Fix: write it with "
          "experiments.verdict.running.results.results_of")
  if "corpus_sha256" in obj:
    _need(isinstance(obj["corpus_sha256"], str) and len(obj["corpus_sha256"]) == 64,
          "corpus_sha256", "must be a hex SHA-256 (64 characters)")
  if "split" in obj:
    _need(obj["split"] in SPLITS, "split", f"must be one of {list(SPLITS)}")


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


def validate_runs(claim_ids: Sequence[str], root: str = "runs") -> int:
  """Validates every `results.json` under `root/claims` and `root/tour`; returns how many.

  Run as `python -m experiments.commands.validate [ROOT]` (CI does, after `tour --quick`).
  """
  count = 0
  for kind in ("claims", "tour"):
    for folder, _, names in sorted(os.walk(os.path.join(root, kind))):
      if "results.json" not in names:
        continue
      obj = load_strict(os.path.join(folder, "results.json"))
      try:
        if kind == "tour":
          validate_tour(obj, claim_ids)
        else:
          validate_results(upgrade(obj), claim_ids)
      except ValueError as e:
        raise ValueError(f"{folder}/results.json: {e}") from None
      count += 1
  return count

