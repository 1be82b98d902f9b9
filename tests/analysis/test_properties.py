"""Definiteness, decomposition, orthogonality and sparsity on constructed matrices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import properties as P

rng = np.random.default_rng(0)


def test_psd_certificate_on_constructed_psd_and_indefinite_matrices():
  X = rng.standard_normal((12, 4))
  gram = X @ X.T  # PSD, rank 4: singular but a valid kernel
  cert = P.psd_certificate(gram.astype(np.float32))
  assert bool(cert["is_symmetric"]) and bool(cert["is_psd"]) and bool(cert["is_kernel"])
  assert abs(cert["min_eigenvalue"]) <= 1e-5 * np.linalg.norm(gram, 2)
  pd = P.psd_certificate(gram + np.eye(12))
  assert bool(pd["cholesky"]) and pd["min_eigenvalue"] == pytest.approx(
      np.linalg.eigvalsh(gram + np.eye(12))[0])
  indefinite = np.diag([3.0, 1.0, -0.5])
  bad = P.psd_certificate(np.stack([indefinite, np.eye(3)]))
  np.testing.assert_array_equal(bad["is_psd"], [False, True])
  np.testing.assert_array_equal(bad["cholesky"], [False, True])
  np.testing.assert_allclose(bad["min_eigenvalue"], [-0.5, 1.0])
  skew = P.psd_certificate(np.array([[1.0, 2.0], [-2.0, 1.0]]))  # xᵀMx > 0 yet not a kernel
  assert bool(skew["is_psd"]) and not bool(skew["is_kernel"])


def test_softmax_kernel_is_psd_only_when_queries_equal_keys():
  q = jnp.asarray(rng.standard_normal((1, 10, 2, 4)), jnp.float32)
  k = jnp.asarray(rng.standard_normal((1, 10, 2, 4)), jnp.float32)
  same = P.psd_certificate(P.softmax_kernel(q, q, 0.5))
  assert same["is_kernel"].all()  # exp of a Gram matrix: Schur product theorem
  differ = P.psd_certificate(P.softmax_kernel(q, k, 0.5))
  assert not differ["is_symmetric"].any()
  ref = np.exp(0.5 * np.einsum("thd,shd->hts", np.asarray(q[0]), np.asarray(k[0])))
  np.testing.assert_allclose(P.softmax_kernel(q, k, 0.5)[0], ref, rtol=1e-5)


def test_symmetric_eigenvalues_and_symmetry_score():
  M = rng.standard_normal((2, 6, 6))
  np.testing.assert_allclose(P.symmetric_eigenvalues(jnp.asarray(M)),
                             np.linalg.eigvalsh((M + np.swapaxes(M, 1, 2)) / 2), rtol=1e-4,
                             atol=1e-5)
  S, K = M[0] + M[0].T, M[0] - M[0].T
  np.testing.assert_allclose(P.symmetry_score(jnp.asarray(np.stack([S, K]))), [1, -1], atol=1e-6)


def test_energy_and_rank_for_energy_on_known_spectrum():
  s = np.array([4.0, 2.0, 1.0, 1.0])
  W = np.linalg.qr(rng.standard_normal((10, 4)))[0] * s @ np.linalg.qr(
      rng.standard_normal((6, 4)))[0].T
  energy = np.cumsum(s**2) / np.sum(s**2)
  np.testing.assert_allclose(P.energy_curve(jnp.asarray(W, jnp.float32))[:4], energy, rtol=1e-5)
  np.testing.assert_allclose(P.energy_captured(jnp.asarray(W, jnp.float32), 2), 20 / 22,
                             rtol=1e-5)
  assert int(P.rank_for_energy(jnp.asarray(W, jnp.float32), 0.9)) == 2
  assert int(P.rank_for_energy(jnp.asarray(W, jnp.float32), 0.95)) == 3


def test_cache_rank_per_head():
  low = rng.standard_normal((1, 16, 1)) @ rng.standard_normal((1, 1, 8))  # rank one
  full = rng.standard_normal((1, 16, 8))
  kv_BSKDh = jnp.asarray(np.stack([low, full], axis=2), jnp.float32)
  ranks = P.cache_rank(kv_BSKDh, 0.99)
  assert ranks.shape == (1, 2) and int(ranks[0, 0]) == 1 and int(ranks[0, 1]) > 4


def test_orthogonality_error():
  Q = np.linalg.qr(rng.standard_normal((20, 8)))[0]
  np.testing.assert_allclose(P.orthogonality_error(jnp.asarray(3 * Q, jnp.float32)), 0,
                             atol=1e-5)
  np.testing.assert_allclose(
      P.orthogonality_error(jnp.asarray(3 * Q, jnp.float32), scale_invariant=False),
      np.linalg.norm(9 * np.eye(8) - np.eye(8)) / np.sqrt(8), rtol=1e-5)
  D = np.diag([1.0, 2.0])
  G = D.T @ D / 2.5
  np.testing.assert_allclose(P.orthogonality_error(jnp.asarray(D)),
                             np.linalg.norm(G - np.eye(2)) / np.sqrt(2), rtol=1e-6)


def test_principal_angles_on_constructed_subspaces():
  n = 10
  Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
  theta = np.array([1e-4, 0.3, 1.2])
  A = Q[:, :3]
  B = Q[:, :3] * np.cos(theta) + Q[:, 3:6] * np.sin(theta)
  B = B @ rng.standard_normal((3, 3))  # another basis of the same subspace
  with jax.enable_x64(True):
    got = jax.jit(P.principal_angles)(jnp.asarray(A), jnp.asarray(B))
  np.testing.assert_allclose(got, theta, rtol=1e-8)
  same = P.principal_angles(jnp.asarray(A[None], jnp.float32), jnp.asarray(A[None, :, :2]))
  assert same.shape == (1, 2) and float(jnp.abs(same).max()) < 1e-3


def test_head_overlap_and_redundancy():
  Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
  heads = np.stack([Q[:, 0:4], Q[:, 4:8], Q[:, 0:4] @ rng.standard_normal((4, 4))])
  O = P.head_subspace_overlap(jnp.asarray(heads, jnp.float32))
  np.testing.assert_allclose(O, [[1, 0, 1], [0, 1, 0], [1, 0, 1]], atol=1e-5)
  np.testing.assert_allclose(P.head_redundancy(jnp.asarray(heads[:2], jnp.float32)), 0,
                             atol=1e-5)


def test_attention_entropy_and_masses():
  T = 6
  uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
  onehot = np.eye(T)
  W = jnp.asarray(np.stack([uniform, onehot]), jnp.float32)
  np.testing.assert_allclose(P.attention_entropy(W, per_query=True)[0],
                             np.log(np.arange(1, T + 1)), rtol=1e-5)
  np.testing.assert_allclose(P.attention_entropy(W), [np.log(np.arange(1, T + 1)).mean(), 0],
                             rtol=1e-5, atol=1e-7)
  top2 = np.mean([min(2, i + 1) / (i + 1) for i in range(T)])
  np.testing.assert_allclose(P.top_k_mass(W, 2), [top2, 1], rtol=1e-5)
  local2 = np.mean([min(2, i + 1) / (i + 1) for i in range(T)])
  np.testing.assert_allclose(P.local_mass(W, 2), [local2, 1], rtol=1e-5)


def test_activation_sparsity():
  h = jnp.asarray([[0.0, 0.0, 3.0, -4.0], [1.0, 1.0, 1.0, 1.0]])
  np.testing.assert_allclose(P.activation_sparsity(h), [0.5, 0.0])


def test_batched_inputs_under_strict_rank_promotion():
  W = jnp.asarray(rng.standard_normal((2, 3, 8, 4)), jnp.float32)
  assert P.orthogonality_error(W).shape == (2, 3)
  assert P.head_redundancy(W).shape == (2,)
  A = jax.nn.softmax(jnp.asarray(rng.standard_normal((2, 3, 5, 5)), jnp.float32), -1)
  np.testing.assert_allclose(P.local_mass(A, 1), np.mean(np.diagonal(A, 0, -2, -1), -1),
                             rtol=1e-5)
