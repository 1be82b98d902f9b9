"""The section of a claim's report for any axis: a table of its points, then its texts.

`axis_markdown` tabulates the primary effect at every point of an axis with its 95% interval,
the primary threshold's test applied to that interval (`size_test`), the registered rule there
(`cells.reading_text`) and whether the point entered the trend fit; the axis (`Axis`) gives
the section's title, introduction, its own columns and what follows the table (its trend
sentence, computed from the fit's slope and interval).
"""

from __future__ import annotations

from experiments.verdict.axes import KINDS
from experiments.verdict.axis import Axis, size_test
from experiments.verdict.cells import fit_cell, reading_text, table
from experiments.verdict.claim import Claim
from experiments.verdict.stats import fmt


def axis_of(claim: Claim, name: str) -> Axis:
  """The axis that renders block `name` of a result: the claim's declared one, else a shared
  kind (`axes.KINDS`), else a bare `Axis` of that name."""
  for axis in claim.axes:
    if axis.name == name:
      return axis
  return KINDS[name](()) if name in KINDS else Axis(name)


def axis_markdown(axis: Axis, claim: Claim, results: dict, block: dict, h: str) -> list[str]:
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
    lo, hi = r["ci"]
    rows.append([*axis.cells(r, results, block), fmt(r["effect"]),
                 f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n/a (one seed)",
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


def axis_text(results: dict | None, name: str) -> str:
  """Axis `name` of a result in one table cell (`Axis.cell`), or `—` when it was not measured.

  Example:
    >>> from experiments.verdict.axis_report import axis_text
    >>> fit = {"slope": -0.012, "slope_ci": [-0.02, -0.004], "trend": "shrinks"}
    >>> axis_text({"axes": {"scale": {"rows": [], **fit}}}, "scale")
    'shrinks: slope -0.012 [-0.02, -0.004] per e-fold of params'
    >>> rows = [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]}, {"T": 1024, "effect": 0.3,
    ...         "ci": [0.2, 0.4]}]
    >>> axis_text({"axes": {"context": {"rows": rows, **fit}}}, "context")[:47]
    'T = 256: 0.1 [0, 0.2]; T = 1024: 0.3 [0.2, 0.4]'
    >>> axis_text({"axes": {}}, "budget")
    '—'
  """
  block = ((results or {}).get("axes") or {}).get(name)
  if not block:
    return "—"
  return KINDS[name](()).cell(block)
