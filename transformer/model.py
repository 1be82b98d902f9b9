"""The model, read top to bottom: embedding, the stack of blocks, unembedding; its entry points.

The blocks (norm, attention, feed-forward) are `transformer.block`. The `L` blocks are one
`nn.scan`, so every block weight carries a leading layer axis. Under `mutable=["intermediates"]`
each block sows `attn_in, q, k, v, scores, weights, resid_pre, resid_mid, resid_post, ffn_in,
ffn_hidden`, stacked on that same layer axis; `attn_in` and `ffn_in` are the (normalized) inputs
of `w_q, w_k, w_v` and `w_1, w_gate`.

Speed, measured by `python -m experiments.benchmarks.train_step` against a plain Flax GPT.
The backward pass of the layer scan keeps, per layer, only the block's input and the values
named in `SAVED_FOR_BACKWARD` (the outputs of the weight matmuls and of `A V`); the norms, the
score matrix, the softmax and the activation are recomputed from them. Storing those too
would stack `L` copies of every `(B, H, T, S)` and `(B, T, F)` element-wise intermediate: on
XLA:CPU every byte of a step's temporary memory is a freshly mapped page that faults on
first touch, every step, which costs more than the recomputation. `Config.remat=True` keeps
only the block's input.

The KV hook (`transformer.kvhook`) is what an attention layer stores of its keys and values,
and what it reads back; `forward_layerwise` runs the model with one hook per layer, for caches
whose layers differ in shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.attention import ATTENTION, attention_options, make_mask
from transformer.block import (
    ACTIVATION_FNS,
    Attention,
    Block,
    FeedForward,
    Norm,
    ScanBlock,
)
from transformer.config import Config
from transformer.kvhook import KVCache, KVHook, KVInputs, dense_kv, stacked_kv
from transformer.layout import matmul

__all__ = ["ACTIVATION_FNS", "Attention", "Block", "Embed", "FeedForward", "KVCache", "KVHook",
           "KVInputs", "Norm", "SAVED_FOR_BACKWARD", "ScanBlock", "Transformer", "Unembed",
           "block_fn", "dense_kv", "forward_layerwise", "init", "is_key", "key_order_error",
           "layer", "param_tree", "stacked_kv"]

# The values of one block that its backward pass reads from memory, by their tags: the products
# `X [W_Q | W_K | W_V]` (`X [W_Q | W_V]` with tied keys), `· W_O`, `X [W_gate | W_1]` (or
# `X W_1`), the attention's output `A V` and, for the softmax family, its unnormalized `E V`
# (`transformer.kernel_attention._mix`). Everything else in the block is recomputed (see the module
# docstring); the output of `w_2` is not needed by the backward.
SAVED_FOR_BACKWARD = ("w_qkv", "w_qv", "w_o", "w_gate1", "w_1", "attn_out", "attn_mixed")


def _mask_window(cfg: Config):
  """The window the dense mask applies: none for a variant that takes `window` itself
  (`bigbird` reads global and random keys outside it)."""
  return None if "window" in attention_options(ATTENTION[cfg.attention], cfg) else cfg.window


class Embed(nn.Module):
  """A lookup table `E: (n, D)`; `embed(ids) = one_hot(ids) @ E`, `attend(h) = h @ Eᵀ`."""

  cfg: Config
  n: int

  def setup(self):
    self.embedding = self.param("embedding", nn.initializers.normal(self.cfg.init_std),
                                (self.n, self.cfg.d_model), self.cfg.jnp_param_dtype)

  def __call__(self, ids):
    return jnp.take(self.embedding, ids, axis=0).astype(self.cfg.jnp_dtype)

  def attend(self, h_BTD):
    return matmul(h_BTD, self.embedding.T.astype(self.cfg.jnp_dtype))


def _context(cfg: Config, B: int, T: int, *, positions=None, padding_mask=None, offset=0,
             cache_valid=None):
  """Positions, attention mask and key validity of a chunk of `T` tokens written at cache slot
  `offset` (no cache: `cache_valid=None`). Returns `(pos_BT, mask_BTS, k_valid_BS)`."""
  if positions is None:
    positions = jnp.broadcast_to(offset + jnp.arange(T), (B, T))
  valid_BT = jnp.ones((B, T), bool) if padding_mask is None else padding_mask.astype(bool)
  if cache_valid is None:
    k_pos_BS, k_valid_BS = positions, valid_BT
  else:
    S = cache_valid.shape[1]
    k_valid_BS = jax.lax.dynamic_update_slice(cache_valid, valid_BT, (0, offset))
    # A slot's position is its index; a prompt with left padding passes `positions`.
    k_pos_BS = jnp.broadcast_to(jnp.arange(S), (B, S))
  mask_BTS = make_mask(positions, k_pos_BS, causal=cfg.causal, window=_mask_window(cfg),
                       k_valid_BS=k_valid_BS)
  return positions, mask_BTS, k_valid_BS


class Transformer(nn.Module):
  """Decoder-only transformer: embedding, `L` stacked blocks, final norm, output matrix.

  Call as `model.apply(variables, tokens_BT) -> logits_BTV` (float32). Keyword options:
  `positions` (absolute positions, default `0..T-1`, or continuing a cache),
  `padding_mask` (True for real tokens), `cache` (a `KVCache`; then the call returns
  `(logits, new_cache)`). The two ends are methods of their own, `embed_tokens` and
  `logits`, so that `forward_layerwise` runs the same model layer by layer.

  `scan_unroll` is how many layers one iteration of the layer scan runs (the parameters and
  the values are the same; only the compiled loop changes). Unrolling a shallow model whole
  spares XLA:CPU the loop's per-layer slicing and stacking: vmapped 2-layer micro- and mini-20
  steps took 7-22% less CPU time (`python -m experiments.benchmarks.sweep`), and
  `experiments.train.sweep.train_many` unrolls models of up to 4 layers.
  """

  cfg: Config
  scan_unroll: int = 1

  def setup(self):
    cfg = self.cfg
    if not isinstance(self.scan_unroll, int) or self.scan_unroll < 1:
      raise ValueError(f"Transformer: scan_unroll={self.scan_unroll!r} must be a positive int "
                       "(layers per scan iteration). Fix: 1 (a loop) or cfg.n_layers (unrolled).")
    self.embed = Embed(cfg, cfg.vocab_size)
    if cfg.positions == "learned":
      self.pos_embed = Embed(cfg, cfg.max_len)
    policy = (jax.checkpoint_policies.nothing_saveable if cfg.remat
              else jax.checkpoint_policies.save_only_these_names(*SAVED_FOR_BACKWARD))
    # Inside a scan the remat needs no CSE barrier (the loop body is not CSE'd with its copy).
    block = nn.remat(ScanBlock, policy=policy, prevent_cse=False)
    self.blocks = nn.scan(block, variable_axes={"params": 0, "intermediates": 0},
                          split_rngs={"params": True}, in_axes=(0, nn.broadcast),
                          length=cfg.n_layers, unroll=self.scan_unroll)(cfg)
    if cfg.norm_position == "pre":
      self.norm_f = Norm(cfg)
    if not cfg.tie_embeddings:
      self.unembed = Unembed(cfg)

  def embed_tokens(self, tokens_BT, positions_BT):
    """The residual stream's input: token rows of `E` (plus learned position rows)."""
    x_BTD = self.embed(tokens_BT)
    if self.cfg.positions == "learned":
      x_BTD = x_BTD + self.pos_embed(positions_BT)
    return x_BTD

  def logits(self, x_BTD):
    """The last block's output to float32 logits: final norm (pre-norm), then `W_out` or `Eᵀ`."""
    if self.cfg.norm_position == "pre":
      x_BTD = self.norm_f(x_BTD)
    if self.cfg.tie_embeddings:
      logits_BTV = self.embed.attend(x_BTD)
    else:
      logits_BTV = self.unembed(x_BTD)
    return logits_BTV.astype(jnp.float32)

  def __call__(self, tokens_BT, *, positions=None, padding_mask=None, cache=None):
    cfg = self.cfg
    B, T = tokens_BT.shape
    if cfg.positions == "learned" and T > cfg.max_len:
      raise ValueError(f"Transformer: {T} tokens exceed max_len={cfg.max_len}, the rows of the "
                       "learned position matrix. Fix: a shorter sequence or a larger max_len.")
    offset = 0 if cache is None else cache.index
    positions, mask_BTS, k_valid_BS = _context(
        cfg, B, T, positions=positions, padding_mask=padding_mask, offset=offset,
        cache_valid=None if cache is None else cache.valid)
    x_BTD = self.embed_tokens(tokens_BT, positions)
    # A Python-int offset would be traced by the remat: pass it only with a cache.
    if cache is None:
      x_BTD, _ = self.blocks(x_BTD, None, (positions, mask_BTS))
      return self.logits(x_BTD)
    # The cache is carried through the layer scan and written in place (`stacked_kv`).
    (x_BTD, k, v), _ = self.blocks((x_BTD, cache.k, cache.v), jnp.arange(cfg.n_layers),
                                   (positions, mask_BTS, offset))
    return self.logits(x_BTD), KVCache(k, v, k_valid_BS, cache.index + T)


