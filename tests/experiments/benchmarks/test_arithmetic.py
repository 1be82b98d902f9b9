"""The benchmarks' own arithmetic: FLOP counts and accuracy columns against independent ones."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments.benchmarks import jacobian as jacobian_bench
from experiments.benchmarks import optim as optim_bench
from experiments.benchmarks import train_step


@pytest.mark.parametrize("cfg", [
    transformer.preset("tiny", n_layers=1, d_model=128),
    transformer.preset("llama-tiny", n_layers=1, d_model=128, n_kv_heads=2, d_ff=256),
], ids=["gpt2-family", "llama-family"])
def test_analytic_flops_match_xla_cost_analysis(cfg):
  # With one layer the scanned body is counted exactly once, so XLA's own count is a fair
  # reference (it also counts the element-wise work, hence the tolerance).
  B, T = 4, 128
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jnp.zeros((B, T), jnp.int32)
  forward = jax.jit(lambda p, t: transformer.Transformer(cfg).apply({"params": p}, t))
  cost = forward.lower(params, tokens).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  ours = train_step.model_flops_per_step(cfg, B, T) / 3  # forward only
  assert cost["flops"] == pytest.approx(ours, rel=0.05)


def test_jacobian_benchmark_accuracy_column():
  r = jacobian_bench.compare(T=4, d=16, k=4, rounds=1)
  assert r["converged"]
  assert r["rel_err"] < 1e-4
  assert r["dense_s"] > 0 and r["matrix_free_s"] > 0


def test_optim_benchmark_times_every_optimizer_on_the_same_work():
  cfg = transformer.preset("tiny", n_layers=1, d_model=32, n_heads=2)
  params = optim_bench.random_params(cfg)
  txs = optim_bench.optimizers(params)
  assert set(txs) == {"optim.muon", "optax.contrib.muon", "optax.adamw"}
  # Same settings, same hidden-matrix updates: the two Muons are compared like for like.
  grads = jax.tree.map(lambda p: jnp.sin(p), params)
  ours, _ = txs["optim.muon"].update(grads, txs["optim.muon"].init(params), params)
  ref, _ = txs["optax.contrib.muon"].update(grads, txs["optax.contrib.muon"].init(params), params)
  for name in ("w_q", "w_o"):
    np.testing.assert_allclose(ours["blocks"]["attn"][name], ref["blocks"]["attn"][name],
                               atol=1e-5)
  times = optim_bench.time_updates(txs, params, repeats=2)
  assert all(np.isfinite(t) and t > 0 for t in times.values())


def test_optim_benchmark_error_columns_against_svd():
  G, P = optim_bench.spectrum_matrix((12, 20), "power")
  U, s, Vt = np.linalg.svd(G, full_matrices=False)
  np.testing.assert_allclose(s, 1 / np.arange(1, 13), rtol=1e-12)
  np.testing.assert_allclose(P, U @ Vt, atol=1e-12)
  # O = U diag(f) Vᵀ: rms is the RMS of f − 1, cos the normalized mean of f.
  f = np.linspace(0.5, 1.5, 12)
  e = optim_bench.orthogonalization_error((U * f) @ Vt, P)
  assert e["rms"] == pytest.approx(np.sqrt(np.mean((f - 1) ** 2)), rel=1e-12)
  assert e["cos"] == pytest.approx(f.sum() / np.sqrt(12 * (f**2).sum()), rel=1e-12)


def test_optim_benchmark_table_orders_the_variants():
  txs = optim_bench.orthogonalizers()
  assert {"ours standard", "ours polar_express", "optax standard", "optax dion"} <= set(txs)
  names = ("ours standard", "ours standard, direct", "ours polar_express", "optax standard")
  inputs = (((16, 16), "gaussian"), ((16, 48), "power"))
  errors = optim_bench.error_table({n: txs[n] for n in names}, inputs)
  for ours, direct, pe, ref in zip(*(errors[n] for n in names), strict=True):
    # Same coefficients, steps and normalization as optax's default: the same error.
    assert ours["rms"] == pytest.approx(ref["rms"], abs=1e-5)
    assert direct["cos"] == pytest.approx(ref["cos"], abs=1e-6)
    assert pe["rms"] < ref["rms"] and pe["cos"] > ref["cos"]
  matrices = optim_bench.block_matrices(transformer.preset("tiny", n_layers=1, d_model=32,
                                                           n_heads=2))
  assert len(matrices) == 6 and all(x.ndim == 3 for x in matrices.values())
  times = optim_bench.time_orthogonalizers({n: txs[n] for n in names[:2]}, matrices, rounds=1)
  assert all(np.isfinite(t) and t > 0 for t in times.values())


@pytest.mark.slow
def test_optim_benchmark_train_steps_run():
  cfg = transformer.preset("tiny", n_layers=1, d_model=32, n_heads=2, max_len=16)
  times = optim_bench.train_steps(cfg, batch=2, seq_len=8, repeats=1)
  assert set(times) == {"muon (optim.muon)", "muon (optax.contrib)", "adamw"}
  assert all(np.isfinite(t) and t > 0 for t in times.values())


def test_train_step_peer_is_our_model_in_plain_flax():
  # Same parameters, mapped layer by layer: the plain-linen GPT computes our logits, so the
  # benchmark compares two implementations of one model.
  cfg = transformer.preset("tiny", d_model=32, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, cfg.vocab_size)
  ours = transformer.Transformer(cfg).apply({"params": params}, tokens)
  mapped = train_step.peer_params(params, cfg)
  peer = train_step.PeerGPT(cfg).apply({"params": mapped}, tokens)
  np.testing.assert_allclose(peer, ours, atol=1e-5)
  fresh = train_step.PeerGPT(cfg).init(jax.random.key(0), tokens)["params"]
  assert jax.tree.structure(fresh) == jax.tree.structure(mapped)
  assert sum(x.size for x in jax.tree.leaves(fresh)) == sum(
      x.size for x in jax.tree.leaves(params))


def test_train_step_compare_reports_both_steps():
  cfg = transformer.preset("tiny", d_model=32, n_layers=1, n_heads=2, max_len=16)
  r = train_step.compare(cfg, batch=2, seq_len=16, rounds=1, matmul_n=64)
  assert r["ratio"] == pytest.approx(r["ours_s"] / r["peer_s"])
  flops = train_step.model_flops_per_step(cfg, 2, 16)
  assert r["ours_share"] == pytest.approx(flops / r["ours_s"] / r["matmul_flops_per_s"])
  assert r["ours_s"] > 0 and r["peer_s"] > 0


def test_serial_benchmark_prints_a_ratio_per_op_and_shape(capsys):
  from experiments.benchmarks import serial as serial_bench

  assert serial_bench.main(["--rounds", "1"]) == 0
  rows = [line.split() for line in capsys.readouterr().out.splitlines()
          if line.split() and line.split()[0] in ("svd", "qr")]
  assert len(rows) == 2 * len(serial_bench.SHAPES)
  assert all(float(r[-1]) > 0 for r in rows)
