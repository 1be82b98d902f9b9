"""The schema of `results.json` (a claim's run and the tour's): validators that raise.

They never look at which verdict was reached, only that the file has the shape DESIGN.md
states, strict JSON (`null`, never `NaN`) included.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from experiments.jsonio import load_strict
from experiments.verdict.rule import VERDICTS

RESULT_KEYS = ("claim", "quick", "seeds", "tuning_seeds", "config", "arms", "effects", "verdict",
               "reason", "thresholds", "extensions", "scale", "context", "anchors", "runtime_s",
               "env", "git")
# optional: `budgets`, written only by a run on several training budgets (since 2026-12-03);
# `context_trend`, the fit of the context axis (since 2026-12-05); `version`, the claim's
# registration (since 2026-12-05; absent: version 1)
OPTIONAL_RESULT_KEYS = ("budgets", "context_trend", "version")
EXTENSION_KEYS = ("name", "verdict", "reason", "thresholds")
SCALE_KEYS = ("sizes", "slope", "slope_ci", "trend")
SCALE_FIT_KEYS = ("slope", "slope_ci", "trend")  # `scale.families.<family>`, with 2+ families
SCALE_SIZE_KEYS = ("family", "model", "params", "effect", "ci")  # + optional tokens_per_param
BUDGET_KEYS = ("train_tokens", "params", "tokens_per_param")
TRENDS = ("grows", "shrinks", "no trend", "not measured", "families disagree")
# optional in a fit (since 2026-12-05, `stats.fit_trend`): residual dof, points fitted, the
# points left out with their reason, and (scale with families) whether a pooled slope is read
FIT_EXTRA_KEYS = ("dof", "points", "excluded", "pooled", "per_family")
CONTEXT_KEYS = ("T", "effect", "ci")
BUDGETS_KEYS = ("model", "runs", "slope", "slope_ci", "trend")
OPTIONAL_BUDGETS_KEYS = ("git", "runtime_s")  # present when added onto a finished result
BUDGET_RUN_KEYS = ("multiple", "train_tokens", "tokens_per_param", "effect", "ci")
# optional in a scale or context row (runs kept since 2026-12-02): the registered rule there
READING_KEYS = ("verdict", "failed_controls")
# optional in a row (since 2026-12-05): why the row is left out of its axis's fit, and the
# held-out bits per byte of the model it reads or trains
ROW_EXTRA_KEYS = ("excluded", "bits_per_byte")
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


def validate_scale(sc) -> None:
  """Checks `results.json`'s `scale` (null for a one-size run); raises `ValueError`.

  Example:
    >>> from experiments.verdict.schema import validate_scale
    >>> validate_scale({"sizes": [], "slope": None, "slope_ci": [None, None],
    ...                 "trend": "no trend"})
    Traceback (most recent call last):
    ...
    ValueError: results.json schema: scale.sizes: must list at least two sizes
  """
  _keys({k: v for k, v in sc.items() if k not in ("families", *FIT_EXTRA_KEYS)}
        if isinstance(sc, dict) else sc, SCALE_KEYS, "scale")
  for fam, fit in (sc.get("families") or {}).items():
    _keys({k: v for k, v in fit.items() if k not in FIT_EXTRA_KEYS}, SCALE_FIT_KEYS,
          f"scale.families.{fam}")
    _need(fit["trend"] in TRENDS, f"scale.families.{fam}.trend", f"must be one of {TRENDS}")
    _need(_is_num(fit["slope"]), f"scale.families.{fam}.slope", "must be a number or null")
    _need(_interval(fit["slope_ci"]), f"scale.families.{fam}.slope_ci",
          "must be [lo, hi] of numbers or nulls")
  _need(sc["trend"] in TRENDS, "scale.trend", f"must be one of {TRENDS}")
  _need(isinstance(sc["sizes"], list) and len(sc["sizes"]) >= 2, "scale.sizes",
        "must list at least two sizes")
  for i, row in enumerate(sc["sizes"]):
    where = f"scale.sizes[{i}]"
    _keys({k: v for k, v in row.items()
           if k not in ("tokens_per_param", *READING_KEYS, *ROW_EXTRA_KEYS)}
          if isinstance(row, dict) else row, SCALE_SIZE_KEYS, where)
    _reading(row, where)
    _need(row.get("tokens_per_param") is None or (_is_num(row["tokens_per_param"])
                                                  and row["tokens_per_param"] > 0),
          f"{where}.tokens_per_param", "must be a positive number when given")
    _need(isinstance(row["family"], str) and row["family"], f"{where}.family",
          "must be a non-empty string")
    _need(isinstance(row["model"], str) and row["model"], f"{where}.model",
          "must be a non-empty string (a base model's name)")
    _need(_is_num(row["params"]) and row["params"] is not None and row["params"] > 0,
          f"{where}.params", "must be a positive number")
    _need(_is_num(row["effect"]), f"{where}.effect", "must be a number or null")
    _need(_interval(row["ci"]), f"{where}.ci", "must be [lo, hi] of numbers or nulls")
  models = [row["model"] for row in sc["sizes"]]
  _need(len(set(models)) == len(models), "scale.sizes", f"models {models} repeat")
  _need(_is_num(sc["slope"]), "scale.slope", "must be a number or null")
  _need(_interval(sc["slope_ci"]), "scale.slope_ci", "must be [lo, hi] of numbers or nulls")


def _reading(row: dict, where: str) -> None:
  """A row's optional reading: `verdict` (one of `VERDICTS`) with `failed_controls` (names)."""
  if "verdict" in row or "failed_controls" in row:
    _need(row.get("verdict") in VERDICTS, f"{where}.verdict", f"must be one of {VERDICTS}")
    fc = row.get("failed_controls")
    _need(isinstance(fc, list) and all(isinstance(n, str) for n in fc),
          f"{where}.failed_controls", "must be a list of threshold names")


