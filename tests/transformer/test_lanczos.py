"""Lanczos SVD and Arnoldi against dense float64 numpy references, with their bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.linalg.lanczos import arnoldi_eig, check_interval, lanczos_svd


def _operator(W):
  return (lambda v: W @ v), (lambda u: W.T @ u)


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


def test_lanczos_full_krylov_matches_svd(x64):
  W = np.random.default_rng(0).standard_normal((70, 50))
  start = jnp.asarray(np.random.default_rng(1).standard_normal(50))
  res = jax.jit(lambda W, v: lanczos_svd(*_operator(W), v, k=8, krylov_dim=50, tol=1e-12))(
      jnp.asarray(W), start)
  U, s, Vt = np.linalg.svd(W)
  assert bool(res.converged.all()) and int(res.krylov_dim) <= 50
  np.testing.assert_allclose(res.values, s[:8], rtol=1e-6)
  # Singular vectors up to sign, and the triplet relation W v = σ u.
  np.testing.assert_allclose(np.abs(np.sum(np.asarray(res.right) * Vt[:8], 1)), 1, atol=1e-6)
  np.testing.assert_allclose(W @ np.asarray(res.right).T, np.asarray(res.left).T * s[:8],
                             atol=1e-8)


def test_lanczos_stops_when_converged_and_bounds_hold(x64):
  rng = np.random.default_rng(2)
  U = np.linalg.qr(rng.standard_normal((300, 200)))[0]
  V = np.linalg.qr(rng.standard_normal((200, 200)))[0]
  s = 0.85 ** np.arange(200)
  W = (U * s) @ V.T
  res = jax.jit(lambda W, v: lanczos_svd(*_operator(W), v, k=8, tol=1e-8))(
      jnp.asarray(W), jnp.asarray(rng.standard_normal(200)))
  assert bool(res.converged.all()) and int(res.krylov_dim) < 100  # stopped early
  err = np.abs(np.asarray(res.values) - s[:8])
  assert np.all(err <= np.asarray(res.bounds)) and np.all(np.asarray(res.bounds) <= 1e-8)


def test_lanczos_reports_unconverged_at_the_cap():
  W = jax.random.normal(jax.random.key(0), (96, 96))
  res = lanczos_svd(*_operator(W), jnp.ones(96), k=5, krylov_dim=12)
  s = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)[:5]
  err = np.abs(np.asarray(res.values) - s)
  assert int(res.krylov_dim) == 12 and not bool(res.converged.all())
  assert np.max(err / s[0]) > 1e-4
  # Unconverged, the bound still holds for the nearest singular value (not the i-th).
  s_all = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)
  nearest = np.min(np.abs(np.asarray(res.values)[:, None] - s_all[None]), axis=1)
  assert np.all(nearest <= np.asarray(res.bounds))


def test_lanczos_generic_96_by_96_defaults_within_1e4():
  G = np.random.default_rng(7).standard_normal((96, 96))
  Gj = jnp.asarray(G, jnp.float32)
  res = jax.jit(lambda v: lanczos_svd(*_operator(Gj), v, k=5))(
      jax.random.normal(jax.random.key(1), (96,)))
  s = np.linalg.svd(G, compute_uv=False)[:5]
  assert bool(res.converged.all())
  np.testing.assert_allclose(res.values, s, rtol=1e-4)


def test_lanczos_vmaps_over_a_batch(x64):
  W_BMN = jnp.asarray(np.random.default_rng(3).standard_normal((3, 20, 12)))
  run = jax.jit(jax.vmap(lambda W: lanczos_svd(*_operator(W), jnp.ones(12), k=4).values))
  np.testing.assert_allclose(run(W_BMN), np.linalg.svd(np.asarray(W_BMN))[1][:, :4], rtol=1e-6)


def test_lanczos_rejects_bad_arguments():
  with pytest.raises(ValueError, match="k <= krylov_dim"):
    lanczos_svd(lambda v: v, lambda u: u, jnp.ones(5), k=6)
  with pytest.raises(ValueError, match="tol"):
    lanczos_svd(lambda v: v, lambda u: u, jnp.ones(5), k=1, tol=0.0)


def _sorted(lam):
  lam = np.asarray(lam)
  return lam[np.lexsort((lam.imag, -np.round(np.abs(lam), 8)))]


def test_arnoldi_full_krylov_matches_eigvals(x64):
  A = np.random.default_rng(4).standard_normal((40, 40))
  res = jax.jit(lambda A: arnoldi_eig(lambda v: A @ v, jnp.ones(40), k=6, krylov_dim=40,
                                      tol=1e-14))(jnp.asarray(A))
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
  res = jax.jit(lambda A, v: arnoldi_eig(lambda u: A @ u, v, k=4, tol=1e-10))(
      jnp.asarray(A), jnp.asarray(rng.standard_normal(200)))
  assert bool(res.converged.all()) and int(res.krylov_dim) < 160
  ref = np.linalg.eigvals(A)
  ref = ref[np.argsort(-np.abs(ref))][:4]
  np.testing.assert_allclose(_sorted(res.values), _sorted(ref), rtol=1e-6)
  np.testing.assert_allclose(_sorted(res.values), _sorted(lam[:4]), rtol=1e-6)


def test_arnoldi_bound_is_a_backward_error(x64):
  # For a symmetric (normal) operator the backward error bounds the distance to the nearest
  # eigenvalue; a small cap leaves the values unconverged, and the bound says so.
  rng = np.random.default_rng(6)
  A = rng.standard_normal((80, 80))
  A = A + A.T
  res = arnoldi_eig(lambda v: jnp.asarray(A) @ v, jnp.asarray(rng.standard_normal(80)), k=3,
                    krylov_dim=10)
  lam = np.linalg.eigvalsh(A)
  dist = np.min(np.abs(np.asarray(res.values)[:, None] - lam[None]), axis=1)
  assert np.all(dist <= np.asarray(res.bounds)) and not bool(res.converged.all())


def test_arnoldi_requires_a_square_operator():
  with pytest.raises(ValueError, match="square"):
    arnoldi_eig(lambda v: jnp.concatenate([v, v]), jnp.ones(4), k=1)


def test_lanczos_float32_clustered_spectrum_bounds_hold():
  # A near-identity spectrum like a residual block's at init: 4096 values in [0.96, 1.04], the
  # top twelve 1e-3 apart above a dense bulk. A diagonal operator after a fixed permutation
  # and sign flip is as hard for Krylov methods as any operator with these singular values
  # (they are invariant under orthogonal changes of basis), and its exact values are known.
  rng = np.random.default_rng(8)
  s = np.concatenate([1.04 - 1e-3 * np.arange(12), np.sort(rng.uniform(0.96, 1.028, 4084))[::-1]])
  perm, signs = rng.permutation(4096), rng.choice([-1.0, 1.0], 4096)
  s_j, perm_j, signs_j = (jnp.asarray(a, jnp.float32) for a in (s, perm, signs))
  perm_j = perm_j.astype(jnp.int32)
  inv = jnp.argsort(perm_j)
  matvec = lambda v: (signs_j * s_j * v)[perm_j]
  rmatvec = lambda u: signs_j * s_j * u[inv]
  res = jax.jit(lambda v: lanczos_svd(matvec, rmatvec, v, k=8, krylov_dim=300))(
      jax.random.normal(jax.random.key(2), (4096,)))
  assert bool(res.converged.all()) and int(res.krylov_dim) < 300
  err = np.abs(np.asarray(res.values, np.float64) - s[:8])
  assert np.all(err <= np.asarray(res.bounds)) and np.all(err <= 1e-4 * s[0])


def test_check_interval_default_and_explicit_agree(x64):
  W = jnp.asarray(np.random.default_rng(9).standard_normal((60, 40)))
  start = jnp.ones(40)
  every = lanczos_svd(*_operator(W), start, k=3, tol=1e-10, check_every=1)
  default = lanczos_svd(*_operator(W), start, k=3, tol=1e-10)
  s = np.linalg.svd(np.asarray(W), compute_uv=False)[:3]
  np.testing.assert_allclose(every.values, s, rtol=1e-9)
  np.testing.assert_allclose(default.values, s, rtol=1e-9)
  # Checking after every vector stops at the first dimension that meets tol; the default
  # (every 8 for an operator this small) stops at most 7 vectors later.
  assert 0 <= int(default.krylov_dim) - int(every.krylov_dim) < 8
  assert check_interval(160, 2**20) == 1 and check_interval(160, 96) == 8
  with pytest.raises(ValueError, match="check_every"):
    lanczos_svd(*_operator(W), start, k=3, check_every=0)
