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

from experiments import data, train
from experiments.train import checkpoint
from tests.experiments.train.configs import SMALL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# The run of the tests of what a run prints and logs (progress lines, sharpness rows): one config,
# so its programs (init, step) compile once for all of them.
LOGGED = train.TrainConfig(model_overrides="d_model=16,n_heads=2,n_layers=1,max_len=32",
                           seq_len=16, batch_size=4, steps=12, warmup_steps=2, eval_every=0,
                           log_every=6, checkpoint_every=0, progress=False)


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
  from experiments.commands import atlas
  atlas_cfg, atlas_params, _ = atlas.load_model(atlas.AtlasConfig(checkpoint=resumed.run_dir))
  assert atlas_cfg == cfg
  assert_trees_equal(atlas_params, params)


def start_training(run_dir: str, every: int, checkpoints: int = 3) -> subprocess.Popen:
  """`python -m experiments train` in a subprocess, returned once it has saved `checkpoints`.

  It polls the checkpoint folder rather than racing a clock: a slow machine only makes the
  test slower. The generous deadline is a safety net against a hung subprocess.
  """
  cmd = [sys.executable, "-m", "experiments", "train", "--model-overrides",
         SMALL.model_overrides, "--seq-len", "32", "--batch-size", "8", "--steps", "100000",
         "--checkpoint-every", str(every), "--log-every", "1", "--eval-every", "0",
         "--no-progress", "--run-dir", run_dir]
  env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
  proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  ckpt_dir = os.path.join(run_dir, "checkpoints")
  deadline = time.time() + 900
  while proc.poll() is None:
    steps = [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if os.path.isdir(ckpt_dir) else []
    if steps and max(steps) >= checkpoints * every:
      return proc
    if time.time() > deadline:
      proc.kill()
      pytest.fail(f"no checkpoint {checkpoints * every} after 900 s: {proc.communicate()[1]}")
    time.sleep(0.05)
  pytest.fail(f"training exited early ({proc.returncode}): {proc.stderr.read()}")


def last_logged_step(run_dir: str) -> int:
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    return max(json.loads(line)["step"] for line in f if line.endswith("\n"))


def test_sigkill_loses_at_most_one_checkpoint_interval(tmp_path):
  run_dir = str(tmp_path / "killed")
  every = 5
  proc = start_training(run_dir, every, checkpoints=2)
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
  proc = start_training(run_dir, every=5, checkpoints=2)
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
  assert mgr.latest_step() == 14  # saved on interrupt, off the every-20 grid
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


def test_help_lists_every_option_with_its_default_once(capsys):
  with pytest.raises(SystemExit) as exit_:
    train.main(["--help"])
  assert exit_.value.code == 0
  out = capsys.readouterr().out
  text = " ".join(out.split())
  fields = train.TrainConfig.__dataclass_fields__.values()
  for f in fields:
    flag = "--" + f.name.replace("_", "-")
    assert flag in text
    # The option's help ends with its default, exactly once.
    help_ = text[text.index(flag + " "):]
    assert help_.count("(default:") >= 1
  assert text.count("(default:") == len(fields)
  assert "The training loop" in out and "examples:" in out
  assert "python -m experiments train --optimizer muon --muon-learning-rate" in out


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps 0 must be at least 1"),
    (["--steps=-5"], "--steps -5 must be at least 1"),
    (["--learning-rate=-1e-3"], "--learning-rate -0.001 must be a finite number >= 0"),
    (["--muon-learning-rate", "nan"], "--muon-learning-rate nan must be a finite number"),
    (["--batch-size", "0"], "--batch-size 0 must be at least 1"),
    (["--model-overrides", "d_modle=32"], "unknown field 'd_modle'"),
    (["--model-overrides", "vocab_size=128"], "vocab_size=256"),
])
def test_bad_flags_are_one_line_errors_before_any_work(argv, message, tmp_path, capsys):
  run_dir = str(tmp_path / "run")
  assert train.main([*argv, "--run-dir", run_dir, "--no-progress"]) == 2
  err = capsys.readouterr().err
  assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
  assert not os.path.exists(run_dir)  # refused before the run folder was made


