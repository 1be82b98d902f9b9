"""`make demo` shows the committed findings as README's table has them, and its quick runs
decide nothing (`experiments.commands.findings`)."""

import os
import re

from experiments.claims import CLAIMS
from experiments.commands import findings, table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VERDICT_WORDS = re.compile(r"\b(supported|refuted|inconclusive)\b", re.IGNORECASE)


def _readme_rows() -> dict[str, list[str]]:
  """README's findings table: `{claim id: [sentence, verdict, Holm, replicates, key number,
  model]}`."""
  with open(os.path.join(ROOT, "README.md")) as f:
    lines = table.readme_table(f.read())
  rows = {}
  for line in lines[2:]:
    cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    rows[cells[0].strip("`")] = cells[1:]
  return rows


def test_the_demo_opens_with_every_committed_verdict_as_the_readme_has_it():
  rows = _readme_rows()
  assert list(rows) == list(CLAIMS)
  lines = findings.committed_lines()
  for cid, (_, verdict, holm, replicates, key, model) in rows.items():
    line = next(x for x in lines if re.match(rf"\s+\d+ {re.escape(cid)} ", x))
    assert f" {verdict} " in line and key.replace("`", "") in line, (cid, line)
    assert holm == "—" or f"  {holm};" in line, (cid, line)
    assert replicates == "—" or f"replicates v-1: {replicates};" in line, (cid, line)
    assert f"({model.replace('`', '')})" in line
    kept = table.load_committed(cid)
    assert verdict.split(" ")[0] == kept["verdict"]  # the results/ file, not only the README
  assert not [x for x in lines if x.lstrip().startswith("!")]  # every kept file replays


def test_a_pipeline_check_line_carries_no_verdict_word():
  for verdict in ("supported", "refuted", "inconclusive"):
    res = {"seeds": [0], "verdict": verdict, "quick": True}
    line = findings.pipeline_line(res, 12.3, "runs/claims/muon/x-quick/report.md")
    assert findings.PIPELINE in line and not VERDICT_WORDS.search(line), line


def test_the_quick_report_reads_verdicts_only_from_the_committed_runs(tmp_path):
  claims = list(CLAIMS.values())
  kept = {cid: table.replayed(cid) for cid in CLAIMS}
  entries, results = [], {}
  for c in claims:
    folder = tmp_path / "claims" / c.id / "run"
    folder.mkdir(parents=True)
    quick = {**kept[c.id], "quick": True, "seeds": [0], "verdict": "supported"}
    results[c.id] = kept[c.id] if c.id in findings.REMEASURED else quick
    entries.append({"claim": c.id, "verdict": results[c.id]["verdict"], "reason": "",
                    "results": str(folder / "results.json")})
  text = "\n".join(findings.quick_markdown(claims, entries, results, runtime_s=1.0,
                                           opening=["ok"], tour_dir=str(tmp_path / "tour")))
  committed, rest = text.split("## Measured again now")
  assert "\n".join(table.findings_lines()) in committed
  checks = rest.split("## Pipeline checks")[1]
  assert checks.count("ran end to end") == len(CLAIMS) - len(findings.REMEASURED)
  assert not VERDICT_WORDS.search(checks)


def test_a_claim_measured_again_is_shown_beside_its_kept_number():
  claim = CLAIMS["softmax-kernel"]
  kept = table.replayed(claim.id)
  line = findings.remeasure_line(claim, kept, kept, 20.4)
  assert line.startswith("valid-kernel heads, trained, bidirectional: now 0 fraction of heads "
                         "[0, 0], kept 0 fraction of heads [0, 0] (seeds 10, 11, 12, 13, 14, 20 s)")
  assert line.endswith("the kept verdict again")
  moved = {**kept, "verdict": "supported"}
  assert "VERDICT DIFFERS: now supported, kept refuted" in findings.remeasure_line(
      claim, moved, kept, 20.4)
  assert set(findings.REMEASURED) <= {c.id for c in CLAIMS.values() if c.reads_base}

