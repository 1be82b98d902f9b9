"""What one LAPACK call per matrix costs: `transformer.linalg.serial` vs the batched call.

    python -m experiments.benchmarks.serial [--rounds 7]

On CPU the library hands LAPACK one matrix per call (`transformer.linalg.serial`), because
two batched calls at once can deadlock XLA:CPU's thread pool. The price is the parallelism
inside a batched call. This times both, jitted, in interleaved rounds
(`experiments.lab.timing`), for stacks of matrices the library decomposes: per-layer
and per-head weights and attention matrices. It prints medians and the ratio
serial / batched (above 1: the guard costs time).
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp

from experiments.lab import timing
from transformer.linalg import serial

SHAPES = ((48, 64, 64), (12, 256, 256), (4, 512, 128))


def compare(shape: tuple[int, ...], rounds: int) -> dict[str, dict[str, float]]:
  """`{op: {"batched": s, "serial": s}}` medians for `svd` (values only) and `qr` (`R` only)."""
  W = jax.random.normal(jax.random.key(0), shape)
  ops = {
      "svd": (lambda w: jnp.linalg.svd(w, compute_uv=False),
              lambda w: serial.svd(w, compute_uv=False)),
      "qr": (lambda w: jnp.linalg.qr(w, mode="r"), lambda w: serial.qr(w, mode="r")),
  }
  out = {}
  for name, (batched, one_by_one) in ops.items():
    b, s = jax.jit(batched), jax.jit(one_by_one)
    times = timing.interleaved({"batched": lambda b=b: b(W), "serial": lambda s=s: s(W)},
                               rounds=rounds)
    out[name] = times
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.serial",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
  args = parser.parse_args(argv)
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores, "
        f"load average {load:.2f}; medians of {args.rounds} interleaved rounds")
  print(f"{'op':>4} {'shape':>16} {'batched ms':>11} {'serial ms':>10} {'serial/batched':>15}")
  for shape in SHAPES:
    for op, t in compare(shape, args.rounds).items():
      print(f"{op:>4} {str(shape):>16} {t['batched'] * 1e3:>11.2f} {t['serial'] * 1e3:>10.2f} "
            f"{t['serial'] / t['batched']:>15.2f}", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
