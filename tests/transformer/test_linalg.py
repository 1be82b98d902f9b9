"""Newton–Schulz and power iteration against float64 SVD references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.linalg.polar import (
    NS_COEFFS,
    gram_is_cheaper,
    newton_schulz,
    polar_express_coeffs,
)
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


def _spectrum_matrix(seed, shape, s):
  """`U diag(s) Vᵀ` with Haar-random `U`, `V` (per leading index), and `U`, `V`."""
  rng = np.random.default_rng(seed)
  m, n = shape[-2:]
  k = min(m, n)
  U = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
  V = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
  return (U * s) @ np.swapaxes(V, -1, -2), U, V


@pytest.mark.parametrize("shape", [(2, 3, 16, 40), (2, 40, 16), (24, 24)])
def test_gram_iteration_equals_direct_in_float64(shape):
  G = np.random.default_rng(0).standard_normal(shape)
  with jax.enable_x64(True):
    for coeffs in ("standard", "polar_express"):
      direct = jax.jit(lambda g, c=coeffs: newton_schulz(g, coeffs=c, gram=False))(G)
      gram = jax.jit(lambda g, c=coeffs: newton_schulz(g, coeffs=c, gram=True))(G)
      assert gram.dtype == jnp.float64 and gram.shape == shape
      np.testing.assert_allclose(gram, direct, rtol=0, atol=1e-11)


@pytest.mark.parametrize("shape", [(24, 64), (2, 64, 24)])
def test_gram_iteration_converges_to_svd_polar_factor(shape):
  G, U, V = _matrix(4, shape, kappa=5.0)
  with jax.enable_x64(True):
    O = jax.jit(lambda g: newton_schulz(g, ns_steps=30, coeffs="classic", gram=True))(G)
    assert _polar_error(O, U, V)[0] < 1e-12
  # float32: the same band as the direct iteration (see the standard-coefficients test).
  O = jax.jit(lambda g: newton_schulz(g, gram=True))(jnp.asarray(G, jnp.float32))
  err, s = _polar_error(O, U, V)
  assert O.dtype == jnp.float32 and 0.68 <= s.min() and s.max() <= 1.135 and err <= 0.33
  O = jax.jit(lambda g: newton_schulz(g, ns_steps=20, coeffs="classic", gram=True))(
      jnp.asarray(G, jnp.float32))
  assert _polar_error(O, U, V)[0] < 2e-6  # as the direct iteration


def test_gram_is_chosen_where_cheaper_in_float32_only():
  assert gram_is_cheaper(768, 3072, 5) and gram_is_cheaper(3072, 768, 2)
  assert not gram_is_cheaper(768, 768, 5) and not gram_is_cheaper(64, 96, 5)  # aspect 1.5
  assert not gram_is_cheaper(32, 128, 1)  # one step: the same FLOPs
  assert not gram_is_cheaper(32, 32, 0) and not gram_is_cheaper(32, 128, 0)
  G = jax.random.normal(jax.random.key(0), (2, 16, 48))
  np.testing.assert_array_equal(newton_schulz(G), newton_schulz(G, gram=True))
  np.testing.assert_array_equal(newton_schulz(G[:, :, :16]), newton_schulz(G[:, :, :16],
                                                                           gram=False))
  bf16 = lambda g, **kw: newton_schulz(g, compute_dtype=jnp.bfloat16, **kw)
  np.testing.assert_array_equal(bf16(G), bf16(G, gram=False))
  traced = jax.jit(lambda g, k: newton_schulz(g, ns_steps=k))(G, 5)  # traced: direct
  np.testing.assert_allclose(traced, newton_schulz(G, gram=False), rtol=1e-5, atol=1e-6)
  X0 = newton_schulz(G, ns_steps=0)  # no step: just the Frobenius normalization
  np.testing.assert_allclose(newton_schulz(G, ns_steps=0, gram=True), X0)
  np.testing.assert_allclose(np.linalg.norm(X0, axis=(-2, -1)), 1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="gram=True"):
    jax.jit(lambda g, k: newton_schulz(g, ns_steps=k, gram=True))(G, 5)


def _minimax_by_linear_program(lower, upper, degree, n_grid=4000):
  """`min_t` s.t. `|1 − p(x)| ≤ t` on a grid, `p` odd of `degree`: an independent reference."""
  from scipy.optimize import linprog

  x = np.linspace(lower, upper, n_grid)
  basis = np.stack([x**k for k in range(1, degree + 1, 2)], axis=1)
  ones = np.ones((n_grid, 1))
  A_ub = np.concatenate([np.concatenate([basis, -ones], 1), np.concatenate([-basis, -ones], 1)])
  b_ub = np.concatenate([np.ones(n_grid), -np.ones(n_grid)])
  n = basis.shape[1] + 1
  res = linprog(np.eye(n)[-1], A_ub=A_ub, b_ub=b_ub, bounds=[(None, None)] * n, method="highs")
  return res.x[:-1], res.x[-1]


@pytest.mark.parametrize("lower,upper,degree", [(1e-2, 1.0, 5), (0.3, 1.7, 5), (0.05, 1.0, 3)])
def test_polar_express_step_is_the_minimax_polynomial(lower, upper, degree):
  (a, b, c), = polar_express_coeffs(1, lower / upper, safety=0.0, degrees=(degree,))
  # Rescale the [lower/upper, 1] solution to [lower, upper]: p(x/u) is minimax there.
  ours = np.array([a / upper, b / upper**3, c / upper**5])
  assert (c == 0) == (degree == 3)
  ref, err_ref = _minimax_by_linear_program(lower, upper, degree)
  x = np.linspace(lower, upper, 200_001)
  err = np.abs(1 - np.stack([x, x**3, x**5], 1) @ ours).max()
  assert err == pytest.approx(err_ref, rel=1e-4)
  np.testing.assert_allclose(ours[:len(ref)], ref, rtol=1e-3)


def test_polar_express_schedule_meets_its_bound():
  rows = polar_express_coeffs(5, 1e-3)
  assert rows == NS_COEFFS["polar_express"] and len(rows) == 5
  x = np.geomspace(1e-3, 1.0, 100_001)
  for a, b, c in rows:
    x = a * x + b * x**3 + c * x**5
  assert 0.875 <= x.min() and x.max() <= 1.125
  # Greedy: each step's error bound is the next step's interval, so the error shrinks.
  steps = [polar_express_coeffs(k, 1e-3) for k in (3, 4, 5)]
  assert steps[1][:3] == steps[0] and steps[2][:4] == steps[1]
  with pytest.raises(ValueError, match="lower"):
    polar_express_coeffs(5, 0.0)
  with pytest.raises(ValueError, match="degrees"):
    polar_express_coeffs(2, 1e-3, degrees=(5, 7))


@pytest.mark.parametrize("gram", [False, True])
@pytest.mark.parametrize("preset,band", [("polar_express", 0.125), ("polar_express_lean", 0.087)])
def test_polar_express_presets_against_svd_polar_factor(gram, preset, band):
  # Singular values whose Frobenius-normalized values span [0.0068, 0.68] (inside [2e-3, 1]).
  s = np.geomspace(1.0, 1e-2, 16)
  G, U, V = _spectrum_matrix(5, (2, 3, 16, 48), s)
  O = jax.jit(lambda g: newton_schulz(g, coeffs=preset, gram=gram))(jnp.asarray(G, jnp.float32))
  err, sv = _polar_error(O, U, V)
  assert O.shape == G.shape and 1 - band <= sv.min() and sv.max() <= 1 + band
  assert err <= band + 1e-3
  standard = _polar_error(newton_schulz(jnp.asarray(G, jnp.float32), gram=gram), U, V)[0]
  assert err < standard / 2  # five steps too, at most half the standard schedule's error


def test_traced_coefficients_give_the_same_result():
  # e.g. under optax.inject_hyperparams: the cubic row is not known, its c = 0 is multiplied.
  G = jax.random.normal(jax.random.key(2), (2, 16, 48))
  lean = jnp.asarray(NS_COEFFS["polar_express_lean"])
  for gram in (False, True):
    traced = jax.jit(lambda g, c, gram=gram: newton_schulz(g, coeffs=c, gram=gram))(G, lean)
    concrete = newton_schulz(G, coeffs="polar_express_lean", gram=gram)
    np.testing.assert_allclose(traced, concrete, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,gram,products", [((16, 16), False, (15, 14)),
                                                 ((16, 48), True, (19, 18))])
def test_a_cubic_step_saves_one_matrix_product(shape, gram, products):
  G = jnp.ones(shape)
  count = lambda coeffs: str(jax.make_jaxpr(
      lambda g: newton_schulz(g, coeffs=coeffs, gram=gram))(G)).count("dot_general")
  assert (count("standard"), count("polar_express_lean")) == products


def test_polar_express_bfloat16_stays_finite_near_rank_one():
  # σ_max/‖G‖_F ≈ 1: bfloat16 rounding pushes it past the interval the first step was designed
  # for; the 1% margin keeps the iteration bounded.
  s = np.concatenate([[1.0], np.full(31, 3e-3)])
  G, U, V = _spectrum_matrix(6, (32, 64), s)
  O = newton_schulz(jnp.asarray(G, jnp.float32), coeffs="polar_express",
                    compute_dtype=jnp.bfloat16)
  sv = np.linalg.svd(np.asarray(O, np.float64), compute_uv=False)
  assert O.dtype == jnp.float32 and np.all(np.isfinite(sv))
  assert 0.8 <= sv.max() <= 1.2 and sv[0] == pytest.approx(1.0, abs=0.2)


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