def test_huge_learning_rate_stops_without_saving_a_non_finite_checkpoint(tmp_path):
  tc = SMALL.replace(run_dir=str(tmp_path / "huge"), learning_rate=1e4, checkpoint_every=1,
                     log_every=1, warmup_steps=1)
  with pytest.raises(train.NonFiniteLoss) as err:
    train.train(tc)
  mgr = checkpoint.open_manager(tc.run_dir, read_only=True)
  steps = mgr.all_steps()
  mgr.close()
  message = str(err.value)
  if steps:
    assert f"The last good checkpoint is step {max(steps)}" in message
    for step in steps:  # every checkpoint on disk is finite
      params, _ = checkpoint.load_run(tc.run_dir, step)
      assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))
  else:
    assert "No checkpoint was written" in message
  # The log holds only finite rows, each a step before the one named in the message.
  bad = int(message.split(" at step ")[1].split(";")[0]) if " at step " in message else None
  rows = [r for r in losses(tc.run_dir) if "loss" in r]
  assert all(np.isfinite([r["loss"], r["grad_norm"]]).all() for r in rows)
  if bad is not None:
    assert [r["step"] for r in rows] == list(range(1, bad))


def test_a_non_finite_gradient_norm_stops_the_run(tmp_path):
  from experiments.train import loop
  from experiments.train.run_folder import RunFolder

  with RunFolder(str(tmp_path), {"train": {}, "model": {}}) as folder:
    folder.open_log(0)
    folder.last_saved = 4
    buffer = loop._MetricsBuffer(folder, tokens_per_step=8)
    buffer.add(5, {"loss": np.float32(2.0), "grad_norm": np.float32(1.0)})
    buffer.add(6, {"loss": np.float32(2.0), "grad_norm": np.float32(np.inf)})
    with pytest.raises(train.NonFiniteLoss, match="grad norm is inf at step 6") as err:
      buffer.flush()
  assert "last good checkpoint is step 4" in str(err.value)
  assert [r["step"] for r in folder.rows()] == [5]


def test_corrupt_latest_checkpoint_resumes_from_the_previous_one(tmp_path, capsys):
  from tests.experiments.conftest import corrupt

  straight = train.train(SMALL.replace(run_dir=str(tmp_path / "straight")))
  run_dir = str(tmp_path / "damaged")
  train.train(SMALL.replace(run_dir=run_dir, stop_at=30))
  corrupt(run_dir, 30)
  capsys.readouterr()
  resumed = train.train(SMALL.replace(run_dir=run_dir))
  err = capsys.readouterr().err
  assert "checkpoints/30 is unreadable" in err and "resumed from step 20" in err
  assert "Traceback" not in err and len(err.splitlines()) <= 4, err
  assert os.path.isdir(os.path.join(run_dir, "checkpoints", "30.corrupt"))  # kept, moved aside
  assert_trees_equal(straight.state.params, resumed.state.params)
  assert losses(straight.run_dir) == losses(run_dir)


def test_a_finished_run_says_so_and_every_results_file_is_strict_json(tmp_path, capsys):
  run_dir = str(tmp_path / "done")
  argv = ["--model-overrides", SMALL.model_overrides, "--seq-len", "32", "--batch-size", "8",
          "--steps", "10", "--warmup-steps", "2", "--eval-every", "5", "--eval-batches", "2",
          "--run-dir", run_dir]
  assert train.main(argv) == 0
  first = capsys.readouterr()
  assert "train: 10/10" in first.err  # not a terminal: periodic progress lines, no bar
  assert "\r" not in first.err
  with open(os.path.join(run_dir, "results.json")) as f:
    before = f.read()
  assert train.main(argv) == 0
  again = capsys.readouterr()
  assert f"run {run_dir} is already complete: step 10 of 10" in again.err
  assert "nan" not in again.out.lower() and "validation loss" in again.out
  with open(os.path.join(run_dir, "results.json")) as f:
    assert f.read() == before
  # A report of a log with no validation rows has nulls, never NaN.
  from experiments.train import report as train_report
  with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
    f.write('{"step": 1, "loss": 2.0, "grad_norm": 1.0, "tokens_per_s": 5.0}\n')
  results = train_report.write(run_dir, checkpoint.read_config(run_dir))
  assert results["final_val_loss"] is None

  def refuse(token):
    raise ValueError(f"non-strict JSON constant {token}")

  with open(os.path.join(run_dir, "results.json")) as f:
    assert json.load(f, parse_constant=refuse)["best_val_loss"] is None


