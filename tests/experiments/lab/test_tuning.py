"""Two-rate tuning (`tuning.tune_apart`, `tied`, `other_at`): the same two searches for every
arm, the hidden rate on the budget's schedule while the other is searched."""

import types

import jax
import numpy as np
import optax
import pytest

import transformer
from experiments.lab import optimizers as O
from experiments.lab import tuning
from experiments.train import sweep

CFG = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)


def _recording_train_many(loss_of, calls):
  """A stand-in for `train_many` that builds each rate's optimizer (so the rates it would run
  are known) and answers `loss_of(hidden, other)` per rate and seed."""
  params = {"blocks": {"attn": {"w_q": np.ones((1, 4, 4), np.float32)}},
            "embed": {"embedding": np.ones((8, 4), np.float32)}}
  grads = jax.tree.map(np.ones_like, params)

  def train_many(cfg, make_tx, *, seeds, learning_rates, steps, eval_every, **kw):
    del cfg, eval_every, kw
    rows = []
    for lr in learning_rates:
      tx = make_tx(lr)
      u, _ = tx.update(grads, tx.init(params), params)  # first update: schedule at count 0
      warm = float(tuning.budget_schedule(steps)(0))
      hidden = -float(u["blocks"]["attn"]["w_q"].ravel()[0]) / warm
      other = -float(u["embed"]["embedding"].ravel()[0]) / warm
      calls.append((round(hidden, 9), round(other, 9)))
      rows.append([loss_of(hidden, other) for _ in seeds])
    loss = np.array(rows)
    return types.SimpleNamespace(val_loss=loss[..., None], diverged=np.zeros(loss.shape, bool))

  return train_many


def _sign_sgd(hidden_rate, other_rate):
  """A two-rate arm whose first update is exactly −rate on every coordinate (sign of ones)."""
  roles = lambda p: {"blocks": {"attn": {"w_q": "hidden"}}, "embed": {"embedding": "other"}}
  return optax.partition({"hidden": optax.chain(optax.scale_by_sign(),
                                                optax.scale_by_learning_rate(hidden_rate)),
                          "other": optax.chain(optax.scale_by_sign(),
                                               optax.scale_by_learning_rate(other_rate))}, roles)


def test_tune_apart_searches_the_hidden_rate_tied_then_the_other_at_it(monkeypatch):
  # The best hidden rate is 1e-2; with it, the best other rate is 1e-3.
  bowl = lambda h, o: (np.log10(h) + 2) ** 2 + 0.1 * (np.log10(o) + 3) ** 2
  calls = []
  monkeypatch.setattr(sweep, "train_many", _recording_train_many(bowl, calls))
  grid = (1e-4, 1e-3, 1e-2, 1e-1)
  t = tuning.tune_apart(CFG, _sign_sgd, grid, seeds=(110, 111), steps=10, extend=0)
  assert calls[:4] == [(pytest.approx(r), pytest.approx(r)) for r in grid]  # tied
  assert calls[4:] == [(pytest.approx(1e-2), pytest.approx(r)) for r in grid]  # other at 1e-2
  assert t["hidden"]["learning_rate"] == 1e-2 and t["other"]["learning_rate"] == 1e-3
  assert t["hidden"]["seeds"] == t["other"]["seeds"] == [110, 111]
  # A first search already run (a tied arm on the same grid) is reused, not run again.
  calls.clear()
  again = tuning.tune_apart(CFG, _sign_sgd, grid, seeds=(110, 111), steps=10, extend=0,
                            hidden=t["hidden"])
  assert len(calls) == 4 and again == t


def test_other_at_puts_both_rates_on_the_budget_schedule():
  unit = tuning.budget_schedule(20)
  make = tuning.on_budget(tuning.other_at(_sign_sgd, 0.5, 20), 20)
  params = {"blocks": {"attn": {"w_q": np.ones((1, 2, 2))}}, "embed": {"embedding": np.ones(3)}}
  tx = make(0.25)
  state = tx.init(params)
  for count in range(4):
    u, state = tx.update(jax.tree.map(np.ones_like, params), state, params)
    np.testing.assert_allclose(-u["blocks"]["attn"]["w_q"], 0.5 * unit(count), rtol=1e-6)
    np.testing.assert_allclose(-u["embed"]["embedding"], 0.25 * unit(count), rtol=1e-6)
  tied = tuning.tied(_sign_sgd)(0.1)
  u, _ = tied.update(jax.tree.map(np.ones_like, params), tied.init(params), params)
  assert float(u["blocks"]["attn"]["w_q"][0, 0, 0]) == float(u["embed"]["embedding"][0]) == \
      pytest.approx(-0.1)


def test_split_adamw_arm_runs_under_train_many_and_ties_to_adamw():
  """The two-rate AdamW with rates tied trains exactly as `adamw_arm` (losses equal)."""
  kw = dict(seeds=(0,), learning_rates=(3e-3,), steps=4, data="stdlib", batch_size=2,
            seq_len=16, eval_every=4, eval_batches=1)
  a = sweep.train_many(CFG, tuning.on_budget(O.adamw_arm(), 4), **kw)
  b = sweep.train_many(CFG, tuning.on_budget(tuning.tied(O.split_adamw_arm()), 4), **kw)
  np.testing.assert_allclose(b.val_loss, a.val_loss, rtol=1e-6)
