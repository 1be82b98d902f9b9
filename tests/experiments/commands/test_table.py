"""The verdict tables (README's narrow one, `results/README.md`'s wide one) are generated from
`results/`, and they never disagree."""

import os
import shutil

import pytest

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.commands import table
from experiments.verdict.arithmetic import stats
from experiments.verdict.running import folders, runner
from experiments.verdict.running.refit import frozen_claim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_readme_table_matches_the_committed_results():
  assert table.check(os.path.join(ROOT, "README.md")) == []
  with open(os.path.join(ROOT, "README.md")) as f:
    found = table.readme_table(f.read())
  assert table.first_difference(table.findings_lines(), found) is None
  with open(os.path.join(folders.RESULTS_DIR, "README.md")) as f:
    found = table.readme_table(f.read())
  assert table.first_difference(table.table_lines(), found) is None


def test_every_committed_result_passes_the_schema_and_matches_its_claim():
  for cid, res in table.committed_runs().items():  # load_committed validates
    folder = os.path.join(folders.RESULTS_DIR, cid)
    frozen = jsonio.load_strict(os.path.join(folder, "claim.json"))
    assert frozen["id"] == cid and res["claim"] == cid
    assert not set(res["seeds"]) & set(res["tuning_seeds"])
    assert os.path.exists(os.path.join(folder, "report.md"))
    for here, _, names in os.walk(folder):  # small files only, kept findings included
      for name in names:
        assert os.path.getsize(os.path.join(here, name)) <= table.KEEP_MAX_BYTES, name


def test_kept_findings_give_the_committed_scale_and_context():
  """Each kept `size-<model>` / `context-T<T>` / `budget-x<k>` findings file recomputes its
  committed row."""
  checked, committed = [], table.committed_runs()
  for cid, res in committed.items():
    folder = os.path.join(folders.RESULTS_DIR, cid)
    th = frozen_claim(CLAIMS[cid], folder).primary  # the primary the kept run was read on
    rows = {CLAIMS[cid].axis_of(name).folder(r[CLAIMS[cid].axis_of(name).key]): r
            for name, block in res["axes"].items() for r in block["rows"]}
    for rel in folders.saved_findings(folder):
      sub = os.path.dirname(rel)
      if sub not in rows:
        continue
      found = jsonio.load_strict(os.path.join(folder, rel))
      assert found["key"]["seeds"] == res["seeds"], rel
      runs = {arm: {int(s): m for s, m in per.items()}
              for arm, per in found["findings"]["runs"].items()}
      if th.stat == "median":  # censoring-aware: an open end is kept as null, recomputes as inf
        ev = stats.evaluate(th, runs, res["seeds"])
        m, ci = ev["mean"], ev["interval"]
        got_ci = list(stats.open_interval(rows[sub]["ci"]))
      else:
        m, ci = stats.mean_ci95(stats.paired_values(runs, th.arm, th.metric, th.baseline,
                                                    res["seeds"]))
        got_ci = None
      # An undefined effect is kept as null (strict JSON) and recomputes as nan (or no CI).
      nan = float("nan")
      got_ci = got_ci or [nan if x is None else x for x in rows[sub]["ci"]]
      want_ci = list(ci) if ci else [nan, nan]
      effect = nan if rows[sub]["effect"] is None else rows[sub]["effect"]
      assert effect == pytest.approx(m, rel=1e-12, abs=1e-15, nan_ok=True), (cid, sub)
      assert got_ci == pytest.approx(want_ci, rel=1e-12, abs=1e-15, nan_ok=True), (cid, sub)
      checked.append((cid, sub))
  # dynamic-sparsity was the first run kept with its findings: every size and length of it
  # (v1 measured a context axis whose T = 16 is the registered run's; v2 has none)
  ds = committed["dynamic-sparsity"]
  assert len([c for c in checked if c[0] == "dynamic-sparsity"]) == (
      sum(len(a["rows"]) for a in ds["axes"].values()) - ("context" in ds["axes"]))


