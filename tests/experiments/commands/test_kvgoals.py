"""The kvgoals command: held-out prose windows and the summary that reads each goal from its
interval."""

import numpy as np
import pytest

from experiments import data


def test_kv_goals_prose_windows_are_held_out_prose():
  from experiments.commands import kvgoals
  files = data.mixed_files()
  prose = [f for f in files["test"] if data.file_kind(f) == "prose"]
  assert prose and not set(prose) & (set(files["train"]) | set(files["val"]))
  raw = kvgoals.prose_bytes()
  assert len(raw) == sum(len(data.read_files((f,))) for f in prose)
  w = kvgoals.prose_windows(32, 5)
  assert w.shape == (5, 33)
  np.testing.assert_array_equal(w[0], raw[:33])  # evenly spaced from the first byte ...
  np.testing.assert_array_equal(w[-1], raw[-33:])  # ... to the last
  with pytest.raises(ValueError, match="T=0"):
    kvgoals.prose_windows(0, 5)


def test_kv_goals_summary_reads_each_goal_from_its_interval():
  from experiments.commands import kvgoals
  per = {s: {"r8-loss": {"loss_rise": r8, "kv_compression": 8.0},
             "r16-cal": {"loss_rise": r16, "kv_compression": 16.0},
             "r32q4-loss": {"loss_rise": 0.03, "kv_compression": 31.0}}
         for s, (r8, r16) in enumerate([(0.005, 0.009), (0.006, 0.012), (0.004, 0.010)])}
  s = kvgoals.summary(per)
  assert s["r8-loss"]["met"] is True and s["r8-loss"]["loss_rise_pct"] == pytest.approx(0.5)
  assert s["r16-cal"]["met"] is None  # mean 1.03%, interval straddles 1%
  assert s["r16-cal"]["margin_pct"] == pytest.approx(1 - 31 / 30)
  assert s["r32q4-loss"]["met"] is False  # the ratio 31 < 32, whatever the loss
  assert "r32q4-cal" not in s
