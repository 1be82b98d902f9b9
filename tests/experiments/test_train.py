"""The training loop: exact resume, SIGKILL recovery, learning, faults, callbacks, the CLI."""

import json
import os
import signal
import subprocess
import sys
import time

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import checkpoint, data, train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = train.TrainConfig(model_overrides="d_model=32,n_heads=2,max_len=64", seq_len=32,
                          batch_size=8, steps=40, warmup_steps=5, learning_rate=3e-3,
                          eval_every=20, eval_batches=2, log_every=5, checkpoint_every=10,
                          progress=False)


def losses(run_dir):
  """The metrics log without the wall-clock field."""
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def assert_trees_equal(a, b):
  chex.assert_trees_all_equal(jax.device_get(a), jax.device_get(b))


def test_exact_resume_is_bit_identical(tmp_path):
  straight = train.train(SMALL.replace(run_dir=str(tmp_path / "straight")))
  first = train.train(SMALL.replace(run_dir=str(tmp_path / "resumed"), stop_at=20))
  assert int(first.state.step) == 20
  resumed = train.train(SMALL.replace(run_dir=str(tmp_path / "resumed")))
  assert int(resumed.state.step) == 40
  assert_trees_equal(straight.state.params, resumed.state.params)
  assert_trees_equal(straight.state.opt_state, resumed.state.opt_state)
  log = losses(straight.run_dir)
  assert log == losses(resumed.run_dir)
  assert [r["step"] for r in log if "loss" in r] == list(range(1, 41))
  # The checkpoint read back for analysis is the final state.
  cfg, params = train.load_checkpoint(resumed.run_dir)
  assert cfg == train.model_config(SMALL)
  assert_trees_equal(params, straight.state.params)
  # ... and so is what `python -m experiments atlas --checkpoint RUN_DIR` analyses.
  from experiments import atlas
  atlas_cfg, atlas_params, _ = atlas.load_model(atlas.AtlasConfig(checkpoint=resumed.run_dir))
  assert atlas_cfg == cfg
  assert_trees_equal(atlas_params, params)


def start_training(run_dir: str, every: int) -> subprocess.Popen:
  """`python -m experiments train` in a subprocess, returned once it has saved 3 checkpoints."""
  cmd = [sys.executable, "-m", "experiments", "train", "--model-overrides",
         SMALL.model_overrides, "--seq-len", "32", "--batch-size", "8", "--steps", "100000",
         "--checkpoint-every", str(every), "--log-every", "1", "--eval-every", "0",
         "--no-progress", "--run-dir", run_dir]
  env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
  proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  ckpt_dir = os.path.join(run_dir, "checkpoints")
  deadline = time.time() + 60
  while time.time() < deadline and proc.poll() is None:
    steps = [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if os.path.isdir(ckpt_dir) else []
    if steps and max(steps) >= 3 * every:
      break
    time.sleep(0.1)
  assert proc.poll() is None, proc.stderr.read()
  return proc


def last_logged_step(run_dir: str) -> int:
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    return max(json.loads(line)["step"] for line in f if line.endswith("\n"))


def test_sigkill_loses_at_most_one_checkpoint_interval(tmp_path):
  run_dir = str(tmp_path / "killed")
  every = 5
  proc = start_training(run_dir, every)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  proc.stderr.close()
  reached = last_logged_step(run_dir)

  mgr = checkpoint.open_manager(run_dir)
  last = mgr.latest_step()
  mgr.close()
  assert reached - every <= last <= reached
  tc = train.TrainConfig(**{**checkpoint.read_config(run_dir)["train"], "stop_at": last + 2})
  result = train.train(tc)
  assert int(result.state.step) == last + 2
  steps = [r["step"] for r in losses(run_dir) if "loss" in r]
  assert steps == list(range(1, last + 3))  # the log was cut back to the checkpoint, no repeats
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(result.state.params))


