"""`train_many`'s strategies: a run's losses do not depend on how, or beside which runs, it trained.

Issue 50: every run stays a pure function of (seed, rate, steps, data). Each strategy trains
the same grid, and subsets of it train alone or in other groups; every run's training and
validation losses (the latter read from its final parameters) agree to 1e-6 relative, on two
sizes (a 1-layer and a 2-layer model). Parameters themselves are not compared entry by entry:
an entry whose gradient is at rounding level gets an AdamW step of `lr · sign(noise)`, so a
last-bit difference in such a gradient moves it by up to the rate while no loss moves.
"""

import jax
import numpy as np
import pytest

import transformer
from experiments.lab import optimizers, tuning
from experiments.train import sweep

SEEDS, RATES, STEPS = (0, 1, 2), (3e-3, 3e-2), 10
SIZES = {"d16-L1": transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=32),
         "d32-L2": transformer.preset("tiny", d_model=32, n_layers=2, n_heads=2, max_len=32)}


def _train(cfg, strategy, seeds=SEEDS, rates=RATES):
  return sweep.train_many(cfg, tuning.on_budget(optimizers.adamw_arm(), STEPS), seeds=seeds,
                          learning_rates=rates, steps=STEPS, data="stdlib", batch_size=4,
                          seq_len=32, eval_every=4, eval_batches=1, strategy=strategy)


def _close(a, b, what):
  np.testing.assert_allclose(a, b, rtol=1e-6, atol=0, err_msg=what)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_strategy_and_grouping_gives_each_run_the_same_losses(size):
  cfg = SIZES[size]
  ref = _train(cfg, "vmap")
  assert np.ptp(ref.loss[..., -1]) > 1e-2  # the runs differ, so agreement is not vacuous
  for strategy in ("sequential", "dispatch"):
    r = _train(cfg, strategy)
    _close(r.loss, ref.loss, f"{size} {strategy}: training loss")
    _close(r.val_loss, ref.val_loss, f"{size} {strategy}: validation loss")
  # One run alone, and a seed in another group of seeds at another rate set.
  alone = _train(cfg, "auto", seeds=(2,), rates=(3e-2,))
  _close(alone.loss[0, 0], ref.loss[1, 2], f"{size}: run (seed 2, 3e-2) alone")
  regroup = _train(cfg, "vmap", seeds=(1, 0), rates=(3e-2,))
  _close(regroup.loss[0, 0], ref.loss[1, 1], f"{size}: seed 1 grouped with seed 0 only")


def test_auto_is_the_measured_choice_and_a_bad_strategy_names_the_fix():
  assert sweep.choose_strategy(20, "cpu") == "dispatch"
  assert sweep.choose_strategy(5, "gpu") == "vmap"
  with pytest.raises(ValueError, match=r"strategy='threads' is unknown\. Fix: one of"):
    _train(SIZES["d16-L1"], "threads")


def test_eval_split_reads_test_windows_and_is_refused_while_tuning():
  """`eval_split="test"` validates on test windows (same training losses, another validation
  loss, equal to the model's own loss on those windows); inside `no_test` it raises."""
  from experiments import data
  from experiments.data.batch import no_test

  cfg = SIZES["d16-L1"]
  kw = dict(seeds=(0,), learning_rates=(3e-3,), steps=3, data="stdlib", batch_size=4,
            seq_len=32, eval_every=3, eval_batches=1)
  make_tx = tuning.on_budget(optimizers.adamw_arm(), 3)
  val = sweep.train_many(cfg, make_tx, **kw)
  test = sweep.train_many(cfg, make_tx, eval_split="test", **kw)
  _close(test.loss, val.loss, "training loss does not depend on the validation split")
  assert abs(float(test.val_loss[0, 0, -1]) - float(val.val_loss[0, 0, -1])) > 1e-4
  batch = data.text_source("stdlib", 32).batch(0, 0, 4, "test")
  params = jax.tree.map(lambda x: x[0, 0], test.params)
  logits = transformer.Transformer(cfg).apply({"params": params}, batch.tokens[:, :-1])
  want = transformer.next_token_loss(logits, batch.tokens, batch.weights)
  np.testing.assert_allclose(test.val_loss[0, 0, -1], want, rtol=1e-5,
                             err_msg="the test loss is the model's loss on test windows")
  with no_test("a tuner"), pytest.raises(ValueError, match="test"):
    sweep.train_many(cfg, make_tx, eval_split="test", **kw)
  with no_test("a tuner"), pytest.raises(ValueError, match="test"):
    sweep.train_many(cfg, make_tx, eval_split="heldout", **kw)  # holds the test files
  with pytest.raises(ValueError, match="eval_split='train'"):
    sweep.train_many(cfg, make_tx, eval_split="train", **kw)
