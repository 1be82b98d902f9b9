"""Spectra against numpy float64 and matrices with known spectra."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import spectra


def _with_spectrum(s, m, n, seed=0):
  rng = np.random.default_rng(seed)
  U = np.linalg.qr(rng.standard_normal((m, len(s))))[0]
  V = np.linalg.qr(rng.standard_normal((n, len(s))))[0]
  return (U * s) @ V.T


def test_spectrum_matches_numpy_float64_batched():
  W = np.random.default_rng(0).standard_normal((3, 40, 24)).astype(np.float32)
  out = jax.jit(lambda W: spectra.spectrum(W, matrix_axes=(-2, -1)))(jnp.asarray(W))
  s = np.linalg.svd(W.astype(np.float64), compute_uv=False)
  np.testing.assert_allclose(out["singular_values"], s, rtol=1e-5)
  np.testing.assert_allclose(out["condition_number"], s[:, 0] / s[:, -1], rtol=1e-4)
  np.testing.assert_allclose(out["stable_rank"], (s**2).sum(1) / s[:, 0] ** 2, rtol=1e-5)
  np.testing.assert_array_equal(out["numerical_rank"], np.linalg.matrix_rank(W))
  assert out["alpha"].shape == (3,)


def test_stable_and_effective_rank_of_known_spectra():
  flat = jnp.asarray(_with_spectrum(np.ones(6), 20, 10), jnp.float32)
  spec = spectra.spectrum(flat)
  np.testing.assert_allclose(spec["stable_rank"], 6, rtol=1e-5)
  np.testing.assert_allclose(spec["effective_rank"], 6, rtol=1e-4)
  assert int(spec["numerical_rank"]) == 6
  s = np.array([3.0, 1.0, 1.0])
  p = s / s.sum()
  np.testing.assert_allclose(spectra.stable_rank(jnp.asarray(s)), 11 / 9, rtol=1e-6)
  np.testing.assert_allclose(spectra.effective_rank(jnp.asarray(s)),
                             np.exp(-(p * np.log(p)).sum()), rtol=1e-6)


def test_numerical_rank_uses_the_stated_tolerance():
  W = jnp.asarray(_with_spectrum(np.array([1.0, 1e-2, 1e-4]), 10, 8), jnp.float32)
  assert int(spectra.spectrum(W, tol=1e-3)["numerical_rank"]) == 2
  assert int(spectra.spectrum(W, tol=1e-5)["numerical_rank"]) == 3


def test_mp_edge_on_gaussian_matrices_and_spiked_outliers():
  rng = np.random.default_rng(1)
  m, n, sd = 400, 200, 0.3
  W = sd * rng.standard_normal((m, n))
  spec = spectra.spectrum(jnp.asarray(W, jnp.float32))
  edge = sd * (np.sqrt(m) + np.sqrt(n))
  np.testing.assert_allclose(spec["mp_edge"], edge, rtol=0.01)
  np.testing.assert_allclose(spec["singular_values"][0], edge, rtol=0.03)
  u, v = rng.standard_normal((m, 3)), rng.standard_normal((n, 3))
  spiked = W + 3 * edge * (np.linalg.qr(u)[0] * [3, 2, 1.5]) @ np.linalg.qr(v)[0].T
  assert int(spectra.spectrum(jnp.asarray(spiked, jnp.float32))["n_outliers"]) == 3


def test_power_law_alpha_recovers_pareto_exponent():
  rng = np.random.default_rng(2)
  alpha = 3.0  # density ∝ λ^(-alpha): Pareto with tail index alpha - 1
  lam = rng.pareto(alpha - 1, size=(2, 20000)) + 1.0
  np.testing.assert_allclose(spectra.power_law_alpha(jnp.asarray(lam)), alpha, rtol=0.05)


def test_eigenvalues_sorted_by_modulus_match_numpy():
  A = np.random.default_rng(3).standard_normal((2, 12, 12))
  lam = np.asarray(spectra.eigenvalues(jnp.asarray(A, jnp.float32)))
  for a, l in zip(A, lam, strict=True):
    ref = np.linalg.eigvals(a)
    np.testing.assert_allclose(np.abs(l), np.sort(np.abs(ref))[::-1], rtol=1e-4)
    np.testing.assert_allclose(np.sort_complex(l), np.sort_complex(ref), atol=1e-4)


def test_factored_singular_values_equal_dense():
  rng = np.random.default_rng(4)
  left, right = rng.standard_normal((2, 3, 32, 8)), rng.standard_normal((2, 3, 24, 8))
  got = spectra.factored_singular_values(jnp.asarray(left), jnp.asarray(right))
  ref = np.linalg.svd(left @ np.swapaxes(right, -1, -2), compute_uv=False)[..., :8]
  np.testing.assert_allclose(got, ref, rtol=1e-4)


def test_rank_certificate_decides_in_float64():
  W = _with_spectrum(np.array([1.0, 1e-9]), 6, 2)
  cert = spectra.rank_certificate(W)
  np.testing.assert_allclose(cert["tol"], 6 * np.finfo(np.float64).eps, rtol=1e-6)
  assert int(cert["rank"]) == 2
  np.testing.assert_allclose(cert["condition_number"], 1e9, rtol=1e-6)
  # The float32 default tolerance (6 · eps32 · σ_1 ≈ 7e-7) calls the same matrix rank one.
  assert int(spectra.spectrum(jnp.asarray(W, jnp.float32))["numerical_rank"]) == 1


def test_causal_logdet_certifies_full_rank_where_float32_svd_does_not():
  T = 64
  scores = np.where(np.tril(np.ones((T, T))), 0.0, -np.inf)
  scores[:, 0] = 40.0  # every query stares at token 0: A is nearly rank one
  A = np.exp(scores - scores.max(1, keepdims=True))
  A = np.tril(A / A.sum(1, keepdims=True))
  cert = spectra.causal_logdet(A.astype(np.float32))
  assert bool(cert["full_rank"]) and cert["min_diag"] > 0
  np.testing.assert_allclose(cert["logdet"], np.linalg.slogdet(A)[1], rtol=1e-6)
  assert int(spectra.spectrum(jnp.asarray(A, jnp.float32))["numerical_rank"]) < T
  with pytest.raises(ValueError, match="not lower triangular"):
    spectra.causal_logdet(np.ones((3, 3)))
