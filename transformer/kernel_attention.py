"""Kernel attention: softmax, Gaussian (`rbf`) and positive-feature (`linear`) scores, mixed by
one masked softmax.

Each is a registry function of `transformer.attention` (its signature and `aux` are stated
there). `exp(scores)` is the variant's kernel: `Q Kᵀ·scale` for `softmax`,
`−‖q − k‖²·scale/2` for `rbf`, `log φ(q)·φ(k)` for `linear`.

PSD guarantee. With tied projections (`q = k`, same map for queries and keys, RoPE
included, since `R_t W x_t` is one feature map of (token, position)), the kernel matrices of
`softmax` (`exp` of a Gram matrix, PSD by the Schur product theorem), `rbf` (Gaussian) and
`linear` (`Φ Φᵀ`) are symmetric PSD, so the bidirectional `D⁻¹K` is similar to
`D^{-1/2} K D^{-1/2}` and has real eigenvalues in [0, 1]. Under a causal mask the attention
matrix is lower triangular (eigenvalues = its diagonal); the guarantee is about the kernel
before masking, not the masked matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

NEG = jnp.finfo(jnp.float32).min


def masked_scores(q_BTHDh: jax.Array, k_BSHDh: jax.Array, mask_BTS: jax.Array, scale: float):
  """`Q Kᵀ · scale` per head in float32, with disallowed pairs set to `finfo.min`."""
  scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHDh, k_BSHDh).astype(jnp.float32) * scale
  return jnp.where(mask_BTS[:, None], scores_BHTS, NEG)


def _causal(B: int, T: int, S: int) -> jax.Array:
  return jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool)), (B, T, S))


def _mix(scores_BHTS, mask_BTS, v_BSHDh):
  """Masked softmax of `scores` and the mixed values `A V`, `A = softmax(scores)`.

  Computed in FlashAttention's order, `A V = (E V) / (E 1)` with `E = exp(scores − max)`: the
  row sums divide the `(T, Dh)` output, not the `(T, S)` matrix. Same values, fewer
  divisions, and on XLA:CPU the exponentials stay out of the `A V` matmul's fusion, whose
  per-call scratch buffers page-fault on every train step
  (`python -m experiments.benchmarks.train_step`). `weights` is `E / (E 1)`, computed under
  `jit` only when it is read.
  """
  scores_BHTS = jnp.where(mask_BTS[:, None], scores_BHTS, NEG)
  # The max only shifts the exponent (A does not depend on it), as in jax.nn.softmax.
  max_BHT1 = jax.lax.stop_gradient(scores_BHTS.max(-1, keepdims=True))
  exp_BHTS = jnp.exp(scores_BHTS - max_BHT1)
  sum_BHT1 = exp_BHTS.sum(-1, keepdims=True)
  # Tagged for the model's remat policy (`transformer.model.SAVED_FOR_BACKWARD`): the division's
  # backward pass reads `E V`, and keeping it spares recomputing the product. A no-op otherwise.
  mixed_BTHDh = checkpoint_name(
      jnp.einsum("bhts,bshd->bthd", exp_BHTS.astype(v_BSHDh.dtype), v_BSHDh), "attn_mixed")
  out_BTHDh = (mixed_BTHDh / sum_BHT1.transpose(0, 2, 1, 3)).astype(v_BSHDh.dtype)
  return out_BTHDh, {"scores": scores_BHTS, "weights": exp_BHTS / sum_BHT1}


def softmax_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale):
  """Scaled dot-product attention: `A = softmax(Q Kᵀ / sqrt(dh))`, output `A V`.

  Args:
    q_BTHDh: queries (batch, T, heads, dh).
    k_BSHDh: keys (batch, S, heads, dh).
    v_BSHDh: values (batch, S, heads, dh).
    mask_BTS: boolean, True where query t may attend to key s (None: causal).
    scale: the factor on the scores, usually `dh ** -0.5`.

  Returns:
    `(out_BTHDh, {"scores": scores_BHTS, "weights": weights_BHTS})`.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 4, 2, 8))
    >>> out, aux = softmax_attention(q, q, q, None, scale=8**-0.5)
    >>> aux["weights"].shape
    (1, 2, 4, 4)
  """
  B, T, _, _ = q_BTHDh.shape
  mask_BTS = _causal(B, T, k_BSHDh.shape[1]) if mask_BTS is None else mask_BTS
  scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHDh, k_BSHDh).astype(jnp.float32) * scale
  return _mix(scores_BHTS, mask_BTS, v_BSHDh)


def rbf_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale):
  """Gaussian-kernel attention: `A = D⁻¹ K`, `K_ts = exp(−‖q_t − k_s‖² · scale / 2)`.

  A shift-invariant kernel, PSD for any points; with `scale = dh^-1/2` the bandwidth is
  `dh^1/4`. Computed as a softmax of `q·k·scale − (‖q‖² + ‖k‖²)·scale/2`.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 4, 2, 8))
    >>> out, aux = rbf_attention(q, q, q, None, scale=8**-0.5)
    >>> bool(aux["weights"][0, 0, 3, 3] > aux["weights"][0, 0, 3, 0])  # nearest is itself
    True
  """
  B, T, _, _ = q_BTHDh.shape
  mask_BTS = _causal(B, T, k_BSHDh.shape[1]) if mask_BTS is None else mask_BTS
  q = q_BTHDh.astype(jnp.float32)
  k = k_BSHDh.astype(jnp.float32)
  qk_BHTS = jnp.einsum("bthd,bshd->bhts", q, k)
  qq_BHT1 = jnp.einsum("bthd,bthd->bht", q, q)[..., None]
  kk_BH1S = jnp.einsum("bshd,bshd->bhs", k, k)[:, :, None, :]
  scores_BHTS = (qk_BHTS - 0.5 * qq_BHT1 - 0.5 * kk_BH1S) * scale
  return _mix(scores_BHTS, mask_BTS, v_BSHDh)


def _pad_to(x, axis: int, n: int, value=0):
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, n - x.shape[axis])
  return jnp.pad(x, pad, constant_values=value)


LINEAR_CHUNK = 64  # positions per chunk of the causal running sums


def elu1(x):
  """The positive feature map `φ(x) = elu(x) + 1` of linear attention."""
  return jax.nn.elu(x) + 1.0


def linear_quadratic(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale):
  """Linear attention in its quadratic form: `A = D⁻¹ (M ⊙ Φ(Q) Φ(K)ᵀ)`, output `A V`."""
  B, T, _, _ = q_BTHDh.shape
  mask_BTS = _causal(B, T, k_BSHDh.shape[1]) if mask_BTS is None else mask_BTS
  phi_q = elu1(q_BTHDh.astype(jnp.float32) * scale**0.5)
  phi_k = elu1(k_BSHDh.astype(jnp.float32) * scale**0.5)
  kernel_BHTS = jnp.einsum("bthd,bshd->bhts", phi_q, phi_k)
  return _mix(jnp.log(kernel_BHTS), mask_BTS, v_BSHDh)


def linear_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, causal=True, offset=0):
  """Positive-feature linear attention with elu+1 features, by running sums: `O(T (C + dh) dh)`.

  .. math:: o_t = \\frac{φ(q_t)ᵀ \\sum_{s≤t} φ(k_s) v_sᵀ}{φ(q_t)ᵀ \\sum_{s≤t} φ(k_s)},
     \\quad φ(x) = \\mathrm{elu}(x·\\sqrt{scale}) + 1

  Causal: chunks of `C = LINEAR_CHUNK` positions, the quadratic form inside a chunk and the
  prefix sums `Σ φ(k) vᵀ`, `Σ φ(k)` of the earlier chunks (an associative scan). The mask is
  used only for key padding (a key no query may read is dropped); a window is
  not supported (Config refuses it). With a KV cache the quadratic form is used.

  Args:
    q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale: as in `softmax_attention`.
    causal: prefix sums (True) or total sums (bidirectional).
    offset: cache slot of query 0 (0 in a forward pass).

  Returns:
    `(out_BTHDh, aux)`; `aux["scores"]` is `log φ(q)·φ(k)` (masked), so `weights` is
    the normalised kernel.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 6, 2, 4))
    >>> out, _ = linear_attention(q, q, q, None, scale=0.5)
    >>> ref, _ = linear_quadratic(q, q, q, None, scale=0.5)
    >>> bool(jax.numpy.allclose(out, ref, atol=1e-5))
    True
  """
  B, T, _, _ = q_BTHDh.shape
  S = k_BSHDh.shape[1]
  if mask_BTS is None:
    mask_BTS = _causal(B, T, S) if causal else jnp.ones((B, T, S), bool)
  dense = linear_quadratic(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale=scale)
  if T != S or not isinstance(offset, int) or offset:
    return dense
  phi_q = elu1(q_BTHDh.astype(jnp.float32) * scale**0.5)
  k_valid_BS11 = mask_BTS.any(axis=1)[:, :, None, None]
  phi_k = jnp.where(k_valid_BS11, elu1(k_BSHDh.astype(jnp.float32) * scale**0.5), 0.0)
  v = v_BSHDh.astype(jnp.float32)
  if not causal:
    kv_BHDhDh = jnp.einsum("bshd,bshe->bhde", phi_k, v)
    num_BTHDh = jnp.einsum("bthd,bhde->bthe", phi_q, kv_BHDhDh)
    den_BTH1 = jnp.einsum("bthd,bhd->bth", phi_q, phi_k.sum(1))[..., None]
    return (num_BTHDh / den_BTH1).astype(v_BSHDh.dtype), dense[1]
  # Chunks of C: exact quadratic form inside a chunk, running sums of φ(k) vᵀ across chunks.
  B, _, H, Dh = q_BTHDh.shape
  C = LINEAR_CHUNK
  n = -(-T // C)

  def chunks(x):
    return _pad_to(x, 1, n * C).reshape(B, n, C, H, Dh)

  pq, pk, pv = chunks(phi_q), chunks(phi_k), chunks(v)
  kv_BnHDhDh = jnp.einsum("bnchd,bnche->bnhde", pk, pv)
  z_BnHDh = pk.sum(2)
  prev_kv = jax.lax.associative_scan(jnp.add, kv_BnHDhDh, axis=1) - kv_BnHDhDh
  prev_z = jax.lax.associative_scan(jnp.add, z_BnHDh, axis=1) - z_BnHDh
  intra_BnHCC = jnp.einsum("bnchd,bnshd->bnhcs", pq, pk) * jnp.tril(jnp.ones((C, C)))[None, None,
                                                                                        None]
  num = (jnp.einsum("bnchd,bnhde->bnche", pq, prev_kv)
         + jnp.einsum("bnhcs,bnshe->bnche", intra_BnHCC, pv))
  den = jnp.einsum("bnchd,bnhd->bnch", pq, prev_z) + intra_BnHCC.sum(-1).transpose(0, 1, 3, 2)
  den = jnp.where(den > 0, den, 1.0)  # a query with no key to read (padding) outputs 0
  out_BTHDh = (num / den[..., None]).reshape(B, n * C, H, Dh)[:, :T]
  return out_BTHDh.astype(v_BSHDh.dtype), dense[1]
