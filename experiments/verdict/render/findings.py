"""A claim's findings made readable: the notes and figures it declared as data, rendered.

A claim's run returns data. Its `notes` are sentences (each becomes a line `- sentence` of the
report's notes), a tuning record's note, `{"tuned": {arm: record}, "read": ...}`
(`tuning.tuned_note`), or a table, `{"table": {"header": [...], "rows": [[...], ...]}}` (its
cells already text; `table_lines`); its `figures` are declared figures (`figures.draw`).
`rendered` turns both into what `results.json` keeps: markdown lines and the names of the
drawn files. A line that is markdown already (`- ...`, a table row `| ...`, or empty) and a
figure that is a file name already are kept as they are: the findings a run saved before, read
again on `--resume`.

Example:
  >>> from experiments.verdict.render.findings import rendered
  >>> rec = {"learning_rate": 0.01, "grid": [0.01]}
  >>> rendered({"notes": ["Model `m`.", {"tuned": {"a": rec}, "read": "r"}]}, ".")["notes"]
  ['- Model `m`.', '- Peak rates, not tuned (quick): a 0.01.']
"""

from __future__ import annotations

from experiments.verdict.render import figures, tuning


def note(item) -> str:
  """One note item as a markdown line."""
  if isinstance(item, dict):
    return tuning.tuned_note(item["tuned"], read=item["read"],
                             **{k: item[k] for k in ("fixed", "per_rate") if k in item})
  if item == "" or item.startswith(("- ", "| ")):
    return item
  return f"- {item}"


def table_lines(table: dict) -> list[str]:
  """A declared table as markdown lines, after an empty line.

  Example:
    >>> table_lines({"header": ["arm", "ratio"], "rows": [["r8", "8.00"]]})
    ['', '| arm | ratio |', '| --- | --- |', '| r8 | 8.00 |']
  """
  row = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"
  return ["", row(table["header"]), row(["---"] * len(table["header"])),
          *(row(r) for r in table["rows"])]


def rendered(findings: dict, run_dir: str) -> dict:
  """`findings` with its notes as markdown lines and its declared figures drawn in `run_dir`."""
  out = dict(findings)
  if "notes" in findings:
    out["notes"] = [line for n in findings["notes"] for line in (
        table_lines(n["table"]) if isinstance(n, dict) and "table" in n else [note(n)])]
  if "figures" in findings:
    out["figures"] = [figures.draw(f, run_dir) if isinstance(f, dict) else f
                      for f in findings["figures"]]
  return out