def test_exact_match_is_reported_on_synthetic_tasks(tmp_path, tiny_run):
  tc = SMALL.replace(data="task:modadd", run_dir=str(tmp_path / "task"), steps=10,
                     eval_every=10, eval_batches=3)
  result = train.train(tc)
  rows = [r for r in losses(tc.run_dir) if "val_loss" in r]
  assert rows and 0 <= rows[-1]["val_exact_match"] <= 1
  # Reference: the host-side metric of `experiments.data` on the same validation batches.
  import transformer
  apply = jax.jit(transformer.Transformer(train.model_config(tc)).apply)  # one compilation
  src = data.source(tc.data, tc.seq_len)
  acc = []
  for i in range(tc.eval_batches):
    batch = src.batch(tc.seed, i, tc.batch_size, "val")
    logits = apply({"params": result.state.params}, batch.tokens[:, :-1])
    acc.append(data.exact_match(logits, batch))
  assert rows[-1]["val_exact_match"] == pytest.approx(np.mean(acc), abs=1e-6)
  with open(os.path.join(tc.run_dir, "results.json")) as f:
    assert json.load(f)["final_val_exact_match"] == pytest.approx(np.mean(acc), abs=1e-6)
  # Text data has no exact-match column (a whole window is never exactly right).
  text_rows = [r for r in losses(tiny_run) if "val_loss" in r]
  assert text_rows and all("val_exact_match" not in r for r in text_rows)


def test_progress_lines_show_the_logged_step_numbers_not_the_previous_ones(tmp_path, capsys):
  """A printed progress line carries the loss of its own step, as `metrics.jsonl` logs it."""
  from experiments import jsonio

  tc = LOGGED.replace(progress=True, run_dir=str(tmp_path / "run"))
  train.train(tc)
  err = capsys.readouterr().err
  line = [x for x in err.splitlines() if x.startswith("train: 12/12")][-1]
  logged = {r["step"]: r for r in jsonio.read_jsonl(tmp_path / "run" / "metrics.jsonl")
            if "loss" in r}
  assert f"loss={logged[12]['loss']:.3f}" in line
  assert f"tok_s={logged[12]['tokens_per_s']:,.0f}" in line


def test_track_sharpness_logs_the_top_hessian_eigenvalue_beside_its_threshold(tmp_path):
  """`--track-sharpness`: rows with the sharpness and 38/lr (Adam, β₁ = 0.9), and the plot."""
  from experiments import jsonio

  tc = LOGGED.replace(track_sharpness=6, run_dir=str(tmp_path / "run"))
  train.train(tc)
  rows = [r for r in jsonio.read_jsonl(tmp_path / "run" / "metrics.jsonl") if "sharpness" in r]
  assert [r["step"] for r in rows] == [6, 12]
  lr = train.schedule(tc)
  for r in rows:
    assert r["sharpness"] > 0 and r["sharpness_raw"] > 0
    assert r["two_over_lr"] == pytest.approx(2 / float(lr(r["step"])), rel=1e-5)
    assert r["sharpness_threshold"] == pytest.approx(38 / float(lr(r["step"])), rel=1e-5)
  assert os.path.exists(tmp_path / "run" / "sharpness.png")
  with pytest.raises(ValueError, match="track-sharpness"):
    train.TrainConfig(optimizer="muon", track_sharpness=5).validate()
