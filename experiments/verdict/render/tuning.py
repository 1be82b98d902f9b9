"""A tuning record rendered once: the tuned-rate note, the grid panel, the edge control's number.

Every tuner of the claims returns one record (`experiments.lab.edge.Tuned.to_dict()`: `grid`,
`losses`, `losses_by_seed`, `seeds`, `excluded`, `spiked`, `at_edge`, `flat`, `extensions`,
the chosen `learning_rate` and its `index`). Results kept before that record hold older keyed
dicts (`val_loss`, `diverged` or `ended_diverged`, `edge`); `record` reads both into the one
shape, so what is rendered from a kept result is what it always was.

Example:
  >>> from experiments.verdict.render.tuning import rate_text, record
  >>> old = {"learning_rate": 0.003, "index": 1, "grid": [0.001, 0.003, 0.01],
  ...        "val_loss": [2.5, 2.25, 2.75], "diverged": [False] * 3, "at_edge": False}
  >>> record(old)["losses"], rate_text(old)
  ([2.5, 2.25, 2.75], '0.003 (loss 2.2500; grid 0.001 … 0.01, 3 rates)')
"""

from __future__ import annotations

import math

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def record(t: dict) -> dict:
  """`t` in the one shape of `Tuned.to_dict()`, from it or from an older keyed dict."""
  lr = float(t["learning_rate"])
  grid = list(t.get("grid") or [lr])
  losses = list(t.get("losses", t.get("val_loss")) or [])
  index = t.get("index")
  if index is None:
    index = grid.index(lr) if lr in grid else 0
  excluded = t.get("excluded", t.get("diverged", t.get("ended_diverged"))) or []
  return {"learning_rate": lr, "index": int(index), "grid": grid, "losses": losses,
          "excluded": [bool(x) for x in excluded],
          "at_edge": bool(t.get("at_edge", t.get("edge", False))),
          "losses_by_seed": list(t.get("losses_by_seed", t.get("val_loss_by_seed")) or []),
          "seeds": list(t.get("seeds") or []), "spiked": list(t.get("spiked") or []),
          "flat": bool(t.get("flat", False)),
          "extensions": int(t.get("extensions", 0))}


def tuned(t: dict) -> bool:
  """Whether the record is a search (its losses were read), not a fixed rate."""
  return bool(record(t)["losses"])


def chosen_loss(t: dict) -> float:
  """The loss the choice read at the chosen rate (NaN for a fixed rate)."""
  r = record(t)
  return float(r["losses"][r["index"]]) if r["losses"] else math.nan


def rate_text(t: dict, *, loss: bool = True) -> str:
  """`0.003 (loss 2.2500; grid 0.001 … 0.01, 3 rates, at an edge)`: one record in a note."""
  r = record(t)
  where = f"grid {r['grid'][0]:g} … {r['grid'][-1]:g}, {len(r['grid'])} rates"
  at = ", flat" if r["flat"] else ", at an edge" if r["at_edge"] else ""
  read = f"loss {chosen_loss(r):.4f}; " if loss and r["losses"] else ""
  return f"{r['learning_rate']:g} ({read}{where}{at})"


def tuned_note(records: dict, *, read: str, fixed: str = "not tuned (quick)",
               per_rate: bool = False) -> str:
  """The tuned-rate note of a run: each arm's rate and its search, in one markdown line.

  Args:
    records: `{arm: record}` in the order the arms are named.
    read: what the choice read, e.g. `lowest final val loss after 120 steps, mean over seeds
      [100, 101]`.
    fixed: how a run with no search says so.
    per_rate: also list every rate run with its loss (`*`: out of the choice, ended diverged).

  Example:
    >>> from experiments.verdict.render.tuning import tuned_note
    >>> tuned_note({"adamw": {"learning_rate": 0.003, "grid": [0.003]}}, read="r")
    '- Peak rates, not tuned (quick): adamw 0.003.'
  """
  if not any(tuned(t) for t in records.values()):
    return (f"- Peak rates, {fixed}: "
            + "; ".join(f"{a} {record(t)['learning_rate']:g}" for a, t in records.items()) + ".")
  out = (f"- Tuned peak rates ({read}): "
         + "; ".join(f"{a} {rate_text(t)}" for a, t in records.items()) + ".")
  if per_rate:
    out += (" Tuning-seed losses per rate run (* out of the choice: ended diverged): "
            + "; ".join(f"{a}: {losses_text(t)}" for a, t in records.items()) + ".")
  return out