def test_ctrl_c_saves_the_current_step_and_exits_130(tmp_path):
  run_dir = str(tmp_path / "interrupted")
  proc = start_training(run_dir, every=5)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=60)
  assert proc.returncode == 130, err
  mgr = checkpoint.open_manager(run_dir)
  saved = mgr.latest_step()
  mgr.close()
  assert saved == last_logged_step(run_dir)  # the step it stopped at, logged and saved
  assert f"interrupted: saved step {saved}" in err


def test_training_beats_the_unigram_entropy(tmp_path):
  tc = train.TrainConfig(seq_len=64, batch_size=16, steps=120, warmup_steps=10,
                         learning_rate=3e-3, eval_every=120, eval_batches=4,
                         checkpoint_every=120, progress=False, run_dir=str(tmp_path / "run"))
  corpus = data.load_corpus(tc.data, tc.val_fraction)
  entropy = data.unigram_entropy(corpus.val)
  assert 2.5 < entropy < 4.5  # source code bytes; ln 256 = 5.55 is the uniform guess
  result = train.train(tc)
  assert result.val_loss < entropy - 0.5, (result.val_loss, entropy)
  # The end-of-run summary agrees with the loop and with the metrics log.
  with open(os.path.join(tc.run_dir, "results.json")) as f:
    summary = json.load(f)
  assert summary["final_val_loss"] == pytest.approx(result.val_loss, rel=1e-6)
  assert summary["steps"] == 120
  tail = [r["loss"] for r in losses(tc.run_dir) if "loss" in r][-20:]
  assert summary["train_loss_last_20"] == pytest.approx(np.mean(tail), rel=1e-6)
  assert os.path.getsize(os.path.join(tc.run_dir, "loss.png")) > 0
  with open(os.path.join(tc.run_dir, "report.md")) as f:
    assert "![loss](loss.png)" in f.read()


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
  def poison_at(step):
    def update(updates, count, params=None):
      del params
      bad = jnp.where(count["count"] == step - 1, jnp.nan, 0.0)
      return jax.tree.map(lambda u: -1e-3 * u + bad, updates), {"count": count["count"] + 1}
    return optax.GradientTransformation(lambda p: {"count": jnp.zeros((), jnp.int32)}, update)

  tc = SMALL.replace(run_dir=str(tmp_path / "nan"), checkpoint_every=5)
  with pytest.raises(train.NonFiniteLoss, match="at step 13") as err:
    train.train(tc, tx=poison_at(12))  # params are NaN after step 12, so the loss of step 13
  assert "last good checkpoint is step 10" in str(err.value)
  mgr = checkpoint.open_manager(tc.run_dir)
  assert mgr.latest_step() == 10
  mgr.close()
  _, params = train.load_checkpoint(tc.run_dir)
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


def test_callback_and_ctrl_c_saves(tmp_path):
  seen = []

  def callback(step, state, metrics):
    seen.append((step, int(state.step), metrics["loss"]))
    if step == 14:
      raise KeyboardInterrupt

  tc = SMALL.replace(run_dir=str(tmp_path / "cb"))
  with pytest.raises(KeyboardInterrupt):
    train.train(tc, callback=callback, callback_every=7)
  assert [s for s, _, _ in seen] == [7, 14]
  assert all(s == t for s, t, _ in seen)
  logged = {r["step"]: r["loss"] for r in losses(tc.run_dir) if "loss" in r}
  assert all(logged[s] == loss for s, _, loss in seen)
  mgr = checkpoint.open_manager(tc.run_dir)
  assert mgr.latest_step() == 14  # saved on interrupt, off the every-10 grid
  mgr.close()


