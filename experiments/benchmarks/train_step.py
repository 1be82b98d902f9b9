"""Throughput of the jitted train step, against the machine's own dense matmul FLOP/s.

    python -m experiments.benchmarks.train_step [--repeats 5] [--batch-mid 2]

About a minute and a half on 2 CPU cores. In one run it measures the float32 matmul rate of
this machine (a jitted `(n, n) @ (n, n)`), then the train step (AdamW, one device) of the
`tiny` preset and of a mid-size model (d=512, L=8, T=512), and prints per model: tokens/s, the
model FLOPs per step, and the achieved FLOP/s as a fraction of the measured matmul rate.

FLOPs per step are counted by hand for the matmuls of the forward pass and tripled for the
backward pass (``6 N`` per token for the weights, plus ``12 L T d`` per token for the scores
and mixing, counting the full square although half of it is masked). XLA's `cost_analysis` is
no substitute: it counts the body of the layer scan once, not `L` times.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from experiments import sharding, train
from experiments.benchmarks.timing import median_seconds


def matmul_flops_per_s(n: int = 1024, repeats: int = 5) -> float:
  """Measured float32 FLOP/s of a jitted dense `(n, n) @ (n, n)` (``2 n^3`` FLOPs)."""
  a, b = (jax.random.normal(k, (n, n), jnp.float32) for k in jax.random.split(jax.random.key(0)))
  matmul = jax.jit(jnp.matmul)
  return 2 * n**3 / median_seconds(lambda: matmul(a, b), repeats)


def model_flops_per_step(cfg: transformer.Config, batch: int, seq_len: int) -> float:
  """Forward + backward matmul FLOPs of one step: ``3 x`` the forward count.

  Forward, per token: ``2`` FLOPs per weight of every matrix used as `x @ W` (embedding lookup
  excluded, the output matrix included) and ``4 L T d_h H`` for `Q Kᵀ` and `A V`.
  """
  d, L, H, K, dh, F, V = (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head,
                          cfg.d_ff, cfg.vocab_size)
  n_ffn = 3 if cfg.activation == "swiglu" else 2
  weights = L * (d * H * dh + 2 * d * K * dh + H * dh * d + n_ffn * d * F) + d * V
  forward_per_token = 2 * weights + 4 * L * seq_len * H * dh
  return 3 * forward_per_token * batch * seq_len


def bench_model(name: str, cfg: transformer.Config, batch: int, seq_len: int,
                repeats: int) -> dict:
  """Compiles the train step for `cfg` and times it; returns the measured figures."""
  tc = train.TrainConfig(steps=1000, warmup_steps=10)
  trainer = train.build(cfg, train.optimizer(tc), sharding.make_mesh({"data": 1}),
                        train.schedule(tc))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq_len + 1)), jnp.int32)
  weights = jnp.ones((batch, seq_len), jnp.float32)
  state = trainer.init(jax.random.key(0))
  start = time.perf_counter()
  compiled = trainer.step.lower(state, tokens, weights).compile()
  compile_s = time.perf_counter() - start

  def one_step():
    nonlocal state
    state, metrics = compiled(state, tokens, weights)
    return metrics["loss"]

  seconds = median_seconds(one_step, repeats)  # after one warm-up step
  return {"model": name, "batch": batch, "seq_len": seq_len, "compile_s": compile_s,
          "step_s": seconds, "tokens_per_s": batch * seq_len / seconds,
          "flops": model_flops_per_step(cfg, batch, seq_len)}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.train_step",
                              description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--repeats", type=int, default=5, help="timed steps per model (median)")
  p.add_argument("--batch-tiny", type=int, default=16, help="batch of the tiny model")
  p.add_argument("--seq-tiny", type=int, default=256, help="sequence length of the tiny model")
  p.add_argument("--batch-mid", type=int, default=2, help="batch of the mid-size model")
  p.add_argument("--matmul-n", type=int, default=1024, help="size of the reference matmul")
  args = p.parse_args(argv)

  peak = matmul_flops_per_s(args.matmul_n, args.repeats)
  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}); float32 matmul "
        f"{args.matmul_n}^2: {peak / 1e9:.1f} GFLOP/s (measured)")
  models = [
      ("tiny", transformer.preset("tiny"), args.batch_tiny, args.seq_tiny),
      ("mid d=512 L=8", transformer.preset("tiny", d_model=512, n_layers=8, n_heads=8,
                                           max_len=512), args.batch_mid, 512),
  ]
  print(f"{'model':<15} {'B x T':>9} {'compile s':>9} {'step ms':>9} {'tokens/s':>10} "
        f"{'GFLOP/step':>10} {'GFLOP/s':>8} {'of matmul':>9}")
  for name, cfg, batch, seq_len in models:
    r = bench_model(name, cfg, batch, seq_len, args.repeats)
    achieved = r["flops"] / r["step_s"]
    print(f"{name:<15} {f'{batch}x{seq_len}':>9} {r['compile_s']:>9.1f} "
          f"{1e3 * r['step_s']:>9.1f} {r['tokens_per_s']:>10,.0f} {r['flops'] / 1e9:>10.2f} "
          f"{achieved / 1e9:>8.1f} {achieved / peak:>9.1%}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
