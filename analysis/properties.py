"""Four of the preface's properties: definiteness, decomposition, orthogonality, sparsity.

(Rank, eigenvalues and conditioning live in `spectra` and `jacobians`.) Every function takes
arrays with leading batch axes (layers, heads) and is jit-able, except `psd_certificate`,
which decides a yes/no question in float64 on the host and says which tolerance decided it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from analysis.inputs import check_finite_weights, check_int, check_range
from analysis.spectra import input_eps, singular_values
from transformer.linalg import serial


def _T(M: jax.Array) -> jax.Array:
  return jnp.swapaxes(M, -1, -2)


# --- positive definiteness ---------------------------------------------------------------


def symmetric_eigenvalues(M: jax.Array) -> jax.Array:
  """Eigenvalues (ascending) of the symmetric part `(M + Mᵀ)/2` of square matrices.

  They decide the sign of the quadratic form: `xᵀ M x = xᵀ sym(M) x`, so `M` is positive
  (semi-)definite as a form iff they are all positive (non-negative).
  """
  return serial.eigvalsh((M + _T(M)) / 2)


def symmetry_score(M: jax.Array) -> jax.Array:
  """`(‖S‖² − ‖K‖²) / (‖S‖² + ‖K‖²)` with `S, K` the symmetric and antisymmetric parts.

  `1` for a symmetric matrix, `−1` for an antisymmetric one, about `0` for i.i.d. noise.
  """
  S2 = jnp.sum(jnp.square(M + _T(M)), (-2, -1))
  K2 = jnp.sum(jnp.square(M - _T(M)), (-2, -1))
  return (S2 - K2) / jnp.maximum(S2 + K2, jnp.finfo(M.dtype).tiny)


def psd_certificate(M, *, tol: float | None = None,
                    check_finite: bool = True) -> dict[str, np.ndarray]:
  """Is `M` a positive semi-definite (kernel) matrix? Decided in float64.

  Tests, for each matrix of the batch, the symmetric part `S = (M + Mᵀ)/2`: its minimum
  eigenvalue against `−tol`, and a Cholesky factorization (which succeeds iff `S` is
  numerically positive definite). A Gram/kernel matrix must also be symmetric.

  Args:
    M: `(..., n, n)`, any dtype (promoted to float64 on the host).
    tol: eigenvalue tolerance; default `n · eps · ‖S‖₂` with `eps` of `M`'s own dtype (the
      arithmetic is float64, but the data is only known to its precision).
    check_finite: refuse (one line) an `M` holding NaN or inf (numpy's eigensolver would fail
      on it); `False` skips the check. Host-side: never under `jit`.

  Returns:
    numpy arrays of shape `M.shape[:-2]`: `min_eigenvalue`, `tol`, `asymmetry`
    (`‖M − Mᵀ‖_F / ‖M‖_F`), `is_symmetric` (`asymmetry ≤ n · eps`), `is_psd`
    (`min_eigenvalue ≥ −tol`), `cholesky` (Cholesky of `S` succeeded), and `is_kernel`
    (symmetric and PSD).

  Example:
    >>> import numpy as np, analysis
    >>> X = np.random.default_rng(0).normal(size=(10, 3))
    >>> bool(analysis.psd_certificate(X @ X.T)["is_kernel"])
    True
  """
  check_range(tol, "tol", "analysis.psd_certificate", low=0, allow_none=True, example="1e-6")
  if check_finite:
    check_finite_weights(np.asarray(M), "analysis.psd_certificate", "M")
  M64 = np.asarray(M, np.float64)
  n = M64.shape[-1]
  S = (M64 + np.swapaxes(M64, -1, -2)) / 2
  lam = np.linalg.eigvalsh(S)
  scale = np.abs(lam).max(-1)
  eps = input_eps(M)
  t = n * eps * scale if tol is None else np.full(scale.shape, tol)
  norm = np.linalg.norm(M64, axis=(-2, -1))
  asym = np.linalg.norm(M64 - np.swapaxes(M64, -1, -2), axis=(-2, -1)) / np.where(
      norm == 0, 1, norm)
  flat = S.reshape((-1, n, n))
  chol = np.array([_cholesky_ok(s) for s in flat]).reshape(S.shape[:-2])
  is_symmetric = asym <= n * eps
  is_psd = lam[..., 0] >= -t
  return {"min_eigenvalue": lam[..., 0], "tol": t, "asymmetry": asym,
          "is_symmetric": is_symmetric, "is_psd": is_psd, "cholesky": chol,
          "is_kernel": is_symmetric & is_psd}


def _cholesky_ok(S: np.ndarray) -> bool:
  try:
    np.linalg.cholesky(S)
  except np.linalg.LinAlgError:
    return False
  return True


def softmax_kernel(q_BTHDh: jax.Array, k_BSHDh: jax.Array, scale: float) -> jax.Array:
  """The unnormalized softmax kernel `κ(q_i, k_j) = exp(scale · q_i·k_j)` per head, `(B,H,T,S)`.

  Softmax attention is `A = D⁻¹ κ(Q, K)` with `D` the row sums. `κ` is a positive-definite
  kernel only when queries and keys are the same vectors (then `exp` of a Gram matrix is PSD by
  the Schur product theorem); with `W_Q ≠ W_K` the matrix is not even symmetric. Feed it to
  `psd_certificate` to measure that claim instead of assuming it.
  """
  scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHDh, k_BSHDh).astype(jnp.float32) * scale
  # exp overflows float32 above ~88; scores that large would saturate softmax anyway.
  return jnp.exp(jnp.minimum(scores_BHTS, 80.0))


# --- decomposition -----------------------------------------------------------------------


def energy_curve(W: jax.Array) -> jax.Array:
  """`E(r) = Σ_{i≤r} σ_i² / Σ σ_i²` for `r = 1 … min(m, n)`: energy in the top-r directions."""
  s2 = jnp.square(singular_values(W))
  return jnp.cumsum(s2, -1) / jnp.maximum(jnp.sum(s2, -1, keepdims=True),
                                          jnp.finfo(s2.dtype).tiny)


def energy_captured(W: jax.Array, r: int) -> jax.Array:
  """`E(r)`: the fraction of `‖W‖_F²` captured by the best rank-`r` approximation (Eckart–Young)."""
  check_int(r, 1, "r", "analysis.energy_captured")
  return energy_curve(W)[..., r - 1]


def rank_for_energy(W: jax.Array, energy: float = 0.9) -> jax.Array:
  """The smallest `r` with `E(r) ≥ energy` (e.g. 0.9: the rank that keeps 90% of the energy)."""
  check_range(energy, "energy", "analysis.rank_for_energy", low=0, high=1, low_open=True,
              example="0.9")
  curve = energy_curve(W)
  return jnp.sum(curve < energy * (1 - 1e-6), -1) + 1


def cache_rank(kv_BSKDh: jax.Array, energy: float = 0.9) -> jax.Array:
  """`rank_for_energy` of each head's key (or value) cache `(S, Dh)`: `(..., B, K)`."""
  return rank_for_energy(jnp.moveaxis(kv_BSKDh, -2, -3), energy)


