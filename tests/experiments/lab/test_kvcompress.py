"""evaluate_compressed and the KIVI baseline: losses and ratios measured from bytes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from analysis import kv
from experiments.lab import kvcompress

CFG = transformer.gpt2_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)
# RoPE and grouped-query attention: calibrate compresses the keys before the rotation.
LLAMA = transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                 d_ff=64, max_len=32)


def _setup(cfg=CFG):
  params = transformer.init(cfg, jax.random.key(0))
  tokens = np.asarray(jax.random.randint(jax.random.key(1), (4, 17), 0, 64))
  return params, tokens


def test_ratio_one_is_full_rank_float16():
  params, tokens = _setup()
  out = kvcompress.evaluate_compressed(params, CFG, tokens, kv_ratio=1, kv_bits=16,
                                       calibration_tokens=tokens)
  assert out["kv_compression"] == 1.0 and out["coefficients_per_token"] == 2 * 2 * 4 * 8
  np.testing.assert_allclose(out["loss"], out["loss_full"], rtol=1e-4)
  with pytest.raises(ValueError, match="must be >= 1"):
    kvcompress.evaluate_compressed(params, CFG, tokens, kv_ratio=0.5, calibration_tokens=tokens)


def test_ratio_and_rise_at_low_rank():
  params, tokens = _setup()
  out = kvcompress.evaluate_compressed(params, CFG, tokens, kv_ratio=4, kv_alloc="greedy",
                                       kv_bits=16, calibration_tokens=tokens)
  assert out["kv_compression"] == 4.0 and out["coefficients_per_token"] == 32
  assert out["loss"] != out["loss_full"]
  with pytest.raises(ValueError, match="calibration tokens are missing"):
    kvcompress.evaluate_compressed(params, CFG, tokens, kv_ratio=4, kv_alloc="loss")


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_kivi_bytes_and_error(bits):
  x = jax.random.normal(jax.random.key(0), (2, 40, 3, 8))
  for axis in ("channel", "token"):
    deq, stored = kvcompress.kivi_quantize(x, bits, axis, group=16)
    # Asymmetric rounding: error at most half a step of its group's range.
    rng = 2 * float(jnp.abs(x).max())
    assert float(jnp.abs(deq - x).max()) <= rng / (2**bits - 1) / 2 * 1.01 + 1e-3
    n = sum(a.nbytes for a in stored)
    codes = 2 * 40 * 3 * 8 * bits // 8
    scales = (2 * 3 * 3 * 8 if axis == "channel" else 2 * 40 * 3) * 2 * 2  # lo, scale float16
    assert n == codes + scales
  params, tokens = _setup()
  out = kvcompress.evaluate_kivi(params, CFG, tokens, bits, group=8)
  per_head_token = 2 * 8 * bits / 8 + 2 * 8 * 2 / 8 + 2 * 2  # K, V codes; K, V lo and scale
  np.testing.assert_allclose(out["kv_compression"], 2 * 8 * 2 / per_head_token)


@pytest.mark.parametrize("cfg", [CFG, LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("ratio, alloc, bits", [(8, "loss", 16), (16, "greedy", 4)])
def test_calibrate_once_equals_compress_each_time(ratio, alloc, bits, cfg):
  """One calibration reused for every setting gives kv.compress's bases, ranks and steps."""
  params, tokens = _setup(cfg)
  cal = kvcompress.calibrate(params, cfg, tokens, grid=3)
  got = kvcompress.compression(params, cfg, cal, ratio, alloc, bits)
  want = kv.compress(params, cfg, tokens, ratio, alloc, bits, grid=3)
  assert got.key_ranks == want.key_ranks and got.value_ranks == want.value_ranks
  assert got.bits == want.bits and got.pre_rope == want.pre_rope == (cfg is LLAMA)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match="loss table"):
    kvcompress.compression(params, cfg, kvcompress.calibrate(params, cfg, tokens,
                                                             loss_aware=False), 8, "loss")


def test_pre_rope_full_rank_is_exact_and_post_rope_is_kept_on_request():
  params, tokens = _setup(LLAMA)
  cal = kvcompress.calibrate(params, LLAMA, tokens, loss_aware=False)
  assert cal.pre_rope and not kvcompress.calibrate(params, LLAMA, tokens, loss_aware=False,
                                                   pre_rope=False).pre_rope
  full = kvcompress.compression(params, LLAMA, cal, 1, "uniform", 16)  # every dimension
  out = kvcompress.evaluate(params, LLAMA, full, tokens)
  np.testing.assert_allclose(out["loss"], out["loss_full"], rtol=1e-5)


@pytest.mark.parametrize("cfg", [CFG, LLAMA], ids=["gpt", "llama"])
def test_rank_vs_context_equals_moments_of_each_prefix(cfg):
  params, tokens = _setup(cfg)
  got = kvcompress.rank_vs_context(params, cfg, tokens, (4, 16), fraction=0.9)
  for T in (4, 16):
    mk, mv = kv.kv_moments(params, cfg, tokens[:, :T], pre_rope=cfg is LLAMA)
    assert got[T]["key_mean"] == float(kv.energy_rank(kv.pca_bases(mk)[1], 0.9).mean())
    assert got[T]["value_max"] == int(kv.energy_rank(kv.pca_bases(mv)[1], 0.9).max())
  with pytest.raises(ValueError, match="exceeds"):
    kvcompress.rank_vs_context(params, cfg, tokens, (32,))
