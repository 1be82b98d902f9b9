"""Dense vs matrix-free Jacobian spectra of one transformer block.

    python -m experiments.benchmarks.jacobian [--k 8] [--steps 64] [--scale-steps 32]
                                              [--budget 60]

Takes about 1 minute on 2 idle CPU cores (about 3 when they are shared). Two parts, one run:

1. Ratio. For one block of width `d = 64` at `T = 8, 16, 32` (`T·d` = 512 … 2048), the time
   of the top-`k` singular values of `J = ∂block/∂x` by the dense path (`jax.jacfwd`, then an
   SVD of the `(T·d)²` matrix) and by the matrix-free path (Golub–Kahan–Lanczos on `JᵀJ` through
   `jax.jvp`/`jax.vjp`, never forming `J`), both compiled ahead of time and timed on one run,
   and their agreement. At init the block is near the identity and its top singular values are
   clustered (1.040, 1.039, …), which Krylov methods resolve slowly: `--steps 64` gives about
   1e-6 relative agreement, 26 steps about 1e-2.
2. Scale. For a block of width `d = 512` and `T` doubling from 256, the wall time (compile
   plus run) of the matrix-free top-`k` with `--scale-steps` Lanczos steps (time is linear in
   the steps), up to `T·d = 2²⁰ ≈ 1.05·10⁶`, stopping after the first size over `--budget`
   seconds; it prints the largest `T·d` handled within budget and the Ritz residual bound.

The dense path needs `4 (T·d)²` bytes and `O((T·d)³)` time; the matrix-free path needs
`O(steps · T·d)` memory and `steps` JVP/VJP pairs, so only it reaches `T·d ≥ 10⁶`.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer


def _block(d: int, T: int, n_heads: int, seed: int = 0):
  cfg = transformer.preset("tiny", d_model=d, n_heads=n_heads, n_layers=1, max_len=T)
  params = transformer.layer(transformer.init(cfg, jax.random.key(seed), seq_len=8), 0)
  x_TD = jax.random.normal(jax.random.key(seed + 1), (T, d))
  return transformer.block_fn(cfg), params, x_TD


def _timed(fn, *args):
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t0


def compare(T: int, d: int, k: int, steps: int) -> dict:
  """Run times (compiled ahead) of the dense and matrix-free top-`k` singular values."""
  f, params, x_TD = _block(d, T, n_heads=4)

  def dense(p, x):
    J = analysis.jacobian(functools.partial(f, p), x, max_bytes=2**31)
    return jnp.linalg.svd(J, compute_uv=False)[:k]

  def matrix_free(p, x):
    return analysis.jacobian_top_singular_values(functools.partial(f, p), x, k,
                                                 steps=steps).values

  results = {}
  for name, fn in (("dense", dense), ("matrix_free", matrix_free)):
    compiled = jax.jit(fn).lower(params, x_TD).compile()
    results[name], results[f"{name}_s"] = _timed(compiled, params, x_TD)
  s = np.asarray(results["dense"])
  results["rel_err"] = float(np.max(np.abs(np.asarray(results["matrix_free"]) - s)) / s[0])
  return results


def scale(d: int, T: int, k: int, steps: int) -> tuple[float, float, float]:
  """`(compile s, run s, max residual / σ_1)` of the matrix-free top-`k` at `T·d`."""
  f, params, x_TD = _block(d, T, n_heads=8)
  fn = jax.jit(lambda p, x: analysis.jacobian_top_singular_values(
      functools.partial(f, p), x, k, steps=steps))
  t0 = time.perf_counter()
  compiled = fn.lower(params, x_TD).compile()
  compile_s = time.perf_counter() - t0
  res, run_s = _timed(compiled, params, x_TD)
  values = np.asarray(res.values)
  if not np.all(np.isfinite(values)):
    raise FloatingPointError(f"non-finite singular values at T·d={T * d}")
  return compile_s, run_s, float(np.max(np.asarray(res.residuals)) / values[0])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.jacobian",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--k", type=int, default=8)
  parser.add_argument("--steps", type=int, default=64, help="Krylov dimension (ratio part)")
  parser.add_argument("--scale-steps", type=int, default=32, help="Krylov dimension (scale)")
  parser.add_argument("--budget", type=float, default=60.0, help="seconds for the scale sweep")
  parser.add_argument("--compare-t", type=int, nargs="+", default=[8, 16, 32])
  parser.add_argument("--scale-d", type=int, default=512)
  parser.add_argument("--scale-t0", type=int, default=256)
  parser.add_argument("--max-td", type=int, default=2**20)
  args = parser.parse_args(argv)

  d = 64
  print(f"top-{args.k} singular values of one block's Jacobian, d={d} "
        f"(compiled ahead, Lanczos steps={args.steps})")
  print(f"{'T':>5} {'T·d':>7} {'dense s':>9} {'matrix-free s':>14} {'ratio':>7} {'rel err':>9}")
  for T in args.compare_t:
    r = compare(T, d, args.k, args.steps)
    print(f"{T:>5} {T * d:>7} {r['dense_s']:>9.3f} {r['matrix_free_s']:>14.3f} "
          f"{r['dense_s'] / r['matrix_free_s']:>7.1f} {r['rel_err']:>9.1e}", flush=True)

  print(f"\nmatrix-free scaling, d={args.scale_d}, Lanczos steps={args.scale_steps}, "
        f"budget {args.budget:.0f} s (compile + run)")
  best, T = None, args.scale_t0
  while T * args.scale_d <= args.max_td:
    compile_s, run_s, resid = scale(args.scale_d, T, args.k, args.scale_steps)
    total = compile_s + run_s
    print(f"  T={T:>5}  T·d={T * args.scale_d:>9,}  compile {compile_s:6.1f} s  run "
          f"{run_s:6.1f} s  total {total:6.1f} s  max residual/σ_1 {resid:.1e}", flush=True)
    if total > args.budget:
      break
    best, T = T * args.scale_d, 2 * T
  capped = best is not None and 2 * best > args.max_td
  print(f"largest T·d within {args.budget:.0f} s: {best:,}"
        + (" (the --max-td cap; raise it to sweep further)" if capped else "") if best else
        f"no size finished within {args.budget:.0f} s")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