def losses_text(t: dict) -> str:
  """`0.001 3.211, 0.01 2.904*`: every rate of a search with its loss (`*`: excluded)."""
  r = record(t)
  return ", ".join(f"{g:g} {v:.3f}{'*' if x else ''}"
                   for g, v, x in zip(r["grid"], r["losses"], r["excluded"], strict=True))


def edges(records: dict) -> float:
  """How many of the records' chosen rates sit at an edge of their grid, a flat arm's (whose
  best rate's place is noise) left out: the edge control's number."""
  return float(sum(record(t)["at_edge"] and not record(t)["flat"] for t in records.values()))


def grid_panel(records: dict, *, title: str, ylabel: str, fixed: str = "not tuned") -> dict:
  """The grid panel of a figure (`figures.draw`), as data: each arm's loss over its grid,
  its chosen rate starred; a run with no search says so in words.

  Example:
    >>> from experiments.verdict.render.tuning import grid_panel
    >>> grid_panel({"a": {"learning_rate": 0.01, "grid": [0.01]}}, title="t", ylabel="y")["text"]
    'quick run: not tuned\\n(a at 0.01)'
  """
  if not any(tuned(t) for t in records.values()):
    at = ", ".join(f"{a} at {record(t)['learning_rate']:g}" for a, t in records.items())
    return {"title": "tuning", "text": f"quick run: {fixed}\n({at})"}
  lines = []
  for (arm, t), color in zip(records.items(), COLORS, strict=False):
    r = record(t)
    y = [v if math.isfinite(v) else math.nan for v in r["losses"]]
    lines += [{"x": r["grid"], "y": y, "style": "o-", "color": color,
               "label": f"{arm} (mean of seeds)" if len(r["seeds"]) > 1 else arm},
              {"x": [r["learning_rate"]], "y": [chosen_loss(r)], "style": "*", "ms": 14,
               "color": color, "label": f"{arm} chosen: {r['learning_rate']:g}"}]
  return {"title": title, "xlabel": "peak learning rate", "ylabel": ylabel, "xscale": "log",
          "lines": lines, "legend": 8}


def on_one_seed(seed: int, steps: int, grid, extend: int) -> str:
  """What a search on one tuning seed read, with the edge rule: a tuned-rate note's `read`."""
  return (f"lowest final loss on seed {seed} after {steps} steps among runs that did not end "
          f"diverged; grid {list(grid)}, extended a step beyond an edge that won, at most "
          f"{extend}×")


def stress_note(stress: float, found: bool, *, arm: str, tuned: bool) -> str:
  """Where the stress rate comes from: the smallest rate at which `arm` ended diverged on the
  tuning seed, else the grid's largest (`lab.norm_training.stress_rate`'s rule).

  Example:
    >>> from experiments.verdict.render.tuning import stress_note
    >>> stress_note(0.1, True, arm="none", tuned=True)[:48]
    'Stress rate 0.1: the smallest rate run at which '
  """
  why = ("fixed (quick), the last rate of the grid" if not tuned else
         f"the smallest rate run at which `{arm}` ended diverged on the tuning seed" if found
         else f"no rate run made `{arm}` end diverged on the tuning seed, so the largest (the "
         "registered rule; the stress thresholds are read there all the same)")
  return f"Stress rate {stress:g}: {why}."