# --- orthogonality -----------------------------------------------------------------------


def orthogonality_error(W: jax.Array, *, scale_invariant: bool = True) -> jax.Array:
  """`‖G/c − I‖_F / ‖I‖_F` with `G` the smaller Gram matrix (`WᵀW` or `W Wᵀ`).

  With `scale_invariant=True`, `c = tr(G)/r` (the mean `σ²`), so any multiple of an orthogonal
  (or semi-orthogonal) matrix scores 0; with `False`, `c = 1` and the score is the plain
  relative `‖WᵀW − I‖_F / ‖I‖_F`.
  """
  m, n = W.shape[-2:]
  G = _T(W) @ W if m >= n else W @ _T(W)
  r = G.shape[-1]
  eye = jnp.broadcast_to(jnp.eye(r, dtype=G.dtype), G.shape)
  if scale_invariant:
    c = jnp.trace(G, axis1=-2, axis2=-1) / r
    G = G / jnp.maximum(c, jnp.finfo(G.dtype).tiny)[..., None, None]
  return jnp.linalg.norm(G - eye, axis=(-2, -1)) / np.sqrt(r)


def _orthonormal_basis(A: jax.Array) -> jax.Array:
  return serial.qr(A)[0]


def principal_angles(A: jax.Array, B: jax.Array) -> jax.Array:
  """Principal angles (radians, ascending) between the column spaces of `A` and `B`.

  With orthonormal bases `Q_A (n, p)`, `Q_B (n, q)`, `q ≤ p`: `cos θ_i = σ_i(Q_Aᵀ Q_B)` and
  `sin θ_i = σ_{q+1-i}((I − Q_A Q_Aᵀ) Q_B)`. The cosine formula loses accuracy for small angles
  and the sine formula for large ones, so each angle comes from the better of the two
  (Knyazev & Argentati).

  Args:
    A: `(..., n, p)` with independent columns.
    B: `(..., n, q)` with independent columns.

  Returns:
    `(..., min(p, q))` angles in `[0, π/2]`, smallest first.

  References:
    Björck & Golub, "Numerical methods for computing angles between linear subspaces" (1973);
    Knyazev & Argentati, "Principal angles between subspaces in an A-based scalar product" (2002).
  """
  if A.shape[-1] < B.shape[-1]:
    A, B = B, A
  QA, QB = _orthonormal_basis(A), _orthonormal_basis(B)
  cos = jnp.clip(singular_values(_T(QA) @ QB), 0, 1)
  sin = jnp.clip(singular_values(QB - QA @ (_T(QA) @ QB))[..., ::-1], 0, 1)
  return jnp.where(cos * cos < 0.5, jnp.arccos(cos), jnp.arcsin(sin))


