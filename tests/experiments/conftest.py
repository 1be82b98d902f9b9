"""A tiny trained run shared by the tests of the commands that read run folders."""

import os
import shutil

import pytest

from experiments import train

TINY = train.TrainConfig(model_overrides="d_model=32,n_heads=2,max_len=64", seq_len=32,
                         batch_size=8, steps=10, warmup_steps=2, learning_rate=3e-3,
                         eval_every=10, eval_batches=2, log_every=5, checkpoint_every=5,
                         progress=False)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> str:
  """A finished 10-step run with checkpoints 5 and 10 (treat as read-only; copy to damage)."""
  run_dir = str(tmp_path_factory.mktemp("runs") / "tiny")
  train.train(TINY.replace(run_dir=run_dir))
  return run_dir


@pytest.fixture
def tiny_run_copy(tiny_run, tmp_path) -> str:
  """A private copy of `tiny_run` that a test may modify."""
  dst = os.path.join(str(tmp_path), "copy")
  shutil.copytree(tiny_run, dst)
  return dst


def corrupt(run_dir: str, step: int) -> None:
  """Overwrites every file of checkpoint `step` with garbage (as a bad disk would)."""
  for root, _, names in os.walk(os.path.join(run_dir, "checkpoints", str(step))):
    for name in names:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\x00garbage")
