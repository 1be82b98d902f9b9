"""Pinned tuning losses: the same (lab, seed, rate, steps) trains to the same loss across commits.

Every training lab reaches the step through `experiments.train.sweep.train_many`; each case
below trains one lab's optimizer on the tuning seed 100 at two rates and compares the mean
training loss of the last steps and the final validation loss with numbers recorded when the
case was written (issue 47 item 6). A refactor that leaves behaviour unchanged keeps them to
1e-6 relative under every execution strategy of the sweep; a change that moves them is a
change of protocol, and its commit re-pins the numbers and says why.

The training loss depends only on the `train` split (unchanged by the pinned corpus); the
validation loss on the pinned `val` split.
"""

import numpy as np
import pytest

import transformer
from experiments import train
from experiments.lab import attention_arms, cap_training, optimizers, tuning
from experiments.train import sweep

STEPS, RATES, SEED = 12, (3e-3, 1e-2), 100
CFG = transformer.preset("tiny", d_model=16, n_layers=2, n_heads=2, max_len=32)


def _make_tx(lab: str):
  if lab == "train":
    tc = train.TrainConfig(steps=STEPS, warmup_steps=3)
    return sweep.train_like(tc)
  if lab == "optimizers-adamw":
    return tuning.on_budget(optimizers.adamw_arm(), STEPS)
  if lab == "optimizers-muon":
    return tuning.on_budget(optimizers.muon_arm(n_heads=CFG.n_heads), STEPS)
  if lab == "stability":
    return cap_training.make_tx_factory(STEPS, ("w_q", "w_k"), cap=1.0)
  if lab == "attention":
    return attention_arms.make_tx
  raise KeyError(lab)


# lab -> (final training loss per rate, final validation loss per rate), recorded with the
# pinned corpus's val split (cb8a219) and the per-run strategies of issue 50. The vmapped sweep
# they replaced (da1a0c0) gave the same numbers to 1e-6 relative except attention's at 1e-2
# (4.5946712 and 3.4817827: 3e-7 and 2.5e-6 off; batched and unbatched reductions round
# differently, and 12 steps at a high rate grow it). Re-pinned once since, for a change of the
# weight gradient's summation order (`transformer.layout.matmul`, issue 50: dW = (xᵀ) dY on
# XLA:CPU's row-major kernel): every number held to 1e-6 but attention's validation loss at
# 1e-2, 3.4817913 -> 3.4817867 (1.3e-6).
# The host's vector width also rounds reductions differently: on a 2-core AMD EPYC without
# AVX-512 (2026-12-07) attention's validation loss at 1e-2 reads 3.4817791 at the commit that
# pinned 3.4817867 (2.2e-6 relative), every other number within 1e-6. That one value, grown by
# 12 steps at the high rate, is held to 5e-6 so the test passes on every host the suite runs on.
HOST_RTOL = {("attention", "val", 1): 5e-6}
RTOL = 1e-6

PINNED = {
    "attention": ((5.1958222, 4.5946727), (4.7516689, 3.4817867)),
    "optimizers-adamw": ((5.2730317, 4.7878346), (5.0826416, 4.2164946)),
    "optimizers-muon": ((5.2790074, 4.767828), (5.0850616, 4.1722093)),
    "stability": ((5.270762, 4.7837949), (5.0841537, 4.2280555)),
    "train": ((5.3443704, 4.9693608), (5.1468911, 4.3211608)),
}


def run(lab: str, strategy: str = "auto"):
  r = sweep.train_many(CFG, _make_tx(lab), seeds=(SEED,), learning_rates=RATES, steps=STEPS,
                       data="stdlib", batch_size=4, seq_len=32, eval_every=STEPS,
                       eval_batches=1, strategy=strategy)
  return r.loss[:, 0, -1], r.val_loss[:, 0, -1]


@pytest.mark.parametrize("lab", sorted(PINNED))
def test_tuning_losses_are_pinned(lab):
  loss, val = run(lab)
  for name, got, want in zip(("loss", "val"), (loss, val), PINNED[lab], strict=True):
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
      rtol = HOST_RTOL.get((lab, name, k), RTOL)
      np.testing.assert_allclose(g, w, rtol=rtol,
                                 err_msg=f"{lab}: {name} at rate {RATES[k]} moved")
