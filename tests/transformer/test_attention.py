"""Masks, RoPE and softmax attention against float64 numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.attention import make_mask, rope, softmax_attention


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 3])
def test_mask_matches_loop(causal, window):
  T = 7
  pos = jnp.arange(T)[None]
  valid = jnp.array([[0, 1, 1, 1, 1, 1, 1]], bool)  # one left-padding slot
  mask = np.asarray(make_mask(pos, pos, causal=causal, window=window, k_valid_BS=valid))[0]
  for i in range(T):
    for j in range(T):
      ok = j > 0
      ok &= (j <= i) if causal else True
      if window is not None:
        ok &= (i - j < window) and (causal or j - i < window)
      assert mask[i, j] == ok, (i, j)


def test_rope_matches_rotate_half_reference():
  B, T, H, D, theta = 1, 5, 2, 8, 500.0
  x = np.random.default_rng(0).normal(size=(B, T, H, D))
  got = np.asarray(rope(jnp.asarray(x, jnp.float32), jnp.arange(T)[None], theta))
  inv = theta ** (-np.arange(0, D, 2) / D)
  want = np.empty_like(x)
  for t in range(T):
    ang = t * inv
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[0, t, :, : D // 2], x[0, t, :, D // 2:]
    want[0, t] = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
  np.testing.assert_allclose(got, want, atol=1e-5)
  # A rotation: norms kept, and q·k depends only on the relative offset.
  np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
  q = jax.random.normal(jax.random.key(0), (1, 1, 1, 8))
  k = jax.random.normal(jax.random.key(1), (1, 1, 1, 8))

  def score(i, j):
    return float((rope(q, jnp.array([[i]]), 1e4) * rope(k, jnp.array([[j]]), 1e4)).sum())

  assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
  assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


def test_softmax_attention_matches_numpy_float64():
  rng = np.random.default_rng(1)
  B, T, H, D = 2, 6, 3, 4
  q, k, v = (rng.normal(size=(B, T, H, D)) for _ in range(3))
  pos = jnp.arange(T)[None].repeat(B, 0)
  mask = make_mask(pos, pos, causal=True)
  out, aux = softmax_attention(*(jnp.asarray(a, jnp.float32) for a in (q, k, v)), mask,
                               scale=D**-0.5)
  s = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D)
  s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
  a = np.exp(s - s.max(-1, keepdims=True))
  a /= a.sum(-1, keepdims=True)
  np.testing.assert_allclose(aux["weights"], a, atol=1e-6)
  np.testing.assert_allclose(out, np.einsum("bhts,bshd->bthd", a, v), atol=1e-5)
  assert aux["scores"].dtype == jnp.float32