def test_bad_input_is_a_clear_error(tmp_path, capsys):
  assert train.main(["--data", str(tmp_path / "missing.txt"), "--no-progress"]) == 2
  assert "no such file" in capsys.readouterr().err
  with pytest.raises(ValueError, match="not divisible by the 8 devices"):
    train.train(SMALL.replace(batch_size=12, mesh="data=8", run_dir=str(tmp_path / "mesh")))
  with pytest.raises(ValueError, match="max_len"):
    train.train(SMALL.replace(seq_len=128, run_dir=str(tmp_path / "long")))
  run_dir = str(tmp_path / "run")
  train.train(SMALL.replace(run_dir=run_dir, stop_at=1))
  with pytest.raises(checkpoint.ConfigMismatch, match="train.learning_rate: saved 0.003"):
    train.train(SMALL.replace(run_dir=run_dir, learning_rate=1e-2))
  with pytest.raises(FileNotFoundError, match="config.json"):
    train.load_checkpoint(str(tmp_path / "nowhere"))


def test_help_lists_every_option_with_its_default(capsys):
  with pytest.raises(SystemExit) as exit_:
    train.main(["--help"])
  assert exit_.value.code == 0
  text = " ".join(capsys.readouterr().out.split())
  for f in train.TrainConfig.__dataclass_fields__.values():
    assert "--" + f.name.replace("_", "-") in text
  assert text.count("(default:") == len(train.TrainConfig.__dataclass_fields__)


def test_adamw_decays_matrices_only_and_schedule():
  params = {"embed": {"embedding": jnp.ones((8, 4))}, "norm_f": {"scale": jnp.ones(4)},
            "blocks": {"attn": {"w_q": jnp.ones((2, 4, 4)), "b_q": jnp.ones((2, 4))}}}
  mask = train._matrices(params)
  assert mask == {"embed": {"embedding": True}, "norm_f": {"scale": False},
                  "blocks": {"attn": {"w_q": True, "b_q": False}}}
  tc = SMALL.replace(weight_decay=0.5)
  tx = train.optimizer(tc)
  zeros = jax.tree.map(jnp.zeros_like, params)
  state = tx.init(params)
  _, state = tx.update(zeros, state, params)  # step 0: the warm-up starts at lr = 0
  updates, _ = tx.update(zeros, state, params)  # step 1: zero gradients leave only the decay
  lr_1 = tc.learning_rate / tc.warmup_steps
  expected = jax.tree.map(lambda p, m: -lr_1 * 0.5 * m * p, params, mask)
  jax.tree.map(lambda u, e: np.testing.assert_allclose(u, e, rtol=1e-6), updates, expected)
  assert set(train.OPTIMIZERS) >= {"adamw", "sgd", "muon"}
  lr = train.schedule(SMALL)
  np.testing.assert_allclose([lr(0), lr(5), lr(40)], [0.0, 3e-3, 3e-4], rtol=1e-6)


def test_muon_entry_orthogonalizes_hidden_matrices_only():
  rng = np.random.default_rng(0)
  params = {"embed": {"embedding": jnp.ones((8, 4))},
            "blocks": {"attn": {"w_q": jnp.ones((2, 4, 4))}}}
  grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
  tc = SMALL.replace(optimizer="muon", weight_decay=0.0)
  tx = train.optimizer(tc.replace(grad_clip=0.0))
  state = tx.init(params)
  _, state = tx.update(grads, state, params)  # step 0: the warm-up starts at lr = 0
  updates, _ = tx.update(grads, state, params)
  lr_1 = tc.learning_rate / tc.warmup_steps
  # The embedding takes AdamW; w_q takes Muon: an update with all singular values alike.
  assert np.abs(updates["embed"]["embedding"]).max() <= 1.01 * lr_1
  sigma = np.linalg.svd(np.asarray(updates["blocks"]["attn"]["w_q"]), compute_uv=False)
  raw = np.linalg.svd(np.asarray(grads["blocks"]["attn"]["w_q"]), compute_uv=False)
  assert (raw.min(-1) / raw.max(-1) < 0.3).all()  # the gradient itself is far from orthogonal
  assert (sigma.min(-1) / sigma.max(-1) > 0.5).all() and sigma.min() > 0