def validate_context(ctx) -> None:
  """Checks `results.json`'s `context`: `[{"T", "effect", "ci"}, ...]` or null."""
  _need(isinstance(ctx, list), "context", "must be a list or null")
  for i, row in enumerate(ctx):
    _keys({k: v for k, v in row.items() if k not in (*READING_KEYS, *ROW_EXTRA_KEYS)}
          if isinstance(row, dict) else row, CONTEXT_KEYS, f"context[{i}]")
    _reading(row, f"context[{i}]")
    _need(isinstance(row["T"], int) and not isinstance(row["T"], bool) and row["T"] > 0,
          f"context[{i}].T", "must be a positive integer (tokens)")
    _need(_is_num(row["effect"]), f"context[{i}].effect", "must be a number or null")
    _need(_interval(row["ci"]), f"context[{i}].ci", "must be [lo, hi] of numbers or nulls")


def validate_budgets(block) -> None:
  """Checks `results.json`'s optional `budgets`: the effect per multiple of the tokens, its fit.

  `{"model", "runs": [{"multiple", "train_tokens", "tokens_per_param", "effect", "ci"} (+ the
  reading), ...], "slope", "slope_ci", "trend"}` (+ `git`, `runtime_s` when the axis was
  added onto a finished result), the first run at the registered tokens (`1`).
  """
  _keys({k: v for k, v in block.items() if k not in (*OPTIONAL_BUDGETS_KEYS, *FIT_EXTRA_KEYS)}
        if isinstance(block, dict) else block, BUDGETS_KEYS, "budgets")
  _need(block["model"] is None or isinstance(block["model"], str), "budgets.model",
        "must be the base model's name or null")
  _need(block.get("git") is None or isinstance(block["git"], str), "budgets.git",
        "must be a git revision or null")
  _need(block.get("runtime_s") is None or (_is_num(block["runtime_s"])
                                           and block["runtime_s"] >= 0),
        "budgets.runtime_s", "must be a number of seconds")
  _need(isinstance(block["runs"], list) and len(block["runs"]) >= 2, "budgets.runs",
        "must list at least two budgets, the registered one (multiple 1) first")
  for i, row in enumerate(block["runs"]):
    where = f"budgets.runs[{i}]"
    _keys({k: v for k, v in row.items() if k not in (*READING_KEYS, *ROW_EXTRA_KEYS)}
          if isinstance(row, dict) else row, BUDGET_RUN_KEYS, where)
    _reading(row, where)
    for key in ("multiple", "train_tokens"):
      _need(isinstance(row[key], int) and not isinstance(row[key], bool) and row[key] > 0,
            f"{where}.{key}", "must be a positive integer")
    _need(row["tokens_per_param"] is None or (_is_num(row["tokens_per_param"])
                                              and row["tokens_per_param"] > 0),
          f"{where}.tokens_per_param", "must be a positive number or null")
    _need(_is_num(row["effect"]), f"{where}.effect", "must be a number or null")
    _need(_interval(row["ci"]), f"{where}.ci", "must be [lo, hi] of numbers or nulls")
  ks = [row["multiple"] for row in block["runs"]]
  _need(ks[0] == 1 and ks == sorted(set(ks)), "budgets.runs",
        f"multiples {ks} must start at 1 (the registered run) and increase")
  _need(_is_num(block["slope"]), "budgets.slope", "must be a number or null")
  _need(_interval(block["slope_ci"]), "budgets.slope_ci", "must be [lo, hi] of numbers or nulls")
  _need(block["trend"] in TRENDS, "budgets.trend", f"must be one of {TRENDS}")


def validate_results(obj: dict, claim_ids: Sequence[str] | None = None) -> None:
  """Checks a claim's `results.json` dict against the DESIGN.md schema; raises `ValueError`.

  Never looks at which verdict was reached, only that it is one of `VERDICTS`.

  Example:
    >>> from experiments.verdict.schema import validate_results
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
  for i, e in enumerate(obj["extensions"]):
    _keys(e, EXTENSION_KEYS, f"extensions[{i}]")
    _need(isinstance(e["name"], str) and e["name"], f"extensions[{i}].name", "must be a string")
    _need(e["verdict"] in VERDICTS, f"extensions[{i}].verdict", f"must be one of {VERDICTS}")
    _need(isinstance(e["reason"], str), f"extensions[{i}].reason", "must be a string")
    _need(isinstance(e["thresholds"], list), f"extensions[{i}].thresholds", "must be a list")
  if obj["scale"] is not None:
    validate_scale(obj["scale"])
  if obj["context"] is not None:
    validate_context(obj["context"])
  if "budgets" in obj:
    validate_budgets(obj["budgets"])
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
          validate_results(obj, claim_ids)
      except ValueError as e:
        raise ValueError(f"{folder}/results.json: {e}") from None
      count += 1
  return count

