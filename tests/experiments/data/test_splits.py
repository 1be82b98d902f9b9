"""Training reads `train`, tuning reads `val`, verdicts read `test`: no tuner can read `test`."""

import pytest

import transformer
from experiments import data
from experiments.lab import edge, tuning
from experiments.lab.optimizers import adamw_arm

REFUSED = r"split='(test|heldout)' read inside the tuner .*: tuning reads 'val' only"


@pytest.fixture(scope="module")
def src():
  return data.text_source("stdlib", seq_len=8)


def test_no_test_refuses_test_bytes_and_nothing_else(src):
  with data.no_test("the tuner of this test"):
    assert src.batch(0, 0, 2, "val").tokens.shape == (2, 9)
    src.batch(0, 0, 2, "train")
    for split in ("test", "heldout"):
      with pytest.raises(ValueError, match=REFUSED):
        src.batch(0, 0, 2, split)
    with pytest.raises(ValueError, match=REFUSED):
      data.source("task:copy", 0).batch(0, 0, 2, "test")  # every source draws by batch_rng
  assert src.batch(0, 0, 2, "test").tokens.shape == (2, 9)  # verdicts read it


def test_the_edge_tuner_refuses_a_run_that_reads_test(src):
  def run(rates):
    src.batch(0, 0, 2, "test")
    return [1.0] * len(rates), [False] * len(rates)

  with pytest.raises(ValueError, match=r"inside the tuner my-arm \(experiments.lab.edge\)"):
    edge.tune(run, (1e-3, 1e-2), name="my-arm")
  src.batch(0, 0, 2, "test")  # the block ends with the tuner, even on an error


class _ReadsTest:
  """A source wired wrong: asked for validation batches, it answers with test batches."""

  def __init__(self, inner):
    self.inner, self.vocab_size = inner, inner.vocab_size

  def batch(self, seed, step, batch_size, split="train"):
    return self.inner.batch(seed, step, batch_size, "test" if split == "val" else split)


def test_the_sweep_tuners_cannot_read_test(src):
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=8)
  kwargs = dict(steps=2, data=_ReadsTest(src), batch_size=2, seq_len=8, eval_batches=1)
  with pytest.raises(ValueError, match=REFUSED):
    tuning.tune(cfg, adamw_arm(), (1e-3, 1e-2), seed=100, **kwargs)
  with pytest.raises(ValueError, match=REFUSED):
    tuning.tune_on_seeds(cfg, adamw_arm(), (1e-3, 1e-2), seeds=(100,), **kwargs)
