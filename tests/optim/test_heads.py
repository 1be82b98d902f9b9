"""The head-overlap penalty against a float64 loop, its gradient, and the decoupled step."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim


def _overlap_reference(W, n):
  dh = W.shape[-1] // n
  blocks = [W[:, h * dh:(h + 1) * dh] for h in range(n)]
  return 0.5 * sum(np.sum((a.T @ b) ** 2) for a, b in itertools.permutations(blocks, 2))


@pytest.mark.parametrize("side", ["columns", "rows"])
def test_penalty_and_gradient(side):
  W = jax.random.normal(jax.random.key(0), (2, 12, 18))
  R, grad = optim.head_gram_overlap(W, 3, side)
  W64 = np.asarray(W, np.float64)
  ref = [_overlap_reference(w if side == "columns" else w.T, 3) for w in W64]
  np.testing.assert_allclose(R, ref, rtol=1e-5)
  with jax.enable_x64(True):
    R_fn = lambda w: optim.head_gram_overlap(w, 3, side)[0].sum()
    auto = np.asarray(jax.grad(R_fn)(jnp.asarray(W64)))
  np.testing.assert_allclose(grad, auto, rtol=1e-4, atol=1e-4)


def test_strength_zero_is_identity_and_steps_reduce_overlap():
  key = jax.random.key(1)
  attn = {"w_q": jax.random.normal(key, (2, 16, 16)) / 4,
          "w_k": jax.random.normal(key, (2, 16, 8)) / 4,
          "w_o": jax.random.normal(key, (2, 16, 16)) / 4}
  params = {"blocks": {"attn": attn}, "w_1": jnp.ones((16, 16))}  # ours at their place
  updates = jax.tree.map(lambda p: jnp.sin(p), params)
  same, _ = optim.orthogonal_heads(0.0, 4).update(updates, optax.EmptyState(), params)
  for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(updates), strict=True):
    np.testing.assert_array_equal(a, b)
  tx = optim.orthogonal_heads(0.02, n_heads=4, n_kv_heads=2)
  step = jax.jit(lambda p: optax.apply_updates(
      p, tx.update(jax.tree.map(jnp.zeros_like, p), optax.EmptyState(), p)[0]))
  before = {k: optim.head_gram_overlap(attn[k], n, side)[0]
            for k, n, side in (("w_q", 4, "columns"), ("w_k", 2, "columns"), ("w_o", 4, "rows"))}
  for _ in range(200):
    params = step(params)
  for k, n, side in (("w_q", 4, "columns"), ("w_k", 2, "columns"), ("w_o", 4, "rows")):
    W = params["blocks"]["attn"][k]
    assert np.all(np.asarray(optim.head_gram_overlap(W, n, side)[0]) < 1e-3 * before[k])
  np.testing.assert_array_equal(params["w_1"], 1.0)  # not a head-split matrix


# ------------------------------------------------ other libraries' attention (issue 48)

def _grad_of_row_blocks(blocks):
  """`∂R/∂B_h = 2 Σ_{g≠h} B_h B_gᵀ B_g` for `R = Σ_{h<g} ‖B_h B_gᵀ‖²`, float64 (heads as row
  blocks `B_h (Dh, D)` of a matrix that maps `D -> H·Dh`, as stored by PyTorch/equinox)."""
  return [2 * sum(b @ c.T @ c for g, c in enumerate(blocks) if g != h)
          for h, b in enumerate(blocks)]


def _grad_of_column_blocks(blocks):
  """`∂R/∂C_h = 2 Σ_{g≠h} C_g C_gᵀ C_h` for `R = Σ_{h<g} ‖C_hᵀ C_g‖²` (heads as column blocks
  `C_h (D, Dh)`), float64."""
  return [2 * sum(c @ c.T @ b for g, c in enumerate(blocks) if g != h)
          for h, b in enumerate(blocks)]


def _step(tx, params):
  zeros = jax.tree.map(jnp.zeros_like, params)
  return jax.jit(lambda p: tx.update(zeros, tx.init(p), p)[0])(params)


def test_equinox_attention_against_a_float64_reference():
  eqx = pytest.importorskip("equinox")
  H, D, lam = 4, 32, 0.1
  attn = eqx.nn.MultiheadAttention(H, D, key=jax.random.key(0))
  params = {"blocks": {"0": {"attn": eqx.filter(attn, eqx.is_inexact_array)}}}
  u = _step(optim.orthogonal_heads(lam, n_heads=H), params)["blocks"]["0"]["attn"]
  dh = D // H
  for name in ("query_proj", "key_proj", "value_proj"):  # weight (H·Dh, D): head h = rows
    w = np.asarray(getattr(attn, name).weight, np.float64)
    grads = _grad_of_row_blocks([w[h * dh:(h + 1) * dh] for h in range(H)])
    np.testing.assert_allclose(getattr(u, name).weight, -lam * np.concatenate(grads, 0),
                               rtol=1e-4, atol=1e-6, err_msg=name)
    assert np.abs(np.concatenate(grads, 0)).max() > 1e-2  # the reference is not trivially 0
  w = np.asarray(attn.output_proj.weight, np.float64)  # (D, H·Dh): head h = columns
  grads = _grad_of_column_blocks([w[:, h * dh:(h + 1) * dh] for h in range(H)])
  np.testing.assert_allclose(u.output_proj.weight, -lam * np.concatenate(grads, 1),
                             rtol=1e-4, atol=1e-6)


def test_nnx_attention_against_a_float64_reference():
  from flax import nnx

  H, D, lam = 4, 32, 0.1
  attn = nnx.MultiHeadAttention(H, D, qkv_features=D, decode=False, rngs=nnx.Rngs(0))
  state = nnx.state(attn, nnx.Param)
  u = _step(optim.orthogonal_heads(lam, n_heads=H), state)
  for name in ("query", "key", "value"):  # kernel (D, H, Dh): head h = [:, h, :]
    k = np.asarray(state[name]["kernel"][...], np.float64)
    grads = _grad_of_column_blocks([k[:, h] for h in range(H)])
    np.testing.assert_allclose(u[name]["kernel"][...], -lam * np.stack(grads, 1),
                               rtol=1e-4, atol=1e-6, err_msg=name)
  k = np.asarray(state["out"]["kernel"][...], np.float64)  # (H, Dh, D): head h = [h]
  grads = _grad_of_row_blocks([k[h] for h in range(H)])
  np.testing.assert_allclose(u["out"]["kernel"][...], -lam * np.stack(grads, 0),
                             rtol=1e-4, atol=1e-6)
  for name in ("query", "out"):  # biases pass through
    np.testing.assert_array_equal(u[name]["bias"][...], 0.0)


def test_a_fused_qkv_is_three_matrices_of_heads():
  # GPT-2's c_attn (D, 3D), stored (d_in, d_out): q, k, v column thirds, each of H heads.
  H, D, lam = 2, 8, 0.1
  w = np.random.default_rng(3).normal(size=(D, 3 * D))
  params = {"h": {"0": {"attn": {"c_attn": {"weight": jnp.asarray(w, jnp.float32)}}}}}
  u = _step(optim.orthogonal_heads(lam, n_heads=H), params)["h"]["0"]["attn"]["c_attn"]
  dh = D // H
  want = np.concatenate([np.concatenate(_grad_of_column_blocks(
      [w[:, p * D + h * dh:p * D + (h + 1) * dh] for h in range(H)]), 1) for p in range(3)], 1)
  np.testing.assert_allclose(u["weight"], -lam * want, rtol=1e-4, atol=1e-6)
