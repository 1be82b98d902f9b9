"""Attention, written out: masks, rotary positions, and the score/mixing registry.

Every attention variant is a pure function with one signature,

    fn(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale) -> (out_BTHD, {"scores": ..., "weights": ...})

where `q` has already been expanded so that query and key/value heads match (GQA is
handled by the caller), `mask_BTS` is True where query t may read key s, and the
returned dict carries the score matrix `Q Kᵀ` (float32, masked) and the mixing matrix
`A` so that analysis can read them. A new variant is one function and one entry in
`ATTENTION`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def masked_scores(q_BTHD: jax.Array, k_BSHD: jax.Array, mask_BTS: jax.Array, scale: float):
  """`Q Kᵀ · scale` per head in float32, with disallowed pairs set to `finfo.min`."""
  scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BSHD).astype(jnp.float32) * scale
  return jnp.where(mask_BTS[:, None], scores_BHTS, jnp.finfo(jnp.float32).min)


def softmax_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Scaled dot-product attention: `A = softmax(Q Kᵀ / sqrt(dh))`, output `A V`.

  Args:
    q_BTHD: queries (batch, T, heads, dh).
    k_BSHD: keys (batch, S, heads, dh).
    v_BSHD: values (batch, S, heads, dh).
    mask_BTS: boolean, True where query t may attend to key s.
    scale: the factor on the scores, usually `dh ** -0.5`.

  Returns:
    `(out_BTHD, {"scores": scores_BHTS, "weights": weights_BHTS})`.
  """
  scores_BHTS = masked_scores(q_BTHD, k_BSHD, mask_BTS, scale)
  weights_BHTS = jax.nn.softmax(scores_BHTS, axis=-1)
  out_BTHD = jnp.einsum("bhts,bshd->bthd", weights_BHTS.astype(v_BSHD.dtype), v_BSHD)
  return out_BTHD, {"scores": scores_BHTS, "weights": weights_BHTS}


AttentionFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]

# The explicit registry: `Config.attention` names an entry.
ATTENTION: dict[str, AttentionFn] = {
    "softmax": softmax_attention,
}


def make_mask(q_pos_BT: jax.Array, k_pos_BS: jax.Array, *, causal: bool,
              window: int | None = None, k_valid_BS: jax.Array | None = None) -> jax.Array:
  """Boolean mask `(B, T, S)`: True where the query at `q_pos` may read the key at `k_pos`.

  Args:
    q_pos_BT: absolute positions of the queries.
    k_pos_BS: absolute positions of the keys.
    causal: keys after the query are hidden (`k_pos <= q_pos`).
    window: sliding window width `w`: keys with `q_pos - k_pos >= w` are hidden (and, when
      not causal, also keys with `k_pos - q_pos >= w`).
    k_valid_BS: padding mask, True for real tokens (and, in a KV cache, written slots).
  """
  diff_BTS = q_pos_BT[:, :, None] - k_pos_BS[:, None, :]
  mask_BTS = jnp.ones(diff_BTS.shape, bool)
  if causal:
    mask_BTS &= diff_BTS >= 0
  if window is not None:
    mask_BTS &= diff_BTS < window
    if not causal:
      mask_BTS &= diff_BTS > -window
  if k_valid_BS is not None:
    mask_BTS &= k_valid_BS[:, None, :]
  return mask_BTS


def rope(x_BTHD: jax.Array, pos_BT: jax.Array, theta: float) -> jax.Array:
  """Rotary position embedding, rotate-half convention (as in Hugging Face Llama).

  Feature `i < dh/2` is paired with feature `i + dh/2` and the pair is rotated by the angle
  `pos · theta^(-2i/dh)`.
  """
  dh = x_BTHD.shape[-1]
  inv_freq_F = theta ** (-jnp.arange(0, dh, 2, dtype=jnp.float32) / dh)
  angle_BTF = pos_BT[..., None].astype(jnp.float32) * inv_freq_F[None, None]
  cos_BT1D = jnp.cos(jnp.concatenate([angle_BTF, angle_BTF], -1))[:, :, None, :]
  sin_BT1D = jnp.sin(jnp.concatenate([angle_BTF, angle_BTF], -1))[:, :, None, :]
  x = x_BTHD.astype(jnp.float32)
  x1, x2 = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return (x * cos_BT1D + rotated * sin_BT1D).astype(x_BTHD.dtype)