def head_subspace_overlap(W_heads: jax.Array) -> jax.Array:
  """Pairwise subspace overlap `‖Q_aᵀ Q_b‖_F² / Dh = mean cos² θ` of heads' column spaces.

  `Q_h` is an orthonormal basis of head `h`'s column space, so the measure depends on the
  subspaces only (not on the heads' scale), and `θ` are the principal angles between them.
  Not to be confused with `optim.head_gram_overlap`, the training penalty
  `½ Σ_{a≠b} ‖W_aᵀ W_b‖_F²` on the raw blocks, which grows with their norms.

  Args:
    W_heads: `(..., H, D, Dh)`, e.g. each head's `W_Q^h`.

  Returns:
    `(..., H, H)` in `[0, 1]`: 1 on the diagonal; two heads reading the same subspace score 1,
    orthogonal subspaces 0, random subspaces about `Dh / D`.
  """
  Q = _orthonormal_basis(W_heads)
  C = jnp.einsum("...adi,...bdj->...abij", Q, Q)
  return jnp.sum(C * C, (-2, -1)) / W_heads.shape[-1]


def head_redundancy(W_heads: jax.Array) -> jax.Array:
  """The largest off-diagonal `head_subspace_overlap`, `(...,)`: 1 when two heads share a
  subspace."""
  O = head_subspace_overlap(W_heads)
  H = O.shape[-1]
  diagonal = jnp.broadcast_to(jnp.eye(H, dtype=bool), O.shape)
  return jnp.max(jnp.where(diagonal, -jnp.inf, O), (-2, -1))


# --- sparsity ----------------------------------------------------------------------------


def attention_entropy(weights: jax.Array, *, per_query: bool = False) -> jax.Array:
  """Shannon entropy (nats) of attention rows, `H_i = −Σ_j A_ij ln A_ij`.

  `0` for a row on one key, `ln n` for uniform attention over `n` keys.

  Args:
    weights: `(..., T, S)` attention matrices (rows sum to 1), e.g. the sown `weights`
      `(L, B, H, T, S)`.
    per_query: return the entropy of each row `(..., T)` instead of the mean over rows.

  Returns:
    `(...,)` mean row entropy per matrix (per head), or `(..., T)`.
  """
  H = jnp.sum(jax.scipy.special.entr(weights.astype(jnp.float32)), -1)  # entr(p) = -p ln p
  return H if per_query else H.mean(-1)


def top_k_mass(weights: jax.Array, k: int) -> jax.Array:
  """Mean over query rows of the attention mass on each row's `k` largest keys, `(...,)`."""
  check_int(k, 1, "k", "analysis.top_k_mass")
  return jnp.sum(jax.lax.top_k(weights, k)[0], -1).mean(-1)


def local_mass(weights: jax.Array, window: int) -> jax.Array:
  """Mean over query rows of the mass on keys within `window` of the query (`|i − j| < w`)."""
  check_int(window, 1, "window", "analysis.local_mass")
  T, S = weights.shape[-2:]
  near = jnp.abs(jnp.arange(T)[:, None] - jnp.arange(S)[None, :]) < window
  return jnp.sum(jnp.where(jnp.broadcast_to(near, weights.shape), weights, 0), -1).mean(-1)


def activation_sparsity(h: jax.Array, threshold: float = 0.1) -> jax.Array:
  """Fraction of hidden units with `|h| ≤ threshold · rms(h)` along the last axis, `(...,)`.

  Relative to each row's RMS, so it compares layers and activations of different scales
  (ReLU gives exact zeros; GELU gives small negative values).
  """
  check_range(threshold, "threshold", "analysis.activation_sparsity", low=0, example="0.1")
  rms = jnp.sqrt(jnp.mean(jnp.square(h.astype(jnp.float32)), -1, keepdims=True))
  return jnp.mean(jnp.abs(h) <= threshold * rms, -1)
