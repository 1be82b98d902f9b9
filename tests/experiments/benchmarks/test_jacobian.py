"""The Jacobian benchmark's scale and end-to-end rows, at tiny sizes, against dense SVDs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments.benchmarks import jacobian as jacobian_bench


def test_scale_row_is_converged_and_matches_the_dense_jacobian():
  r = jacobian_bench.scale(None, d=32, T=8, k=4, tol=1e-4, krylov_dim=None, n_heads=4)
  assert r["converged"] and r["bound"] <= 1e-4 and r["compile_s"] > 0 and r["run_s"] > 0
  f, params, x_TD = jacobian_bench._block(32, 8, 4, jax.random.key(0))
  s = np.linalg.svd(np.asarray(analysis.jacobian(functools.partial(f, params), x_TD),
                               np.float64), compute_uv=False)[:4]
  assert np.max(np.abs(r["values"] - s)) <= 1e-4 * s[0]


def test_end_to_end_row_matches_the_dense_product_of_layers():
  cfg = transformer.preset("tiny", d_model=16, n_layers=2, n_heads=2, max_len=8)
  params = transformer.init(cfg, jax.random.key(0))
  tokens_T = jnp.arange(8) % cfg.vocab_size
  r = jacobian_bench.end_to_end(params, cfg, tokens_T, 3, 1e-4, None)
  x_TD = analysis.stream_input(params, cfg, tokens_T)
  g = functools.partial(analysis.stack_fn(cfg), params["blocks"])
  s = np.linalg.svd(np.asarray(analysis.jacobian(g, x_TD), np.float64), compute_uv=False)[:3]
  assert r["converged"] and np.max(np.abs(r["values"] - s)) <= 1e-4 * s[0]
