"""The README's verdict table is generated from `results/`, and the two never disagree."""

import os
import shutil

import pytest

from experiments import jsonio
from experiments.claims import CLAIMS, table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_table_matches_the_committed_results():
  with open(os.path.join(ROOT, "README.md")) as f:
    found = table.readme_table(f.read())
  assert table.first_difference(table.table_lines(), found) is None


def test_every_committed_result_passes_the_schema_and_matches_its_claim():
  for cid, res in table.committed_runs().items():  # load_committed validates
    folder = os.path.join(table.RESULTS_DIR, cid)
    frozen = jsonio.load_strict(os.path.join(folder, "claim.json"))
    assert frozen["id"] == cid and res["claim"] == cid
    assert not set(res["seeds"]) & set(res["tuning_seeds"])
    assert os.path.exists(os.path.join(folder, "report.md"))
    for name in os.listdir(folder):  # small files only
      assert os.path.getsize(os.path.join(folder, name)) < 2_000_000, name


def test_check_names_the_first_differing_row(tmp_path, capsys):
  results = tmp_path / "results"
  results.mkdir()
  lines = table.table_lines(str(results))
  assert len(lines) == 2 + len(CLAIMS) and "no committed run" in lines[2]
  readme = tmp_path / "README.md"
  readme.write_text(f"intro\n{table.START}\n" + "\n".join(lines) + f"\n{table.END}\n")
  assert table.main(["--check", str(readme), "--results", str(results)]) == 0
  lines[3] = lines[3].replace("no committed run", "supported")
  readme.write_text(f"{table.START}\n" + "\n".join(lines) + f"\n{table.END}\n")
  assert table.main(["--check", str(readme), "--results", str(results)]) == 1
  assert "row 4 differs" in capsys.readouterr().err
  readme.write_text("no markers")
  assert table.main(["--check", str(readme), "--results", str(results)]) == 2


def test_a_quick_or_broken_result_is_refused(tmp_path):
  folder = tmp_path / "causal-mask"
  folder.mkdir()
  jsonio.dump_strict({"claim": "causal-mask"}, str(folder / "results.json"))
  with pytest.raises(ValueError, match="schema"):
    table.load_committed("causal-mask", str(tmp_path))
  shutil.rmtree(folder)
  assert table.load_committed("causal-mask", str(tmp_path)) is None
