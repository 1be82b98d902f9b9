"""`train_many`: every vmapped run is the run `experiments.train.train` would make."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import transformer
from experiments import train
from experiments.train import sweep
from tests.conftest import random_params


def _train_losses(tc: train.TrainConfig) -> np.ndarray:
  train.train(tc)
  with open(os.path.join(tc.run_dir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return np.array([r["loss"] for r in rows if "loss" in r])


def test_each_run_equals_train_over_20_steps(tmp_path):
  base = train.TrainConfig(model_overrides="d_model=32,n_heads=2", steps=20, batch_size=4,
                           seq_len=32, warmup_steps=5, log_every=1, eval_every=1000,
                           checkpoint_every=1000, progress=False)
  seeds, rates = (0, 3), (3e-3, 1e-2)
  result = sweep.train_many(train.model_config(base), sweep.train_like(base), seeds=seeds,
                               learning_rates=rates, steps=20, data="stdlib", batch_size=4,
                               seq_len=32, eval_every=1, eval_batches=0)
  assert result.loss.shape == (2, 2, 20) and not result.diverged.any()
  for i, lr in enumerate(rates):
    for j, seed in enumerate(seeds):
      tc = base.replace(seed=seed, learning_rate=lr, run_dir=str(tmp_path / f"{i}-{j}"))
      np.testing.assert_allclose(result.loss[i, j], _train_losses(tc), rtol=0, atol=1e-5)
  # The runs differ from each other (the comparison above is not vacuous).
  assert abs(result.loss[0, 0, -1] - result.loss[1, 0, -1]) > 1e-3
  assert abs(result.loss[0, 0, -1] - result.loss[0, 1, -1]) > 1e-3


def _tiny():
  return transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16)


def test_divergence_is_recorded_not_fatal_and_other_runs_unharmed():
  """Run 0 beside a diverging run equals run 0 beside a healthy one, bit for bit (two sweeps
  of the same shape: one program, compiled once)."""
  kw = dict(seeds=(0,), steps=6, data="task:modadd", batch_size=4, seq_len=8, eval_every=3,
            eval_batches=1)
  both = sweep.train_many(_tiny(), optax.sgd, learning_rates=(1e-2, 1e12), **kw)
  healthy = sweep.train_many(_tiny(), optax.sgd, learning_rates=(1e-2, 1e-2), **kw)
  assert both.diverged.tolist() == [[False], [True]]
  assert not healthy.diverged.any()
  np.testing.assert_array_equal(both.loss[0], healthy.loss[0])


def test_params_fn_aux_loss_and_callback():
  cfg = _tiny()
  base = random_params(cfg, seed=7)  # the frozen weights: any values (no init to compile)
  seen = []

  def params_fn(trained):  # only the output bias of the last norm is trained
    return {**base, "norm_f": {**base["norm_f"], "bias": trained["bias"]}}

  def aux_loss(params, intermediates):  # reads the sown weights; penalises |bias|²
    w = intermediates["blocks"]["attn"]["weights"][0]
    return 0.0 * jnp.sum(w) + jnp.sum(jnp.square(params["norm_f"]["bias"]))

  r = sweep.train_many(
      cfg, lambda: optax.adam(1e-2), seeds=(0, 1), steps=4, data="task:modadd", batch_size=4,
      seq_len=8, eval_every=2, eval_batches=1, params_fn=params_fn, aux_loss=aux_loss,
      init_fn=lambda key: {"bias": jax.random.normal(key, (cfg.d_model,))},
      callback=lambda step, params, inter: seen.append((
          step, params["blocks"]["attn"]["w_q"].shape,
          inter["blocks"]["attn"]["weights"][0].shape)))
  assert r.learning_rates[0] != r.learning_rates[0]  # NaN: no sweep
  # The frozen weights came through params_fn untouched, with run axes (1, 2) in front.
  np.testing.assert_array_equal(r.params["blocks"]["attn"]["w_q"][0, 1],
                                base["blocks"]["attn"]["w_q"])
  # The aux loss (|bias|²) shrinks the trained bias.
  init_norm = np.linalg.norm(np.asarray(jax.random.normal(jax.random.key(0), (cfg.d_model,))))
  assert np.linalg.norm(np.asarray(r.trained["bias"][0, 0])) < init_norm
  assert [s for s, _, _ in seen] == [2, 4]
  assert seen[0][1] == (1, 2, 1, 16, 16) and seen[0][2][:2] == (1, 2)


def test_bad_arguments():
  with pytest.raises(ValueError, match="seeds"):
    sweep.train_many(_tiny(), optax.sgd, seeds=(), learning_rates=(1.0,), steps=1,
                        data="task:modadd", batch_size=2, seq_len=8, eval_every=1)


def _counting_refresh(calls: list, every: int) -> optax.GradientTransformation:
  """Identity on updates; a `lax.cond` on the step count calls back on its expensive side."""

  def init(params):
    del params
    return jnp.zeros((), jnp.int32)

  def update(updates, count, params=None):
    del params

    def refresh(u):
      jax.debug.callback(lambda: calls.append(1))
      return u

    updates = jax.lax.cond(count % every == 0, refresh, lambda u: u, updates)
    return updates, count + 1

  return optax.GradientTransformation(init, update)


@pytest.mark.parametrize("unbatched", ["sequential", "dispatch"])
def test_unbatched_strategies_keep_the_count_branch_and_the_runs(unbatched):
  """Under vmap the count's cond becomes a select (callback at every step); per run, it does not."""
  kw = dict(seeds=(0, 1), learning_rates=(1e-2, 3e-2), steps=8, data="task:modadd", batch_size=4,
            seq_len=8, eval_every=4, eval_batches=1)
  calls = {True: [], False: []}
  runs = {}
  for vec in (True, False):
    def make_tx(learning_rate, vec=vec):
      return optax.chain(_counting_refresh(calls[vec], every=8), optax.sgd(learning_rate))

    runs[vec] = sweep.train_many(_tiny(), make_tx, strategy="vmap" if vec else unbatched, **kw)
  jax.effects_barrier()
  # 4 runs × 8 steps; the refresh is due at count 0 of each run only. Under vmap the branch
  # runs at every step (the callback fires at least once per step, for the batch).
  assert len(calls[False]) == 4
  assert len(calls[True]) >= 8
  np.testing.assert_allclose(runs[False].loss, runs[True].loss, rtol=0, atol=1e-5)
  np.testing.assert_allclose(runs[False].val_loss, runs[True].val_loss, rtol=0, atol=1e-5)
