"""Dense vs matrix-free Jacobian spectra of one transformer block, at converged accuracy.

    python -m experiments.benchmarks.jacobian [--k 8] [--tol 1e-4] [--rounds 3]
                                              [--scale-krylov-dim 64] [--budget 60]

Takes a few minutes on 2 idle CPU cores (longer when they are shared). Two parts, one run:

1. Ratio. For one block of width `d = 64` at `T = 8, 16, 32` (`T·d` = 512 … 2048), the time
   of the top-`k` singular values of `J = ∂block/∂x` by the dense path (`jax.jacfwd`, then an
   SVD of the `(T·d)²` matrix) and by the matrix-free path (Golub–Kahan–Lanczos on `JᵀJ`
   through `jax.jvp`/`jax.vjp`, never forming `J`, grown until every value's bound is at most
   `tol · σ_1`), both compiled ahead, timed in interleaved rounds
   (`experiments.benchmarks.timing`), with the Krylov dimension the matrix-free path needed,
   its converged flag, its largest bound and the measured agreement. At init the block is
   near the identity and its top singular values cluster (1.040, 1.039, …), the slow case for
   Krylov methods; a row whose values did not converge is marked and not given a ratio.
2. Scale. For a block of width `d = 512` and `T` doubling from 256, the wall time (compile
   plus one run) of the matrix-free top-`k` with a Krylov space capped at
   `--scale-krylov-dim` (memory `≈ 2 · cap · T·d` floats), up to `T·d = 2²⁰ ≈ 1.05·10⁶`,
   stopping after the first size over `--budget` seconds. Each size prints its converged flag
   and largest bound / σ_1; the summary names the largest `T·d` that converged within budget.

The dense path needs `4 (T·d)²` bytes and `O((T·d)³)` time; the matrix-free path needs
`O(krylov_dim · T·d)` memory and `krylov_dim` JVP/VJP pairs, so only it reaches `T·d ≥ 10⁶`.
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments.benchmarks import timing


def _block(d: int, T: int, n_heads: int, key: jax.Array):
  cfg = transformer.preset("tiny", d_model=d, n_heads=n_heads, n_layers=1, max_len=T)
  init_key, x_key = jax.random.split(key)
  params = transformer.layer(transformer.init(cfg, init_key, seq_len=8), 0)
  x_TD = jax.random.normal(x_key, (T, d))
  return transformer.block_fn(cfg), params, x_TD


def compare(T: int, d: int, k: int, tol: float = 1e-4, krylov_dim: int | None = None,
            rounds: int = 3) -> dict:
  """Median run times (compiled ahead) of the dense and matrix-free top-`k` singular values."""
  f, params, x_TD = _block(d, T, n_heads=4, key=jax.random.key(0))

  def dense(p, x):
    J = analysis.jacobian(functools.partial(f, p), x, max_bytes=2**31)
    return jnp.linalg.svd(J, compute_uv=False)[:k]

  def matrix_free(p, x):
    return analysis.jacobian_top_singular_values(functools.partial(f, p), x, k, tol=tol,
                                                 krylov_dim=krylov_dim)

  compiled = {name: jax.jit(fn).lower(params, x_TD).compile()
              for name, fn in (("dense", dense), ("matrix_free", matrix_free))}
  times = timing.interleaved({name: functools.partial(c, params, x_TD)
                              for name, c in compiled.items()}, rounds)
  s = np.asarray(compiled["dense"](params, x_TD), np.float64)
  res = compiled["matrix_free"](params, x_TD)
  values = np.asarray(res.values, np.float64)
  return {"dense_s": times["dense"], "matrix_free_s": times["matrix_free"],
          "rel_err": float(np.max(np.abs(values - s)) / s[0]),
          "bound": float(np.max(np.asarray(res.bounds)) / values[0]),
          "converged": bool(np.all(np.asarray(res.converged))),
          "krylov_dim": int(res.krylov_dim)}


def scale(d: int, T: int, k: int, tol: float, krylov_dim: int) -> dict:
  """Compile and run seconds, convergence and largest bound / σ_1 of the top-`k` at `T·d`."""
  f, params, x_TD = _block(d, T, n_heads=8, key=jax.random.key(0))
  fn = jax.jit(lambda p, x: analysis.jacobian_top_singular_values(
      functools.partial(f, p), x, k, tol=tol, krylov_dim=krylov_dim))
  compiled = None

  def build():
    nonlocal compiled
    compiled = fn.lower(params, x_TD).compile()

  compile_s = timing.seconds(build)
  res = None

  def run():
    nonlocal res
    res = compiled(params, x_TD)
    return res

  run_s = timing.seconds(run)
  values = np.asarray(res.values)
  if not np.all(np.isfinite(values)):
    raise FloatingPointError(f"non-finite singular values at T·d={T * d}")
  return {"compile_s": compile_s, "run_s": run_s,
          "bound": float(np.max(np.asarray(res.bounds)) / values[0]),
          "converged": bool(np.all(np.asarray(res.converged))), "krylov_dim": int(res.krylov_dim)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.jacobian",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--k", type=int, default=8)
  parser.add_argument("--tol", type=float, default=1e-4,
                      help="required accuracy relative to σ_1")
  parser.add_argument("--krylov-dim", type=int, default=None,
                      help="cap on the Krylov dimension (ratio part; default: the library's)")
  parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
  parser.add_argument("--scale-krylov-dim", type=int, default=64,
                      help="cap on the Krylov dimension (scale part)")
  parser.add_argument("--budget", type=float, default=60.0, help="seconds for the scale sweep")
  parser.add_argument("--compare-t", type=int, nargs="+", default=[8, 16, 32])
  parser.add_argument("--scale-d", type=int, default=512)
  parser.add_argument("--scale-t0", type=int, default=256)
  parser.add_argument("--max-td", type=int, default=2**20)
  args = parser.parse_args(argv)

  d = 64
  print(f"top-{args.k} singular values of one block's Jacobian, d={d}, tol={args.tol:g} "
        f"(compiled ahead, median of {args.rounds} interleaved rounds)")
  print(f"{'T':>5} {'T·d':>7} {'dense s':>9} {'matrix-free s':>14} {'ratio':>7} "
        f"{'krylov':>7} {'conv.':>6} {'bound/σ1':>9} {'rel err':>9}")
  for T in args.compare_t:
    r = compare(T, d, args.k, args.tol, args.krylov_dim, args.rounds)
    ratio = f"{r['dense_s'] / r['matrix_free_s']:>7.1f}" if r["converged"] else f"{'-':>7}"
    print(f"{T:>5} {T * d:>7} {r['dense_s']:>9.3f} {r['matrix_free_s']:>14.3f} {ratio} "
          f"{r['krylov_dim']:>7} {('yes' if r['converged'] else 'NO'):>6} "
          f"{r['bound']:>9.1e} {r['rel_err']:>9.1e}", flush=True)

  print(f"\nmatrix-free scaling, d={args.scale_d}, Krylov cap {args.scale_krylov_dim}, "
        f"tol={args.tol:g}, budget {args.budget:.0f} s (compile + run)")
  best, T = None, args.scale_t0
  while T * args.scale_d <= args.max_td:
    r = scale(args.scale_d, T, args.k, args.tol, args.scale_krylov_dim)
    total = r["compile_s"] + r["run_s"]
    print(f"  T={T:>5}  T·d={T * args.scale_d:>9,}  compile {r['compile_s']:6.1f} s  run "
          f"{r['run_s']:6.1f} s  total {total:6.1f} s  krylov {r['krylov_dim']:>4}  "
          f"converged {'yes' if r['converged'] else 'NO'}  max bound/σ_1 {r['bound']:.1e}",
          flush=True)
    if total > args.budget:
      break
    if r["converged"]:
      best = T * args.scale_d
    T *= 2
  capped = best is not None and 2 * best > args.max_td
  print(f"largest converged T·d within {args.budget:.0f} s: {best:,}"
        + (" (the --max-td cap; raise it to sweep further)" if capped else "") if best else
        f"no size converged within {args.budget:.0f} s")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
