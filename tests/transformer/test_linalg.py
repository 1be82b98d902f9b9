"""Newton–Schulz and power iteration against float64 SVD references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.linalg.polar import newton_schulz
from transformer.linalg.power import power_iteration


def _matrix(seed, shape, kappa=10.0):
  """`U diag(s) Vᵀ` with singular values log-spaced in `[1/kappa, 1]`, and its `U`, `s`, `V`."""
  rng = np.random.default_rng(seed)
  m, n = shape[-2:]
  k = min(m, n)
  U = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
  V = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
  s = np.geomspace(1.0, 1.0 / kappa, k)
  return (U * s) @ np.swapaxes(V, -1, -2), U, V


def _polar_error(O, U, V):
  """`‖O − U Vᵀ‖₂` in float64, and the singular values of `O`."""
  O = np.asarray(O, np.float64)
  P = U @ np.swapaxes(V, -1, -2)
  return np.linalg.norm(O - P, ord=2, axis=(-2, -1)).max(), np.linalg.svd(O, compute_uv=False)


@pytest.mark.parametrize("shape", [(32, 64), (64, 32), (3, 32, 32)])
def test_standard_coefficients_land_in_band_near_polar_factor(shape):
  G, U, V = _matrix(0, shape)
  O = jax.jit(newton_schulz)(jnp.asarray(G, jnp.float32))
  err, s = _polar_error(O, U, V)
  assert O.shape == shape and O.dtype == jnp.float32
  assert 0.68 <= s.min() and s.max() <= 1.135
  assert err <= 0.33  # every singular value moved to within the band, vectors kept


def test_schedule_and_classic_get_closer():
  G, U, V = _matrix(1, (48, 32))
  G = jnp.asarray(G, jnp.float32)
  _, s_dion = _polar_error(newton_schulz(G, coeffs="dion"), U, V)
  assert 0.97 <= s_dion.min() and s_dion.max() <= 1.04
  errors = [_polar_error(newton_schulz(G, ns_steps=k, coeffs="classic"), U, V)[0]
            for k in (3, 6, 20)]
  assert errors[0] > errors[1] > errors[2] and errors[2] < 2e-6


def test_float64_converges_to_svd_polar_factor():
  G, U, V = _matrix(2, (24, 40), kappa=5.0)
  with jax.enable_x64(True):
    O = newton_schulz(jnp.asarray(G), ns_steps=30, coeffs="classic")
    assert O.dtype == jnp.float64
    assert _polar_error(O, U, V)[0] < 1e-12


def test_batched_equals_looped_and_traced_steps():
  G = jax.random.normal(jax.random.key(0), (3, 16, 24))
  batched = jax.jit(newton_schulz)(G)
  looped = jnp.stack([newton_schulz(g) for g in G])
  np.testing.assert_allclose(batched, looped, rtol=1e-5, atol=1e-6)
  traced = jax.jit(lambda g, k: newton_schulz(g, ns_steps=k))(G, 5)
  np.testing.assert_allclose(traced, batched, rtol=1e-5, atol=1e-6)


def test_degenerate_inputs_are_finite():
  assert not jnp.any(newton_schulz(jnp.zeros((2, 8, 12))))
  u, v = jnp.arange(1.0, 9.0), jnp.ones(12)
  rank_one = newton_schulz(jnp.outer(u, v))
  s = np.linalg.svd(np.asarray(rank_one, np.float64), compute_uv=False)
  assert np.all(np.isfinite(s)) and 0.68 <= s[0] <= 1.135 and s[1] < 1e-5
  G = jax.random.normal(jax.random.key(1), (8, 12))
  huge = newton_schulz(1e30 * G)
  np.testing.assert_allclose(huge, newton_schulz(G), rtol=1e-4, atol=1e-5)


def test_bfloat16_compute_keeps_dtype_and_band():
  G, _, _ = _matrix(3, (32, 48))
  G = jnp.asarray(G, jnp.float32)
  O = newton_schulz(G, compute_dtype=jnp.bfloat16)
  s = np.linalg.svd(np.asarray(O, np.float64), compute_uv=False)
  assert O.dtype == jnp.float32 and 0.6 <= s.min() and s.max() <= 1.2


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="G.ndim"):
    newton_schulz(jnp.ones(4))
  with pytest.raises(ValueError, match="unknown coeffs"):
    newton_schulz(jnp.ones((4, 4)), coeffs="nope")


def test_power_iteration_matches_svd_and_reports_convergence():
  W = np.asarray(jax.random.normal(jax.random.key(2), (3, 20, 12)), np.float64)
  U, S, Vt = np.linalg.svd(W)
  with jax.enable_x64(True):
    res = jax.jit(power_iteration, static_argnums=2)(jnp.asarray(W), None, 300)
    few = power_iteration(jnp.asarray(W), power_steps=2)
  sigma, u, v = map(np.asarray, res[:3])
  np.testing.assert_allclose(sigma, S[:, 0], rtol=1e-6)
  # Singular vectors are defined up to sign: compare |cosines|.
  np.testing.assert_allclose(np.abs(np.sum(v * Vt[:, 0], -1)), 1.0, atol=1e-6)
  np.testing.assert_allclose(np.abs(np.sum(u * U[:, :, 0], -1)), 1.0, atol=1e-6)
  assert np.all(np.asarray(res.converged))
  # Two steps: not converged, and the bound covers the true error (σ̂ ≤ σ_max always).
  err = S[:, 0] - np.asarray(few.sigma)
  assert np.all(err >= -1e-12) and np.all(err <= np.asarray(few.bound))
  assert not np.all(np.asarray(few.converged)) and np.max(err / S[:, 0]) > 1e-4


def test_power_iteration_warm_start_is_exact_for_rank_one():
  a, b = np.arange(1.0, 6.0), np.linspace(-1, 1, 7)
  res = power_iteration(jnp.asarray(np.outer(a, b), jnp.float32), power_steps=1)
  np.testing.assert_allclose(res.sigma, np.linalg.norm(a) * np.linalg.norm(b), rtol=1e-5)
  assert bool(res.converged)
