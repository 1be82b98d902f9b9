"""The section of a claim's report for any axis: a table of its points, then its texts.

`axis_markdown` tabulates the primary effect at every point of an axis with its 95% interval,
the primary threshold's test applied to that interval (`size_test`), the registered rule there
(`cells.reading_text`) and whether the point entered the trend fit; the axis (`Axis`) gives
the section's title, introduction, its own columns and what follows the table (its trend
sentence, computed from the fit's slope and interval).
"""

from __future__ import annotations

from experiments.verdict.arithmetic.rule import size_test
from experiments.verdict.arithmetic.stats import fmt, interval_text
from experiments.verdict.render.cells import fit_cell, reading_text, table


def axis_markdown(axis, claim, results: dict, block: dict, h: str) -> list[str]:
  """One axis's section: its table (the axis's columns, the effect, its 95% interval, the
  primary threshold's test, the registered rule, whether the point is in the trend fit), then
  what the axis writes beneath it, then, for an axis added onto a finished result, when."""
  th = claim.primary
  unit = f" ({th.unit})" if th.unit else ""
  lines = [f"{h}# {axis.title()}", "", axis.intro(claim, results, block, f"*{th.name}*{unit}"),
           ""]
  read = any("verdict" in r for r in block["rows"])
  fitted = "points" in block
  rows = []
  for r in block["rows"]:
    outcome, why = size_test(th, r)
    rows.append([*axis.cells(r, results, block), fmt(r["effect"]),
                 interval_text(*r["ci"]) or "n/a (one seed)",
                 f"{outcome}: {why}", *([reading_text(r)] if read else []),
                 *([fit_cell(r)] if fitted else [])])
  at = f"at this {axis.word}"
  lines += table([*axis.headers(block), "effect", "95% CI", f"primary threshold {at}",
                  *([f"every threshold and control {at}"] if read else []),
                  *(["in the trend fit"] if fitted else [])], rows)
  lines += axis.tail(claim, results, block)
  if added := block.get("added"):
    seconds = f"{added['runtime_s']:.0f} s here; " if added["runtime_s"] is not None else ""
    lines += [f"This axis was added onto the finished result at git `{added['git']}` "
              f"({seconds}points saved earlier are reused, not run again). The verdict and the "
              "other axes above were not run again.", ""]
  return lines


def axis_text(claim, results: dict | None, name: str) -> str:
  """Axis `name` of a result in one table cell (`Axis.cell` of `claim.axis_of(name)`), or `—`
  when it was not measured.

  Example:
    >>> from experiments.verdict.render.section import axis_text
    >>> axis_text(None, {"axes": {}}, "budget")
    '—'
  """
  block = ((results or {}).get("axes") or {}).get(name)
  if not block:
    return "—"
  return claim.axis_of(name).cell(block)
