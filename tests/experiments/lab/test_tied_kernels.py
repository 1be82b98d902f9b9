"""lab.tied_kernels: the kernel matrices rebuilt in float64 equal the library's own, and the
certificate `psd-attention` applies to its trained models decides them as numpy does."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments.lab import tied_kernels
from transformer.attention import linear_quadratic, rbf_attention, softmax_attention

RNG = np.random.default_rng(5)
FNS = {"softmax": softmax_attention, "rbf": rbf_attention, "linear": linear_quadratic}


def _by_hand(q, k, attention, s):
  """One head's kernel by loops over pairs, float64: the formulas of the module docstring."""
  T, S = len(q), len(k)
  K = np.empty((T, S))
  for t in range(T):
    for j in range(S):
      if attention == "softmax":
        K[t, j] = np.exp(q[t] @ k[j] * s)
      elif attention == "rbf":
        K[t, j] = np.exp(-0.5 * s * ((q[t] - k[j]) ** 2).sum())
      else:
        phi = lambda x: np.where(x > 0, x + 1, np.exp(x))  # noqa: E731
        K[t, j] = phi(q[t] * s**0.5) @ phi(k[j] * s**0.5)
  return K


@pytest.mark.parametrize("attention", tied_kernels.KERNELS)
def test_kernels_equal_the_library_scores_and_a_loop_by_hand(attention):
  q = RNG.standard_normal((2, 9, 3, 8))
  k = RNG.standard_normal((2, 9, 3, 8))
  s = 8**-0.5
  K = tied_kernels.kernels(q, k, attention, s)
  everything = jnp.ones((2, 9, 9), bool)
  scores = np.asarray(FNS[attention](jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                                     jnp.asarray(k, jnp.float32), everything, scale=s)[1]["scores"],
                      np.float64)
  lib = np.exp(scores)
  if attention == "softmax":  # divided by its largest entry per matrix: the same up to a factor
    lib = lib / lib.max(axis=(-2, -1), keepdims=True)
  np.testing.assert_allclose(K, lib, rtol=2e-5)
  for b in range(2):
    for h in range(3):
      ref = _by_hand(q[b, :, h], k[b, :, h], attention, s)
      if attention == "softmax":
        ref = ref / ref.max()
      np.testing.assert_allclose(K[b, h], ref, rtol=1e-12)


def test_kernels_repeat_grouped_key_heads_and_refuse_unknown_attention():
  q, k = RNG.standard_normal((1, 5, 4, 2)), RNG.standard_normal((1, 5, 2, 2))
  K = tied_kernels.kernels(q, k, "linear", 0.5)
  np.testing.assert_allclose(K[:, 1], tied_kernels.kernels(q[:, :, 1:2], k[:, :, :1], "linear",
                                                           0.5)[:, 0])
  with pytest.raises(ValueError, match="local"):
    tied_kernels.kernels(q, q, "local", 0.5)


@pytest.mark.parametrize("attention", tied_kernels.KERNELS)
def test_certificate_of_a_model_tied_and_untied(attention):
  """Tied: every matrix certified (its least eigenvalue, by numpy on the loop-built kernel,
  is above −n·eps·λ_max). Untied: the kernel is not symmetric, so none is."""
  tokens = np.asarray(jax.random.randint(jax.random.key(3), (2, 12), 0, 64))
  for tied in (True, False):
    cfg = transformer.Config(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32,
                             positions="learned", init_std=0.5, attention=attention,
                             qk_tied=tied)
    params = transformer.init(cfg, jax.random.key(4))
    got = tied_kernels.certificate(params, cfg, tokens)
    _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                   mutable=["intermediates"])
    inter = state["intermediates"]["blocks"]["attn"]
    q, k = (np.asarray(inter[n][0], np.float64) for n in ("q", "k"))  # (L, B, T, H, dh)
    rel, asym = [], []
    for layer in range(2):
      for b in range(2):
        for h in range(2):
          K = _by_hand(q[layer, b, :, h], k[layer, b, :, h], attention, 8**-0.5)
          lam = np.linalg.eigvalsh((K + K.T) / 2)
          rel.append(lam[0] / np.abs(lam).max())
          asym.append(np.linalg.norm(K - K.T) / np.linalg.norm(K))
    assert got["min_eig_rel"] == pytest.approx(min(rel), abs=1e-12)
    assert got["asymmetry"] == pytest.approx(max(asym), rel=1e-6, abs=1e-15)
    if tied:
      assert got["psd_exact"] == 1.0 and max(asym) == 0.0
      assert min(rel) >= -12 * np.finfo(np.float64).eps
    else:
      assert got["psd_exact"] == 0.0 and min(asym) > 1e-3