class Unembed(nn.Module):
  """The output matrix `w_out: (D, V)`: logits `= h @ w_out` (untied models only)."""

  cfg: Config

  @nn.compact
  def __call__(self, h_BTD):
    cfg = self.cfg
    w = self.param("w_out", nn.initializers.normal(cfg.init_std), (cfg.d_model, cfg.vocab_size),
                   cfg.jnp_param_dtype)
    return h_BTD @ w.astype(cfg.jnp_dtype)


def is_key(x) -> bool:
  """Whether `x` is a PRNG key: a typed key (`jax.random.key`) or a raw `uint32 (..., 2)` one
  (`jax.random.PRNGKey`)."""
  dtype = getattr(x, "dtype", None)
  if dtype is None:
    return False
  if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
    return True
  return dtype == jnp.uint32 and tuple(getattr(x, "shape", ()))[-1:] == (2,)


def key_order_error(call: str) -> TypeError:
  """The error of a call in the old argument order: names the new one."""
  return TypeError(f"the PRNG key is in the wrong place. The key is the last positional "
                   f"argument and is named `key` (one convention in transformer, analysis and "
                   f"optim). Fix: call {call}.")


def init(cfg: Config, key: jax.Array, *, seq_len: int = 8) -> dict[str, Any]:
  """Initial parameters (the `params` collection) of `Transformer(cfg)`.

  The one way to initialize: for shapes only, `jax.eval_shape(lambda: init(cfg, key))`.

  Args:
    cfg: the config.
    key: the PRNG key (last, as everywhere in the library).
    seq_len: length of the dummy sequence traced at initialization.

  Example:
    >>> import jax, transformer
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> params["blocks"]["attn"]["w_q"].shape == (cfg.n_layers, cfg.d_model, cfg.d_model)
    True
  """
  if not isinstance(cfg, Config):
    raise key_order_error("transformer.init(cfg, key)") if is_key(cfg) else TypeError(
        f"transformer.init: cfg must be a transformer.Config; got {type(cfg).__name__}. Fix: "
        "transformer.init(transformer.preset(NAME), key).")
  tokens = jnp.zeros((1, min(seq_len, cfg.max_len)), jnp.int32)
  return jax.jit(Transformer(cfg).init)(key, tokens)["params"]


