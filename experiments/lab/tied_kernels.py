"""The kernel matrices a trained attention model forms, certified PSD in float64.

`psd-attention`'s proof clause says that with tied keys (`Config.qk_tied`, `K = X W_Q`) the
kernel matrix of softmax (`exp(Q Qᵀ · s)`), of the Gaussian (`exp(−‖q_t − q_s‖² · s / 2)`) and
of elu+1 linear attention (`Φ(Q) Φ(Q)ᵀ`, `Φ = elu(· √s) + 1`) is symmetric PSD for every input,
`s = dh^-1/2` the model's score scale (`transformer.kernel_attention`). `kernels` rebuilds those
matrices in float64 from the queries and keys a trained model sows on real windows, over every
pair (the bidirectional kernel, of which causal attention reads the lower triangle), and
`certificate` decides each with `analysis.psd_certificate` (symmetric to `n · eps`, minimum
eigenvalue above `−n · eps · ‖K‖₂`, eps of float64): the exact verification of the proof on the
models the claim trained. Untied softmax (`W_K ≠ W_Q`) gets the same certificate, which it has
no reason to pass.
"""

from __future__ import annotations

import numpy as np

import analysis
import transformer
from experiments import models

KERNELS = ("softmax", "rbf", "linear")


def _elu1(x):
  return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def kernels(q_BTHDh, k_BSHDh, attention: str, scale: float) -> np.ndarray:
  """The `(B, H, T, S)` kernel matrices of `attention` over every pair, in float64.

  Softmax's `exp(Q Kᵀ s)` is divided by its largest entry per matrix (a positive factor, so
  definiteness is unchanged) to stay finite; the Gaussian's entries are at most 1 already.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.tied_kernels import kernels
    >>> q = np.random.default_rng(0).normal(size=(1, 5, 2, 4))
    >>> K = kernels(q, q, "rbf", 0.5)
    >>> K.shape, bool(np.allclose(np.diagonal(K, axis1=-2, axis2=-1), 1.0))
    ((1, 2, 5, 5), True)
  """
  if attention not in KERNELS:
    raise ValueError(f"kernels: attention={attention!r} forms no kernel matrix here. Fix: one "
                     f"of {KERNELS}.")
  q = np.asarray(q_BTHDh, np.float64)
  k = np.asarray(k_BSHDh, np.float64)
  if k.shape[2] != q.shape[2]:  # grouped key/value heads serve H / K query heads each
    k = np.repeat(k, q.shape[2] // k.shape[2], axis=2)
  if attention == "linear":
    phi_q, phi_k = _elu1(q * np.sqrt(scale)), _elu1(k * np.sqrt(scale))
    return np.einsum("bthd,bshd->bhts", phi_q, phi_k)
  if attention == "rbf":
    diff = q[:, :, None] - k[:, None, :]  # (B, T, S, H, dh)
    return np.exp(-0.5 * scale * np.einsum("btshd,btshd->bhts", diff, diff))
  g = np.einsum("bthd,bshd->bhts", q, k) * scale
  return np.exp(g - g.max(axis=(-2, -1), keepdims=True))


def certificate(params, cfg: transformer.Config, tokens_BT) -> dict:
  """Every layer's kernel matrices on `tokens_BT`, certified: `psd_exact` (the fraction of the
  `L · B · H` matrices that are symmetric PSD in float64, 1 when all are), `min_eig_rel` (the
  least `λ_min / λ_max` over them) and `asymmetry` (the largest `‖K − Kᵀ‖_F / ‖K‖_F`).

  `cfg.attention` names the kernel (`softmax`, `rbf` or `linear`); the queries and keys are
  the ones the model sows (`q`, `k`: with `qk_tied` they are equal).
  """
  attn = models.intermediates(params, cfg, tokens_BT)["blocks"]["attn"]
  q_L, k_L = np.asarray(attn["q"]), np.asarray(attn["k"])  # (L, B, T, H, dh)
  scale = cfg.d_head ** -0.5
  cert, lam_rel = [], []
  for q, k in zip(q_L, k_L, strict=True):
    K = kernels(q, k, cfg.attention, scale)
    cert.append(analysis.psd_certificate(K))
    lam = np.linalg.eigvalsh((K + np.swapaxes(K, -1, -2)) / 2)
    lam_rel.append(lam[..., 0] / np.abs(lam).max(-1))
  return {"psd_exact": float(np.mean([c["is_kernel"] for c in cert])),
          "min_eig_rel": float(np.min(lam_rel)),
          "asymmetry": float(np.max([c["asymmetry"] for c in cert]))}
