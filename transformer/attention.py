"""Attention, written out: masks, rotary positions, and the score/mixing registry.

Every attention variant is a pure, parameter-free function with one signature::

    fn(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, **options)
        -> (out_BTHDh, {"scores": scores_BHTS, "weights": weights_BHTS, ...})

where `q` has already been expanded so that query and key/value heads match (GQA is
handled by the caller) and `mask_BTS` is True where query t may read key s (`None` means
causal over `0..T-1`). The keyword `options` a variant declares are named after `Config`
fields (`window`, `block_size`, `n_global`, `n_random`, `top_k_blocks`, `causal`) plus
`offset`, the cache slot of query 0; `attention_options` picks them from a config, so a new
variant is still one function and one entry in `ATTENTION`. A variant that needs learned
parameters (the tied projection `Config.qk_tied`) lives in the model, not here.

Every variant returns `weights = softmax(scores)` row by row, so `exp(scores)` is its
(masked) kernel. Block-sparse variants (`local`, `bigbird`, `moba`) compute only the blocks
they select; their `scores`/`weights` are those blocks scattered into the dense `(B, H, T, S)`
layout. The variants live in `transformer.kernel_attention` (`softmax`, `rbf`, `linear`) and
`transformer.sparse_attention` (`local`, `bigbird`, `moba`); this module holds their registry,
the masks and the rotary positions, and re-exports them.

Fast paths (running sums, blocks) run when `T == S` and `offset` is the Python int 0 (a
forward pass); they assume the mask is causal, possibly with a sliding window and padding.
With a KV cache (`T != S` or a traced `offset`) every variant falls back to the dense masked
form of its own pattern, which is the same function of the same keys.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp

from transformer.kernel_attention import (
    LINEAR_CHUNK,
    NEG,
    elu1,
    linear_attention,
    linear_quadratic,
    masked_scores,
    rbf_attention,
    softmax_attention,
)
from transformer.sparse_attention import bigbird_attention, local_attention, moba_attention

__all__ = ["ATTENTION", "LINEAR_CHUNK", "NEG", "OPTION_FIELDS", "AttentionFn",
           "attention_options", "bigbird_attention", "elu1", "linear_attention",
           "linear_quadratic", "local_attention", "make_mask", "masked_scores", "moba_attention",
           "rbf_attention", "rope", "softmax_attention"]

AttentionFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]

# The explicit registry: `Config.attention` names an entry.
ATTENTION: dict[str, AttentionFn] = {
    "softmax": softmax_attention,
    "rbf": rbf_attention,
    "linear": linear_attention,
    "local": local_attention,
    "bigbird": bigbird_attention,
    "moba": moba_attention,
}

# Config fields a variant may declare as keyword options.
OPTION_FIELDS = ("window", "block_size", "n_global", "n_random", "top_k_blocks", "causal")


def attention_options(fn: AttentionFn, cfg, offset=0) -> dict:
  """The keyword options `fn` declares, read from `cfg` (and `offset`, if it takes one).

  Example:
    >>> from transformer.config import Config
    >>> sorted(attention_options(local_attention, Config(attention="local", window=8)))
    ['block_size', 'offset', 'window']
  """
  params = inspect.signature(fn).parameters
  opts = {name: getattr(cfg, name) for name in OPTION_FIELDS if name in params}
  if "offset" in params:
    opts["offset"] = offset
  return opts


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


def rope(x_BTHDh: jax.Array, pos_BT: jax.Array, theta: float) -> jax.Array:
  """Rotary position embedding, rotate-half convention (as in Hugging Face Llama).

  Feature `i < dh/2` is paired with feature `i + dh/2` and the pair is rotated by the angle
  `pos · theta^(-2i/dh)`.
  """
  dh = x_BTHDh.shape[-1]
  inv_freq = theta ** (-jnp.arange(0, dh, 2, dtype=jnp.float32) / dh)
  angle_BTF = pos_BT[..., None].astype(jnp.float32) * inv_freq[None, None]
  cos_BT1Dh = jnp.cos(jnp.concatenate([angle_BTF, angle_BTF], -1))[:, :, None, :]
  sin_BT1Dh = jnp.sin(jnp.concatenate([angle_BTF, angle_BTF], -1))[:, :, None, :]
  x = x_BTHDh.astype(jnp.float32)
  x1, x2 = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return (x * cos_BT1Dh + rotated * sin_BT1Dh).astype(x_BTHDh.dtype)
