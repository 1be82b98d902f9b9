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
