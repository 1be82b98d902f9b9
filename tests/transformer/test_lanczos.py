"""Lanczos SVD and Arnoldi against dense float64 numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.linalg.lanczos import arnoldi_eig, lanczos_svd


def _operator(W):
  return (lambda v: W @ v), (lambda u: W.T @ u)


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


def test_lanczos_full_krylov_matches_svd(x64):
  W = np.random.default_rng(0).standard_normal((70, 50))
  start = jnp.asarray(np.random.default_rng(1).standard_normal(50))
  res = jax.jit(lambda W, v: lanczos_svd(*_operator(W), v, k=8, steps=50))(jnp.asarray(W), start)
  U, s, Vt = np.linalg.svd(W)
  np.testing.assert_allclose(res.values, s[:8], rtol=1e-6)
  # Singular vectors up to sign, and the triplet relation W v = σ u.
  np.testing.assert_allclose(np.abs(np.sum(np.asarray(res.right) * Vt[:8], 1)), 1, atol=1e-6)
  np.testing.assert_allclose(W @ np.asarray(res.right).T, np.asarray(res.left).T * s[:8],
                             atol=1e-8)


def test_lanczos_converges_before_full_dimension(x64):
  rng = np.random.default_rng(2)
  U = np.linalg.qr(rng.standard_normal((300, 200)))[0]
  V = np.linalg.qr(rng.standard_normal((200, 200)))[0]
  s = 0.85 ** np.arange(200)
  W = (U * s) @ V.T
  res = jax.jit(lambda W, v: lanczos_svd(*_operator(W), v, k=8, steps=40))(
      jnp.asarray(W), jnp.asarray(rng.standard_normal(200)))
  np.testing.assert_allclose(res.values, s[:8], rtol=1e-6)
  assert float(res.residuals.max()) < 1e-6


def test_lanczos_vmaps_over_a_batch(x64):
  W_BMN = jnp.asarray(np.random.default_rng(3).standard_normal((3, 20, 12)))
  run = jax.jit(jax.vmap(lambda W: lanczos_svd(*_operator(W), jnp.ones(12), k=4, steps=12).values))
  np.testing.assert_allclose(run(W_BMN), np.linalg.svd(np.asarray(W_BMN))[1][:, :4], rtol=1e-6)


def test_lanczos_rejects_k_above_steps():
  with pytest.raises(ValueError, match="k <= steps"):
    lanczos_svd(lambda v: v, lambda u: u, jnp.ones(5), k=6)


def _sorted(lam):
  lam = np.asarray(lam)
  return lam[np.lexsort((lam.imag, -np.round(np.abs(lam), 8)))]


def test_arnoldi_full_krylov_matches_eigvals(x64):
  A = np.random.default_rng(4).standard_normal((40, 40))
  res = jax.jit(lambda A: arnoldi_eig(lambda v: A @ v, jnp.ones(40), k=6, steps=40))(
      jnp.asarray(A))
  ref = np.linalg.eigvals(A)
  ref = ref[np.argsort(-np.abs(ref))][:6]
  np.testing.assert_allclose(_sorted(res.values), _sorted(ref), rtol=1e-8)


def test_arnoldi_dominant_eigenvalues_of_a_nonsymmetric_operator(x64):
  rng = np.random.default_rng(5)
  lam = np.concatenate([[5.0, -4.0, 3.0 + 1.0j, 3.0 - 1.0j], rng.uniform(-1, 1, 196)])
  X = rng.standard_normal((200, 200))
  # A real matrix with the chosen eigenvalues: the complex pair as a 2x2 rotation block.
  D = np.diag(lam.real)
  D[2, 3], D[3, 2] = 1.0, -1.0
  A = X @ D @ np.linalg.inv(X)
  res = jax.jit(lambda A, v: arnoldi_eig(lambda u: A @ u, v, k=4, steps=60))(
      jnp.asarray(A), jnp.asarray(rng.standard_normal(200)))
  ref = np.linalg.eigvals(A)
  ref = ref[np.argsort(-np.abs(ref))][:4]
  np.testing.assert_allclose(_sorted(res.values), _sorted(ref), rtol=1e-6)
  np.testing.assert_allclose(_sorted(res.values), _sorted(lam[:4]), rtol=1e-6)


def test_arnoldi_requires_a_square_operator():
  with pytest.raises(ValueError, match="square"):
    arnoldi_eig(lambda v: jnp.concatenate([v, v]), jnp.ones(4), k=1)