def param_tree(params):
  """The `params` collection, whether given bare or as the variables `{"params": ...}`."""
  return params["params"] if "params" in params else params


def layer(params, l: int):
  """Layer `l`'s slice of the stacked block weights (the argument of `block_fn`)."""
  return jax.tree.map(lambda w: w[l], param_tree(params)["blocks"])


def block_fn(cfg: Config, part: str = "block"):
  """The pure function `f(block_params_l, x) -> y` of one layer.

  `x` is `(T, D)` or `(B, T, D)`; positions are `0..T-1` and the mask is the config's.
  `part="block"` is the whole layer, `"attn"` the attention sub-layer and `"ffn"` the
  feed-forward sub-layer, each without its residual (pre-norm: `attn(norm_1(x))`).

  Example:
    >>> import jax, transformer
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> x_TD = jax.random.normal(jax.random.key(1), (16, cfg.d_model))
    >>> f = transformer.block_fn(cfg)
    >>> J = jax.jacfwd(f, argnums=1)(transformer.layer(params, 0), x_TD)
    >>> J.shape == (16, cfg.d_model, 16, cfg.d_model)  # (T, D, T, D)
    True
  """
  if part not in ("block", "attn", "ffn"):
    raise ValueError(f"block_fn: part={part!r} is unknown. Fix: use 'block', 'attn' or 'ffn'.")
  module = Block(cfg)

  def f(block_params, x):
    squeeze = x.ndim == 2
    x_BTD = x[None] if squeeze else x
    B, T, _ = x_BTD.shape
    pos_BT = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask_BTS = make_mask(pos_BT, pos_BT, causal=cfg.causal, window=_mask_window(cfg))
    variables = {"params": block_params}
    if part == "block":
      y_BTD, _ = module.apply(variables, x_BTD, None, (pos_BT, mask_BTS))
    elif part == "attn":
      y_BTD = module.apply(variables, x_BTD, pos_BT, mask_BTS, method=Block.attn_branch)
    else:
      y_BTD = module.apply(variables, x_BTD, method=Block.ffn_branch)
    return y_BTD[0] if squeeze else y_BTD

  return f


