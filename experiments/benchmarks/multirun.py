"""Benchmark: 3 seeds × 2 learning rates of `tiny`, as one `train_many` vs six runs in turn.

    python -m experiments.benchmarks.multirun [--steps 100]

Three contenders do the same six runs (same seeds, rates, batches, steps): `train_many` with
all six vmapped; `train_many` called once per run; and `experiments.train.train` once per run
(the loop a user would otherwise script, with its logging and one final checkpoint). Each is
one long run, timed once end to end with compilation included, in interleaved order; the
printed ratios are sequential time over vmapped time (the issue's target was ≥ 2×).

Both `train_many` contenders run `strategy="vmap"` (issue 50 made the sweep's default choose
per machine; `python -m experiments.benchmarks.sweep` compares the strategies). Measured
before that on 2 shared CPU cores (100 steps, batch 16 × 64, load average ≈ 5): vmapped 26.4 s,
`train_many` × 6 52.2 s (1.98×), `train.train` × 6 15.4 s (0.58×: the vmapped sweep is
slower). On this hardware one `tiny` run at batch 16 × 64 already saturates both cores
(≈ 19 ms per step alone, ≈ 23 ms per run-step vmapped), so vmapping saves only compilation
and dispatch, which `train.train` amortises with its compile cache; the vmapped program also
compiles for ≈ 10 s. The ≥ 2× target is not met against `train.train` on CPU.
"""

from __future__ import annotations

import argparse
import tempfile

import jax

from experiments import train
from experiments.lab import timing
from experiments.train import sweep

SEEDS = (0, 1, 2)
RATES = (1e-3, 3e-3)


def contenders(steps: int, batch_size: int, seq_len: int, run_root: str) -> dict:
  """name -> zero-argument callable running all six runs."""
  tc = train.TrainConfig(model="tiny", steps=steps, batch_size=batch_size, seq_len=seq_len,
                         warmup_steps=min(30, steps // 4), log_every=steps,
                         eval_every=steps, eval_batches=1, checkpoint_every=steps,
                         progress=False)
  cfg, make_tx = train.model_config(tc), sweep.train_like(tc)
  kw = dict(steps=steps, data="stdlib", batch_size=batch_size, seq_len=seq_len,
            eval_every=steps, eval_batches=1)

  def vmapped():
    return sweep.train_many(cfg, make_tx, seeds=SEEDS, learning_rates=RATES, strategy="vmap",
                            **kw).loss

  def one_by_one():
    return [sweep.train_many(cfg, make_tx, seeds=(s,), learning_rates=(lr,), strategy="vmap",
                             **kw).loss
            for lr in RATES for s in SEEDS]

  counter = iter(range(10**6))

  def train_loop():
    return [train.train(tc.replace(seed=s, learning_rate=lr,
                                   run_dir=f"{run_root}/{next(counter)}")).val_loss
            for lr in RATES for s in SEEDS]

  return {"train_many (6 vmapped)": vmapped, "train_many x 6": one_by_one,
          "train.train x 6": train_loop}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.multirun",
                              description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=100)
  p.add_argument("--batch-size", type=int, default=16)
  p.add_argument("--seq-len", type=int, default=64)
  args = p.parse_args(argv)
  with tempfile.TemporaryDirectory() as root:
    # One round, no warm-up: each contender is one long run whose compile is part of its cost.
    times = timing.interleaved(contenders(args.steps, args.batch_size, args.seq_len, root),
                               rounds=1, warmup=0)
  base = times["train_many (6 vmapped)"]
  print(f"3 seeds x 2 rates of tiny, {args.steps} steps, batch {args.batch_size}x"
        f"{args.seq_len}, {jax.device_count()} {jax.default_backend()} device(s):")
  for name, t in times.items():
    print(f"  {name:<24} {t:8.2f} s   ratio to vmapped {t / base:5.2f}x")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
