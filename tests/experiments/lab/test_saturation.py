"""The float32 ceiling of a condition number and the float64 path of
`stability.input_conditions`, against numpy's float64 SVD."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments.lab import stability

EPS32 = float(np.finfo(np.float32).eps)


def ill_conditioned(kappa: float, n_rows=512, width=16, seed=0) -> np.ndarray:
  """`X (n_rows, width)` in float32 with singular values log-spaced from 1 to 1/kappa."""
  rng = np.random.default_rng(seed)
  U, _ = np.linalg.qr(rng.normal(size=(n_rows, width)))
  V, _ = np.linalg.qr(rng.normal(size=(width, width)))
  return ((U * np.logspace(0, -np.log10(kappa), width)) @ V.T).astype(np.float32)


def blocks_of(X_NB: np.ndarray, batch=4) -> dict:
  """One layer's `attn_in` as the model sows it, `(L=1, B, T, D)`."""
  return {"attn": {"attn_in": jnp.asarray(X_NB.reshape(1, batch, -1, X_NB.shape[-1]))}}


def test_the_ceilings_are_one_over_the_drop_tolerance():
  assert stability.kappa_ceiling((16 * 128, 32)) == pytest.approx(4096)  # layernorm-condition
  assert stability.kappa_ceiling((8, 8), rtol=EPS32) == pytest.approx(1 / EPS32)  # ≈ 8.4e6
  assert stability.kappa_ceiling((2048, 32), jnp.float64) == pytest.approx(
      1 / (2048 * np.finfo(np.float64).eps))
  sat = stability.kappa_saturated([1023.0, 1024.0, 3987.0, np.nan], (2048, 32))
  assert sat.tolist() == [False, True, True, False]  # within 1/4 of 4,096


@pytest.mark.parametrize("center", [False, True])
def test_float64_path_reads_past_the_float32_ceiling_and_matches_numpy(center):
  X = ill_conditioned(1e5)  # N = 512: the float32 ceiling is 1/(512·eps₃₂) ≈ 16,384
  ref = X.astype(np.float64)
  ref = ref - ref.mean(0) if center else ref
  s = np.linalg.svd(ref, compute_uv=False)  # the same float32-stored inputs, float64 SVD
  f32 = stability.input_conditions(blocks_of(X), center=center, names=("attn_in",))["attn_in"]
  f64 = stability.input_conditions(blocks_of(X), center=center, names=("attn_in",),
                                   float64=True)["attn_in"]
  assert int(f32["n_dropped"][0]) > 0 and float(f32["kappa_eff"][0]) < 16384
  assert stability.kappa_saturated(f32["kappa_eff"], X.shape).all()
  kept = s > stability.rounding_rtol(X.shape) * s[0]
  assert int(f64["n_dropped"][0]) == int((~kept).sum())
  np.testing.assert_allclose(f64["kappa_eff"][0], s[0] / s[kept][-1], rtol=1e-9)
  if not center:  # centring a rank-16 X with a random mean moves its spectrum a little
    assert int(f64["n_dropped"][0]) == 0
    np.testing.assert_allclose(f64["kappa_eff"][0], 1e5, rtol=1e-2)
  assert not stability.kappa_saturated(f64["kappa_eff"], X.shape,
                                       rtol=stability.rounding_rtol(X.shape)).any()
  assert f64["kappa_eff"].dtype == np.float64


def test_float64_path_agrees_below_the_ceiling_and_keeps_layernorms_exact_zero():
  """A well-conditioned model reads the same κ in both paths; LayerNorm's all-ones zero is
  float32 rounding in the stored inputs, and the float64 path still drops it."""
  for norm, dropped in (("layernorm", 1), ("rmsnorm", 0)):
    cfg = transformer.Config(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=16,
                             norm=norm)
    params = transformer.init(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, 16), 0, cfg.vocab_size)
    inter = stability.intermediates(params, cfg, tokens)
    f32 = stability.input_conditions(inter, center=True, names=("attn_in", "ffn_in"))
    f64 = stability.input_conditions(inter, center=True, names=("attn_in", "ffn_in"),
                                     float64=True)
    for name in ("attn_in", "ffn_in"):
      np.testing.assert_array_equal(f64[name]["n_dropped"], dropped)
      np.testing.assert_allclose(f64[name]["kappa_eff"], f32[name]["kappa_eff"], rtol=1e-4)


def test_float64_path_refuses_to_run_under_jit():
  X = ill_conditioned(10.0, n_rows=64, width=4)
  run = functools.partial(stability.input_conditions, center=False, names=("attn_in",),
                          float64=True)
  with pytest.raises(ValueError, match="cannot run inside jit"):
    jax.jit(run)(blocks_of(X))
