"""The one-line texts of a result: table cells, labels and numbers as every report writes them.

Each reads a `results.json` dict (or one row of it) and returns a string: the verdict's label,
the key number, the regime of the registered size, each axis's trend in one cell. The tour's
table and the README's (`python -m experiments.commands.table`) are made of these; `table`
writes the markdown table itself.
"""

from __future__ import annotations

import numpy as np

from experiments.verdict.arithmetic.rule import INDICATIVE
from experiments.verdict.arithmetic.stats import fmt


def _row(cells) -> str:
  return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def table(header, rows) -> list[str]:
  """A markdown table as a list of lines (with a trailing blank line)."""
  return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def verdict_label(results: dict | None, verdict: str) -> str:
  """`supported`, or `supported — indicative (quick)` for quick or under-seeded runs."""
  if results is not None and verdict != "not built" and (
      results["quick"] or len(results["seeds"]) < 3):
    return f"{verdict} — {INDICATIVE}"
  return verdict


def key_number(results: dict | None, claim=None) -> str:
  """The claim's key number, `name: mean unit [lo, hi]` (95% CI, or one seed): the effect of
  the threshold the claim names as its `key`, else its first effect.

  Example:
    >>> from experiments.verdict import Claim, Threshold
    >>> from experiments.verdict.render.cells import key_number
    >>> res = {"effects": [{"name": "diverged", "mean": 0.0, "ci95": [0.0, 0.0]},
    ...                    {"name": "gap", "mean": 0.34, "ci95": [0.22, 0.46]}]}
    >>> ths = (Threshold("diverged", arm="a", metric="d", stat="range", supports="== 0"),
    ...        Threshold("gap", arm="a", metric="g", supports="> 0.25", unit="nats"))
    >>> claim = Claim(id="x", topic="t", kind="new", preface="p", thresholds=ths, key="gap")
    >>> key_number(res, claim), key_number(res)
    ('gap: 0.34 nats [0.22, 0.46]', 'diverged: 0 [0, 0]')
  """
  if not results or not results["effects"]:
    return "—"
  key = getattr(claim, "key", None)
  e = next((e for e in results["effects"] if key and e["name"] == key), results["effects"][0])
  lo, hi = e["ci95"]
  ci = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else " (one seed)"
  th = next((t for t in claim.thresholds if t.name == e["name"]), None) if claim else None
  if th is None and claim is not None and claim.thresholds:
    th = claim.thresholds[0]  # an older result's first effect: the first threshold's unit
  unit = f" {th.unit}" if th is not None and th.unit else ""
  return f"{e['name']}: {fmt(e['mean'])}{unit}{ci}"


def params_text(params: float) -> str:
  """A parameter count as reports write it: `0.86M`, `2.0M`, `1.2B`.

  Example:
    >>> from experiments.verdict.render.cells import params_text
    >>> params_text(857_000), params_text(2_000_000), params_text(1.2e9)
    ('0.86M', '2.0M', '1.2B')
  """
  if params >= 1e9:
    return f"{params / 1e9:.1f}B"
  if params >= 1e6:
    return f"{params / 1e6:.1f}M"
  return f"{params / 1e6:.2g}M"


def regime_text(results: dict | None, reads_base: bool = False) -> str:
  """The registered size's model, parameters, tokens per parameter and held-out bits per byte.

  From `config.regime` (runs since 2026-12-05); an older run gives what its config records
  (`config.budget`, or the base model's recipe when the claim `reads_base`) and says its
  bits per byte were not recorded.

  Example:
    >>> from experiments.verdict.render.cells import regime_text
    >>> regime_text({"config": {"regime": {"model": "mini-20", "params": 132864,
    ...              "tokens_per_param": 20.01, "bits_per_byte": 2.48}}})
    '`mini-20`, 0.13M params, 20 tokens/param, 2.48 bits/byte'
  """
  if not results:
    return "—"
  reg = results["config"].get("regime")
  if reg is None:
    from experiments import models

    name = (results["config"].get("sizes") or {}).get("model")
    known = name in models.RECIPES or name in models.SHAPES
    card = models.model_card(name) if known else {}
    spent = results["config"].get("budget")
    reg = {"model": name, "params": card.get("params"), "bits_per_byte": None,
           "tokens_per_param": spent["tokens_per_param"] if spent
           else card.get("tokens_per_param") if reads_base else None}
  if reg["model"] is None:
    return "no model"
  parts = [f"`{reg['model']}`"]
  if reg["params"]:
    parts.append(f"{params_text(reg['params'])} params")
  tpp = reg["tokens_per_param"]
  parts.append(f"{tpp:.3g} tokens/param" if tpp else "tokens/param not recorded")
  bits = reg["bits_per_byte"]
  parts.append(f"{bits:.3g} bits/byte" if bits is not None else "bits/byte not recorded")
  return ", ".join(parts)


def anchor_text(claim) -> str:
  if not claim.anchors:
    return "—"
  a = claim.anchors[0]
  return f"{a.what}: {fmt(a.value)} ({a.source})"


def reading_text(row: dict) -> str:
  """A scale or context row's registered-rule reading, e.g. `inconclusive (failed control: x)`.

  Example:
    >>> from experiments.verdict.render.cells import reading_text
    >>> reading_text({"verdict": "inconclusive", "failed_controls": ["full learns"]})
    '**inconclusive** (failed control: full learns)'
  """
  if "verdict" not in row:
    return "—"
  failed = row.get("failed_controls") or []
  return f"**{row['verdict']}**" + (f" (failed control: {', '.join(failed)})" if failed else "")


def fit_cell(row: dict) -> str:
  """Whether a row entered its axis's trend fit: `yes`, or `no: <why>`."""
  return f"no: {row['excluded']}" if row.get("excluded") else "yes"


def spread(values) -> str:
  """`mean [min, max]` of `values` to 4 significant digits, NaN left out.

  Example:
    >>> from experiments.verdict.render.cells import spread
    >>> spread([1.0, 2.0, float("nan"), 4.5])
    '2.5 [1, 4.5]'
  """
  x = np.asarray(values, np.float64)
  return f"{np.nanmean(x):.4g} [{np.nanmin(x):.4g}, {np.nanmax(x):.4g}]"
