"""Where mathematics settles part of a claim, a float64 check on random instances.

Each test confirms the argument a claim states in its `theorem` field, on instances that
could break a wrong argument (random scores, widths, heads), with numpy in float64 as the
independent reference. A claim whose outcome is fixed by one of these asks an empirical
question beside it (its primary); these tests keep the proof honest.
"""

import numpy as np
import pytest

RNG = np.random.default_rng(20261201)


def _causal_softmax(scores_TT: np.ndarray) -> np.ndarray:
  T = scores_TT.shape[0]
  s = np.where(np.tril(np.ones((T, T), bool)), scores_TT, -np.inf)
  s = s - s.max(-1, keepdims=True)
  e = np.exp(s)
  return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("T, spread", [(8, 1.0), (32, 4.0), (64, 8.0)])
def test_causal_softmax_is_triangular_with_a_positive_diagonal_so_its_rank_is_T(T, spread):
  """`causal-mask`: A_ij = 0 for j > i and A_ii = exp(s_ii − logsumexp_{j≤i} s_ij) > 0, so
  det A = Π A_ii > 0 and rank A = T in exact arithmetic, whatever the scores."""
  for _ in range(5):
    A = _causal_softmax(spread * RNG.standard_normal((T, T)))
    assert np.all(np.triu(A, 1) == 0)
    assert np.all(np.diag(A) > 0)
    # Forward substitution inverts A exactly in exact arithmetic; in float64 it recovers
    # A⁻¹ A = I to the precision the diagonal allows.
    x = np.linalg.solve(A, A @ np.ones(T)) if spread <= 1 else None
    if x is not None:
      np.testing.assert_allclose(x, np.ones(T), rtol=1e-8)
      sign, logdet = np.linalg.slogdet(A)
      assert sign == 1.0
      np.testing.assert_allclose(logdet, np.log(np.diag(A)).sum(), rtol=1e-9)
  # With peaked scores even float64 LU loses the determinant (pivoting on rounded entries):
  # exactly the practical question the claim measures, not a gap in the argument.


def _kernel(X, W_q, W_k, scale):
  return np.exp((X @ W_q) @ (X @ W_k).T * scale)


@pytest.mark.parametrize("T, d, dh", [(12, 16, 4), (24, 32, 8)])
def test_tied_softmax_kernel_is_psd_by_the_schur_product_theorem(T, d, dh):
  """`softmax-kernel` / `psd-attention`: with W_K = W_Q the score matrix G = X W Wᵀ Xᵀ is PSD,
  and exp(G) = Σ_n G^{∘n}/n! (Hadamard powers) is PSD by the Schur product theorem."""
  for _ in range(5):
    X = RNG.standard_normal((T, d))
    W = RNG.standard_normal((d, dh)) / np.sqrt(d)
    K = _kernel(X, W, W, dh**-0.5)
    np.testing.assert_allclose(K, K.T, rtol=1e-12)
    lam = np.linalg.eigvalsh(K)
    assert lam.min() >= -1e-10 * lam.max()


@pytest.mark.parametrize("T, d, dh", [(12, 16, 4), (24, 32, 8)])
def test_untied_softmax_kernel_is_not_symmetric_so_it_is_no_gram_matrix(T, d, dh):
  """With W_K ≠ W_Q (generic), exp(Q Kᵀ) ≠ exp(K Qᵀ): not symmetric, so not a Gram matrix."""
  for _ in range(5):
    X = RNG.standard_normal((T, d))
    W_q, W_k = (RNG.standard_normal((d, dh)) / np.sqrt(d) for _ in range(2))
    K = _kernel(X, W_q, W_k, dh**-0.5)
    assert np.abs(K - K.T).max() > 1e-3 * np.abs(K).max()


def test_the_symmetrised_untied_kernel_can_be_indefinite_or_not_so_it_is_an_empirical_question():
  """Symmetrising does not settle it: (K + Kᵀ)/2 of an untied head is PSD for some weights and
  indefinite for others, which is why `softmax-kernel` measures trained heads."""
  T, d, dh = 16, 16, 4
  X = RNG.standard_normal((T, d))
  W = RNG.standard_normal((d, dh)) / np.sqrt(d)
  near_tied = _kernel(X, W, W + 1e-3 * RNG.standard_normal((d, dh)), dh**-0.5)
  anti = _kernel(X, W, -3.0 * W, dh**-0.5)
  sym = lambda K: np.linalg.eigvalsh((K + K.T) / 2)
  assert sym(near_tied).min() >= -1e-6 * sym(near_tied).max()
  assert sym(anti).min() < -1e-3 * sym(anti).max()


def test_newton_schulz_fixed_point_is_orthogonal_so_muons_entropy_control_holds_by_construction():
  """`muon`: the polar factor U Vᵀ of any full-rank G has every singular value 1, so its
  singular-value entropy is exactly 1 — a control of the instrument, not a finding."""
  G = RNG.standard_normal((32, 48))
  U, _, Vt = np.linalg.svd(G, full_matrices=False)
  s = np.linalg.svd(U @ Vt, compute_uv=False)
  p = s**2 / (s**2).sum()
  entropy = -(p * np.log(p)).sum() / np.log(len(s))
  np.testing.assert_allclose(entropy, 1.0, rtol=1e-12)


@pytest.mark.parametrize("r", [0.5, 1.0, 3.0])
def test_logit_bound_holds_by_cauchy_schwarz(r):
  """`eigenvalue-constrained`: |x_i W_Q W_Kᵀ x_jᵀ| ≤ ‖x_i‖ ‖x_j‖ σ_max(W_Q W_Kᵀ) ≤ r² σ_max for
  rows of norm ≤ r — the certificate cannot fail, so it is a control, not a finding."""
  d, dh, n = 16, 4, 200
  W_q, W_k = RNG.standard_normal((d, dh)), RNG.standard_normal((d, dh))
  X = RNG.standard_normal((n, d))
  X = r * X / np.linalg.norm(X, axis=-1, keepdims=True) * RNG.uniform(0, 1, (n, 1))
  logits = np.abs((X @ W_q) @ (X @ W_k).T)
  assert logits.max() <= r**2 * np.linalg.norm(W_q @ W_k.T, 2) * (1 + 1e-12)