def test_check_names_the_first_differing_row(tmp_path, capsys):
  results = tmp_path / "results"
  results.mkdir()
  narrow, wide = table.findings_lines(str(results)), table.table_lines(str(results))
  for lines in (narrow, wide):
    assert len(lines) == 2 + len(CLAIMS) and "no committed run" in lines[2]
  readme, kept = tmp_path / "README.md", results / "README.md"

  def write(path, lines):
    path.write_text(f"intro\n{table.START}\n" + "\n".join(lines) + f"\n{table.END}\n")
  write(readme, narrow)
  write(kept, wide)
  assert table.main(["--check", str(readme), "--results", str(results)]) == 0
  for path, lines in ((readme, narrow), (kept, wide)):
    write(path, [*lines[:3], lines[3].replace("no committed run", "supported"), *lines[4:]])
    assert table.main(["--check", str(readme), "--results", str(results)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: the verdict table" in err and "row 4 differs" in err
    write(path, lines)
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


def _stand_in_run(tmp_path, quick: bool):
  """A real run folder of a stand-in `causal-mask` claim (same id and seeds, trivial run)."""
  import dataclasses

  from experiments.verdict import Claim, Sizes, Threshold

  @dataclasses.dataclass(frozen=True)
  class S(Sizes):
    n: int

  def run(spec):
    return {"runs": {"a": {s: {"m": 1.0 + s} for s in spec.seeds}}, "figures": []}

  real = CLAIMS["causal-mask"]
  stand_in = Claim(id=real.id, topic=real.topic, kind=real.kind, preface=real.preface,
                   hypothesis="h", refuted_if="r", seeds=real.seeds, trains=False,
                   thresholds=(Threshold("m", "a", "m", supports="> 0"),), run=run,
                   QUICK=S(1), FULL=S(2))
  _, run_dir = runner.run_claim(stand_in, quick=quick, root=str(tmp_path / "runs"),
                                log=lambda *_: None)
  return run_dir


def test_keep_copies_a_full_run_and_refuses_a_quick_one(tmp_path, monkeypatch):

  monkeypatch.setattr(folders, "git_revision", lambda: "0" * 40)  # a clean checkout
  results = tmp_path / "results"
  run_dir = _stand_in_run(tmp_path, quick=False)
  (results / "causal-mask").mkdir(parents=True)
  (results / "causal-mask" / "stale.png").write_bytes(b"old")
  dest = table.keep(run_dir, str(results))
  assert sorted(os.listdir(dest)) == ["claim.json", "report.md", "results.json"]
  kept = table.load_committed("causal-mask", str(results))
  assert kept["verdict"] == "supported" and kept["seeds"] == list(CLAIMS["causal-mask"].seeds)
  with pytest.raises(ValueError, match="quick run"):
    table.keep(_stand_in_run(tmp_path, quick=True), str(results))
  assert table.load_committed("causal-mask", str(results)) == kept  # the old one stays whole


def test_keep_refuses_a_run_finished_on_a_dirty_tree(tmp_path, monkeypatch):

  results = tmp_path / "results"
  for rev, why in (("1" * 40 + "-dirty", "a dirty tree"), (None, "no git checkout")):
    monkeypatch.setattr(folders, "git_revision", lambda rev=rev: rev)
    run_dir = _stand_in_run(tmp_path / str(rev), quick=False)
    with pytest.raises(ValueError, match=why) as e:
      table.keep(run_dir, str(results))
    assert "Fix: commit" in str(e.value) and "\n" not in str(e.value)
  assert not (results / "causal-mask").exists()


def test_a_result_names_the_library_versions_it_ran_with():
  """Re-training reproduces a verdict only up to library drift, so each run records versions."""
  import platform
  from importlib import metadata

  import jax

  env = folders.environment()
  assert env["jax"] == jax.__version__ and env["backend"] == jax.default_backend()
  for name in folders.LIBRARIES:
    assert env[name] == metadata.version(name), name
  assert env["python"] == platform.python_version()


def test_the_key_number_is_the_named_threshold_and_a_bad_key_is_refused():
  """eigenvalue-constrained's key number is its stress-rate gap, not its first threshold's
  0/1 divergence count; a `key` naming no threshold stops at registration."""
  import dataclasses

  from experiments.verdict.render import cells

  c = CLAIMS["eigenvalue-constrained"]
  res = table.load_committed(c.id)
  gap = next(e for e in res["effects"] if e["name"] == c.key)
  assert c.key != c.thresholds[0].name
  assert cells.key_number(res, c) == (f"{c.key}: {stats.fmt(gap['mean'])} nats "
                                      f"[{stats.fmt(gap['ci95'][0])}, {stats.fmt(gap['ci95'][1])}]")
  with pytest.raises(ValueError, match="key='gap' names no threshold"):
    dataclasses.replace(c, key="gap")


def test_a_split_sentence_shows_each_clause_verdict_in_its_cell():
  claim = CLAIMS["causal-mask"]
  res = {"seeds": list(claim.seeds), "verdict": "refuted", "version": 3, "clauses": [
      {"text": "sees the past", "thresholds": ["a"], "proof": True, "verdict": "supported",
       "reason": "r"},
      {"text": "not the future", "thresholds": ["b"], "proof": False, "verdict": "refuted",
       "reason": "r"}]}
  assert table.verdict_cell(res, claim) == ("refuted (v3): ① sees the past: supported (proof, "
                                            "verified exactly); ② not the future: refuted")
