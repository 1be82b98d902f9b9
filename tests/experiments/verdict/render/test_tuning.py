"""A tuning record rendered once: the old keyed dicts of kept results and the one record
(`lab.edge.Tuned.to_dict()`) read the same, and the note of a kept result renders again."""

import json
import os

import pytest

from experiments.lab import edge
from experiments.verdict.render import findings, tuning
from experiments.verdict.running.folders import RESULTS_DIR

OLD = {"learning_rate": 0.01, "index": 1, "grid": [0.001, 0.01, 0.1],
       "val_loss": [2.5, 2.0, 3.0], "val_loss_by_seed": [[2.5], [2.0], [3.0]],
       "diverged": [False, False, True], "spiked": [False, True, False], "seeds": [100],
       "at_edge": False}


def test_an_old_keyed_dict_and_the_record_read_the_same():
  new = edge.Tuned(learning_rate=0.01, index=1, grid=(0.001, 0.01, 0.1), losses=(2.5, 2.0, 3.0),
                   excluded=(False, False, True), at_edge=False, losses_by_seed=((2.5,), (2.0,),
                                                                                 (3.0,)),
                   seeds=(100,), spiked=(False, True, False)).to_dict()
  assert tuning.record(OLD) == tuning.record(new) == new
  assert tuning.rate_text(OLD) == "0.01 (loss 2.0000; grid 0.001 … 0.1, 3 rates)"
  other = {"learning_rate": 0.1, "grid": [0.01, 0.1], "val_loss": [2.0, 1.5],
           "ended_diverged": [False, False], "edge": True}  # eigenvalue-constrained, lora keys
  r = tuning.record(other)
  assert (r["index"], r["at_edge"], r["excluded"]) == (1, True, [False, False])
  assert tuning.edges({"a": OLD, "b": other}) == 1.0


def test_the_tuned_note_and_the_grid_panel():
  note = tuning.tuned_note({"adamw": OLD}, read="lowest loss")
  assert note == ("- Tuned peak rates (lowest loss): adamw 0.01 (loss 2.0000; grid 0.001 … 0.1, "
                  "3 rates).")
  fixed = edge.untuned(3e-3).to_dict()
  assert not tuning.tuned(fixed) and tuning.tuned(OLD)
  panel = tuning.grid_panel({"adamw": OLD}, title="t", ylabel="y")
  assert panel["lines"][0]["y"] == [2.5, 2.0, 3.0] and panel["lines"][1]["x"] == [0.01]
  assert "text" in tuning.grid_panel({"adamw": fixed}, title="t", ylabel="y")


def test_findings_render_declared_notes_and_figures(tmp_path):
  line = {"x": [1, 2], "y": [2.0, 1.0], "style": "o-", "label": "loss"}
  out = findings.rendered({"notes": ["A sentence.", "- kept as it was", "| a | b |", "",
                                     {"tuned": {"a": OLD}, "read": "r"}],
                           "figures": ["old.png", {"name": "new.png", "panels": [
                               {"title": "t", "lines": [line], "hlines": [{"y": 1.5}],
                                "legend": 8}, {"text": "words"}]}]}, str(tmp_path))
  assert out["notes"][:4] == ["- A sentence.", "- kept as it was", "| a | b |", ""]
  assert out["notes"][4].startswith("- Tuned peak rates (r): a 0.01")
  assert out["figures"] == ["old.png", "new.png"] and (tmp_path / "new.png").stat().st_size


@pytest.mark.parametrize("cid", ["muon"])
def test_a_kept_tuned_note_renders_again_from_its_old_records(cid):
  res = json.load(open(os.path.join(RESULTS_DIR, cid, "results.json")))
  setup = res["config"]["setup"]
  # v3's read (`experiments.claims.muon._notes`); the note v2 kept ended before the `;`.
  read = (f"lowest final val loss after {setup['budgets'][-1]} steps, mean over seeds "
          f"{setup['tuning_seeds']}; a non-hidden search runs at its arm's chosen hidden rate")
  assert findings.note({"tuned": setup["tuned"], "read": read}) == res["notes"][0]
