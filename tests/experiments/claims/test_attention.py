"""The attention claims (psd-attention, sliding-window, dynamic-sparsity) together: declarations,
the arms' non-inferiority rule, tuning on tuning seeds."""

import dataclasses
import math
import types

import numpy as np
import pytest

from experiments import data as data_lib
from experiments.claims import CLAIMS, dynamic_sparsity, psd_attention, sliding_window
from experiments.lab import attention_arms
from experiments.verdict import Threshold
from experiments.verdict.arithmetic import rule

IDS = ("psd-attention", "sliding-window", "dynamic-sparsity")


# ------------------------------------------------------------------ the declarations


def test_claims_registered_built_and_pre_registered():
  for cid in IDS:
    c = CLAIMS[cid]
    assert c.built and c.anchors
    assert c.seeds == (10, 11, 12, 13, 14) and c.tuning_seeds == (110, 111)  # issue 47
    assert not set(c.seeds) & set(c.tuning_seeds)
    proven = {n for cl in c.clauses if cl.proof for n in cl.thresholds}
    for th in c.thresholds + tuple(t for e in c.extensions for t in e.thresholds):
      assert th.unit, th.name
      if not th.control and th.name not in proven:  # a comparison carries its margin; a
        assert th.margin is not None and th.margin > 0, th.name  # proof's check is exact
      # Labels must not carry sizes that only the full run has (quick runs T = 128, not 256).
      assert "T = " not in th.name and "%" not in th.name, th.name
  assert CLAIMS["psd-attention"].theorem and CLAIMS["sliding-window"].theorem


@pytest.mark.parametrize("direction, values, expected", [
    ("<", (0.001, 0.004, 0.002), "supported"),    # cost inside the margin
    ("<", (0.030, 0.035, 0.040), "refuted"),      # cost beyond it
    ("<", (0.000, 0.030, 0.015), "inconclusive"),  # straddles it
    (">", (-0.01, 0.02, 0.0), "supported"),       # score drop smaller than the margin
    (">", (-0.3, -0.25, -0.2), "refuted"),
])
def test_within_is_non_inferiority_by_the_runners_rule(direction, values, expected):
  margin = 0.02 if direction == "<" else 0.1
  th = Threshold("cost", "new", "m", unit="u", **attention_arms.within(margin, direction))
  runs = {"new": {s: {"m": v} for s, v in enumerate(values)}}
  assert rule.decide((th,), runs, (0, 1, 2))[0] == expected


def test_within_refuses_a_zero_margin_and_unknown_direction():
  with pytest.raises(ValueError, match="margin"):
    attention_arms.within(0.0)
  with pytest.raises(ValueError, match="direction"):
    attention_arms.within(0.1, ">=")


def test_ended_diverged_is_the_end_not_a_spike():
  got = attention_arms.ended_diverged([1.0, math.nan, math.inf, math.log(256) + 1e-3, 5.0], 256)
  assert got.tolist() == [False, True, True, True, False]


# ------------------------------------------------------------------ tuning on tuning seeds


def test_tuned_arm_chooses_on_tuning_seeds_and_reports_at_one_rate(monkeypatch):
  calls = []

  def fake(cfg, seeds, *, learning_rates, **kw):
    calls.append((tuple(seeds), tuple(learning_rates)))
    # The reported seeds would prefer 1e-3; the tuning seed prefers 3e-3.
    loss = {100: [2.5, 2.0], 0: [1.0, 3.0], 1: [1.0, 3.0]}
    grid = [[loss[s][(1e-3, 3e-3).index(lr)] for s in seeds] for lr in learning_rates]
    best = int(np.argmin(np.mean(grid, 1)))
    return {"per_seed": {s: {"loss": grid[best][j]} for j, s in enumerate(seeds)},
            "lr": learning_rates[best], "params": {}, "val_loss_grid": grid}

  monkeypatch.setattr(attention_arms, "train_arm", fake)
  cfg = types.SimpleNamespace(vocab_size=256)  # ln V: where a run ended diverged
  out = attention_arms.tuned_arm(cfg, (0, 1), tuning_seeds=(100,), grid=(1e-3, 3e-3),
                                 data="x", steps=1, batch_size=1, seq_len=1)
  assert calls == [((100,), (1e-3, 3e-3)), ((0, 1), (3e-3,))]
  assert out["lr"] == 3e-3 and out["tuning"]["losses"] == [2.5, 2.0]
  calls.clear()
  assert attention_arms.tuned_arm(None, (0,), tuning_seeds=(100,), grid=(3e-3,), data="x",
                                  steps=1, batch_size=1, seq_len=1)["tuning"]["losses"] == []
  assert calls == [((0,), (3e-3,))]
  with pytest.raises(ValueError, match="both tune and report"):
    attention_arms.tuned_arm(None, (0, 100), tuning_seeds=(100,), grid=(1e-3, 3e-3))


