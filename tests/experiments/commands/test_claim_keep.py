"""`claim ID --keep` checks fresh seeds before it computes anything (issue 47 item 2)."""

import dataclasses

from experiments.claims import CLAIMS
from experiments.commands import tour
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running import history


def test_keep_of_a_new_version_on_kept_seeds_stops_before_any_compute(monkeypatch, capsys):
  kept = CLAIMS["softmax-kernel"]
  seen = history.kept("softmax-kernel")[-1]["seeds"]  # seeds a kept version already ran on
  newer = dataclasses.replace(
      kept, version=kept.version + 1, seeds=tuple(seen),
      revisions=(*kept.revisions, Revision(kept.version + 1, "protocol", "a new reading")),
      run=lambda spec: (_ for _ in ()).throw(AssertionError("computed before the check")))
  monkeypatch.setitem(tour.CLAIMS, "softmax-kernel", newer)
  assert tour.claim_main(["softmax-kernel", "--keep", "--out", "/nonexistent-runs"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f"error: --keep: 'softmax-kernel' v{kept.version + 1} runs on seeds")
  assert "Fix: register seeds and tuning_seeds outside" in err and "\n" not in err