def forward_layerwise(params, cfg: Config, tokens_BT, kv_hooks: Sequence[KVHook],
                      slots: Sequence | None = None, *, cache_valid=None, offset=0):
  """`Transformer(cfg)`, run one layer at a time with layer `l`'s keys and values through
  `kv_hooks[l]`: the same modules (`embed_tokens`, `Block`, `logits`) and the same mask, in
  a Python loop instead of the layer scan, so that each layer's cache slot may have its own
  shape (a compressed cache with a rank per layer).

  Args:
    params: the model's params (bare or `{"params": ...}`).
    cfg: its config.
    tokens_BT: token ids.
    kv_hooks: `L` KV hooks (see `dense_kv`); `None` entries use `dense_kv`.
    slots: `L` cache slots (whatever the hooks store), or `None` for no cache.
    cache_valid: `(B, S)` which cache slots hold real tokens (with `slots`).
    offset: the cache slot of the chunk's first token (with `slots`).

  Returns:
    `(logits_BTV, new_slots, k_valid_BS)`; `new_slots` is `None` without a cache.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> from transformer.model import dense_kv, forward_layerwise
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jnp.arange(6)[None]
    >>> logits, _, _ = forward_layerwise(params, cfg, tokens, [dense_kv] * cfg.n_layers)
    >>> full = transformer.Transformer(cfg).apply({"params": params}, tokens)
    >>> bool(jnp.abs(logits - full).max() < 1e-5)
    True
  """
  if len(kv_hooks) != cfg.n_layers:
    raise ValueError(f"forward_layerwise: {len(kv_hooks)} kv_hooks for n_layers={cfg.n_layers}. "
                     "Fix: one hook per layer.")
  if (slots is None) != (cache_valid is None):
    raise ValueError("forward_layerwise: pass slots and cache_valid together (a cache), or "
                     "neither.")
  B, T = tokens_BT.shape
  model, variables = Transformer(cfg), {"params": param_tree(params)}
  positions, mask_BTS, k_valid_BS = _context(cfg, B, T, offset=offset, cache_valid=cache_valid)
  x_BTD = model.apply(variables, tokens_BT, positions, method=Transformer.embed_tokens)
  ctx = (positions, mask_BTS) if slots is None else (positions, mask_BTS, offset)
  new_slots = []
  for l, hook in enumerate(kv_hooks):
    x_BTD, slot = Block(cfg, hook).apply({"params": layer(params, l)}, x_BTD,
                                         None if slots is None else slots[l], ctx)
    new_slots.append(slot)
  logits_BTV = model.apply(variables, x_BTD, method=Transformer.logits)
  return logits_BTV, None if slots is None else tuple(new_slots), k_valid_BS