def test_reported_runs_read_the_split_they_are_given_and_tuning_reads_val(monkeypatch):
  """issue 47: `train_arm(split="test")` validates (and scores a task) on the test split;
  `tune_rate` drops `split`, so every tuning run reads `val` (and a test batch drawn while
  tuning would be refused by `data.no_test`)."""
  from experiments.train import sweep

  seen = []
  real = sweep.train_many

  def spy(*a, **kw):
    seen.append(kw["eval_split"])
    return real(*a, **kw)

  monkeypatch.setattr(attention_arms.sweep, "train_many", spy)
  cfg = attention_arms.base_config(d_model=16, n_heads=2)
  kw = dict(data="task:copy", steps=2, batch_size=2, seq_len=8, exact_match=True,
            em_batches=1)
  test = attention_arms.train_arm(cfg, (0,), learning_rates=(1e-3,), split="test", **kw)
  val = attention_arms.train_arm(cfg, (0,), learning_rates=(1e-3,), **kw)
  assert seen == ["test", "val"] and test["per_seed"][0]["loss"] != val["per_seed"][0]["loss"]
  src = data_lib.source("task:copy", 8)
  for split, out in (("test", test), ("val", val)):
    got = attention_arms.task_scores(out["params"][0], cfg, src, 0, n_batches=1, batch_size=2,
                                     split=split)
    assert got["exact_match"] == out["per_seed"][0]["exact_match"]
  seen.clear()
  attention_arms.tune_rate(cfg, tuning_seeds=(110, 111), grid=(1e-3, 2e-3), split="test",
                           data="task:copy", steps=2, batch_size=2, seq_len=8)
  assert seen == ["val"]
  with data_lib.no_test("a tuner"), pytest.raises(ValueError, match="tuning reads 'val'"):
    attention_arms.train_arm(cfg, (0,), learning_rates=(1e-3,), split="test", **kw)


def test_tune_rate_extends_a_winning_edge_once_only_when_asked(monkeypatch):
  """The edge rule (opt-in): a best rate at the top runs one rate a step beyond it, once; a
  rate still at the edge is flagged; a rate that ended diverged never wins; extend=0 runs the
  grid alone."""
  calls = []

  def fake(cfg, seeds, *, learning_rates, **kw):
    calls.append(tuple(learning_rates))
    loss = {1e-3: 3.0, 2e-3: 2.5, 4e-3: 2.2, 8e-3: 2.0, 1.6e-2: 1.9, 3.2e-2: math.nan}
    return {"val_loss_grid": [[loss[round(lr, 6)]] for lr in learning_rates],
            "lr": learning_rates[-1]}

  monkeypatch.setattr(attention_arms, "train_arm", fake)
  cfg = types.SimpleNamespace(vocab_size=256)
  kw = dict(tuning_seeds=(100,), data="x", steps=1, batch_size=1, seq_len=1)
  plain = attention_arms.tune_rate(cfg, grid=(1e-3, 2e-3, 4e-3, 8e-3), **kw)
  assert calls == [(1e-3, 2e-3, 4e-3, 8e-3)] and plain["learning_rate"] == 8e-3
  assert plain["at_edge"] and plain["extensions"] == 0  # no extension without extend
  calls.clear()
  once = attention_arms.tune_rate(cfg, grid=(1e-3, 2e-3, 4e-3, 8e-3), extend=1, **kw)
  assert calls == [(1e-3, 2e-3, 4e-3, 8e-3), (1.6e-2,)]
  assert once["learning_rate"] == pytest.approx(1.6e-2) and once["at_edge"]
  assert once["grid"] == pytest.approx([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
  inside = attention_arms.tune_rate(cfg, grid=(4e-3, 8e-3, 1.6e-2, 3.2e-2), extend=1, **kw)
  assert inside["learning_rate"] == pytest.approx(1.6e-2) and not inside["at_edge"]
  assert inside["excluded"] == [False, False, False, True]
  with pytest.raises(ValueError, match="increasing"):
    attention_arms.tune_rate(cfg, grid=(8e-3, 4e-3), extend=1, **kw)


def test_full_sizes_tune_and_quick_sizes_do_not():
  for mod in (psd_attention, sliding_window, dynamic_sparsity):
    assert len(mod.FULL.rates) >= 4 and len(mod.QUICK.rates) == 1


def test_sizes_are_frozen_dataclasses():
  for mod in (psd_attention, sliding_window, dynamic_sparsity):
    with pytest.raises(dataclasses.FrozenInstanceError):
      mod.FULL.learning_rates = (1.0,)
