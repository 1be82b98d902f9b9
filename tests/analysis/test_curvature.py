"""Hessian spectra (Lanczos, stochastic Lanczos quadrature) against dense float64 Hessians."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis import curvature
from transformer.linalg.lanczos import lanczos_eigh

N_IN, HIDDEN, CLASSES, BATCH = 6, 24, 4, 48


def _mlp_loss(p, batch):
  """Softmax cross-entropy of a two-hidden-layer tanh network (922 parameters)."""
  X, y = batch
  h = jnp.tanh(X @ p["w_1"] + p["b_1"][None])
  h = jnp.tanh(h @ p["w_2"] + p["b_2"][None])
  logits = h @ p["w_3"] + p["b_3"][None]
  return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def _mlp(dtype):
  keys = jax.random.split(jax.random.key(0), 5)
  shapes = {"w_1": (N_IN, HIDDEN), "w_2": (HIDDEN, HIDDEN), "w_3": (HIDDEN, CLASSES)}
  p = {k: jax.random.normal(kk, s, dtype) * 1.5 / np.sqrt(s[0])
       for (k, s), kk in zip(shapes.items(), keys, strict=False)}
  p |= {"b_1": jnp.full(HIDDEN, 0.1, dtype), "b_2": jnp.zeros(HIDDEN, dtype),
        "b_3": jnp.zeros(CLASSES, dtype)}
  X = jax.random.normal(keys[3], (BATCH, N_IN), dtype)
  y = jax.random.randint(keys[4], (BATCH,), 0, CLASSES)
  return p, (X, y)


@pytest.fixture(scope="module")
def dense():
  """The MLP in float32 and its dense Hessian in float64 (`jax.hessian`, eigvalsh)."""
  p32, batch32 = _mlp(jnp.float32)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), p32)
    batch64 = (jnp.asarray(batch32[0], jnp.float64), batch32[1])
    theta, merge, _ = curvature.split_params(p64)
    H = np.asarray(jax.jit(jax.hessian(lambda t: _mlp_loss(merge(t), batch64)))(theta))
  assert H.shape[0] <= 3000 and np.abs(H - H.T).max() < 1e-12
  return p32, batch32, H, np.linalg.eigvalsh(H)


def test_top5_float32_lanczos_matches_dense_float64_hessian(dense):
  p, batch, _, lam = dense
  top = jax.jit(lambda p, b: curvature.hessian_top_eigenvalues(_mlp_loss, p, b, 5))(p, batch)
  ref = lam[::-1][:5]
  assert bool(top.converged.all())
  np.testing.assert_allclose(top.values, ref, rtol=1e-4)
  # The residual bound holds (float32 products: plus their rounding, a few eps·‖H‖).
  slack = 50 * np.finfo(np.float32).eps * np.abs(lam).max()
  assert np.all(np.abs(np.asarray(top.values) - ref) <= np.asarray(top.bounds) + slack)
  # Ritz vectors are eigenvectors of the dense Hessian: ‖H x − θ x‖ small.
  V = np.asarray(top.vectors, np.float64)
  resid = np.linalg.norm(dense[2] @ V.T - V.T * ref, axis=0)
  assert resid.max() < 1e-2 * np.abs(lam).max()


def test_slq_moments_match_dense_within_monte_carlo_error(dense):
  p, batch, H, lam = dense
  n, P = H.shape[0], 40
  sd = jax.jit(lambda p, b: curvature.hessian_spectral_density(
      _mlp_loss, p, b, num_probes=P, krylov_dim=12))(p, batch)
  est, stderr = curvature.spectral_moments(sd, (1, 2, 3, 4))
  for q, e, s in zip((1, 2, 3, 4), np.asarray(est), np.asarray(stderr), strict=True):
    Hq = np.linalg.matrix_power(H, q)
    exact = np.trace(Hq) / n
    # Var of uᵀ A u for a Rademacher u/√n: 2 (‖A‖_F² − Σ A_ii²) / n²  (Hutchinson).
    sd_theory = np.sqrt(2 * (np.sum(Hq**2) - np.sum(np.diag(Hq) ** 2)) / n**2 / P)
    assert abs(e - exact) <= 4 * sd_theory, (q, e, exact, sd_theory)
    assert 0.5 * sd_theory <= s <= 2 * sd_theory, (q, s, sd_theory)
  # A probability density on its grid; the extreme nodes find the extreme eigenvalues.
  dx = float(sd.grid[1] - sd.grid[0])
  np.testing.assert_allclose(float(jnp.sum(sd.density)) * dx, 1, atol=1e-3)
  np.testing.assert_allclose(float(sd.nodes.max()), lam[-1], rtol=1e-3)
  np.testing.assert_allclose(float(sd.nodes.min()), lam[0], rtol=1e-3)


def test_wrt_restricts_to_the_sub_block(dense):
  p, batch, H, _ = dense
  names = sorted(p)  # ravel_pytree's order of a dict: sorted keys
  sizes = [p[k].size for k in names]
  start = sum(sizes[:names.index("w_2")])
  block = H[start:start + p["w_2"].size, start:start + p["w_2"].size]
  top = curvature.hessian_top_eigenvalues(_mlp_loss, p, batch, 2, wrt=lambda n: n == "w_2")
  np.testing.assert_allclose(top.values, np.linalg.eigvalsh(block)[::-1][:2], rtol=1e-4)
  with pytest.raises(ValueError, match="wrt accepts none"):
    curvature.split_params(p, lambda n: n == "nope")


def test_gauss_newton_operator_matches_dense_jt_hz_j():
  with jax.enable_x64(True):
    p, batch = _mlp(jnp.float64)

    def predict(p, b):
      h = jnp.tanh(jnp.tanh(b[0] @ p["w_1"] + p["b_1"][None]) @ p["w_2"] + p["b_2"][None])
      return h @ p["w_3"] + p["b_3"][None]

    ce = lambda z, b: optax.softmax_cross_entropy_with_integer_labels(z, b[1]).mean()
    theta, merge, _ = curvature.split_params(p)
    V = jnp.asarray(np.random.default_rng(0).standard_normal((3, theta.size)))

    @jax.jit
    def run(p, batch, V):
      matvec, _, _ = curvature.gauss_newton_operator(predict, ce, p, batch)
      J = jax.jacfwd(lambda t: predict(merge(t), batch))(theta).reshape(-1, theta.size)
      z = predict(p, batch)
      Hz = jax.hessian(lambda z: ce(z.reshape(z_shape), batch))(z.reshape(-1))
      return jax.vmap(matvec)(V), J.T @ Hz @ J

    z_shape = (BATCH, CLASSES)
    got, G = run(p, batch, V)
    np.testing.assert_allclose(got, V @ G, rtol=1e-10, atol=1e-12)
    assert np.linalg.eigvalsh(np.asarray(G)).min() > -1e-10  # positive semi-definite


def test_lanczos_eigh_on_dense_operators_and_breakdown():
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    M = rng.standard_normal((120, 120))
    A = jnp.asarray((M + M.T) / 2)
    lam = np.linalg.eigvalsh(np.asarray(A))
    v0 = jnp.asarray(rng.standard_normal(120))

    @jax.jit
    def run(A, v0):
      low = lanczos_eigh(lambda v: A @ v, v0, 3, which="smallest", tol=1e-10)
      mag = lanczos_eigh(lambda v: A @ v, v0, 3, which="magnitude", tol=1e-10)
      # 3·I spans a one-dimensional Krylov space: restarts give 3 four times, not 3, 0, 0, 0.
      eye = lanczos_eigh(lambda v: 3 * v, v0, 4, tol=1e-8)
      return low, mag, eye

    low, mag, eye = run(A, v0)
    np.testing.assert_allclose(low.values, lam[:3], rtol=1e-9)
    np.testing.assert_allclose(mag.values, lam[np.argsort(-np.abs(lam))][:3], rtol=1e-9)
    np.testing.assert_allclose(eye.values, 3.0, rtol=1e-12)
    assert bool(low.converged.all() & mag.converged.all() & eye.converged.all())
    with pytest.raises(ValueError, match="which="):
      lanczos_eigh(lambda v: v, v0, 1, which="top")
