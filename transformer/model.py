"""The model, read top to bottom: norm, attention, feed-forward, block, stack.

Every weight is a named matrix used as `x @ W` with `W: (d_in, d_out)`; there is no
`nn.Dense`. The `L` blocks are one `nn.scan`, so every block weight carries a leading
layer axis. Under `mutable=["intermediates"]` each block sows `attn_in, q, k, v, scores,
weights, resid_pre, resid_mid, resid_post, ffn_in, ffn_hidden`, stacked on that same layer
axis; `attn_in` and `ffn_in` are the (normalized) inputs of `w_q, w_k, w_v` and `w_1, w_gate`.
Matrices that read the same input are applied side by side, `[Q | K | V] = X [W_Q | W_K | W_V]`
(and `X [W_gate | W_1]`): one wider matmul, the matrices still separate parameters.

Speed, measured by `python -m experiments.benchmarks.train_step` against a plain Flax GPT.
The backward pass of the layer scan keeps, per layer, only the block's input and the values
named in `SAVED_FOR_BACKWARD` (the outputs of the weight matmuls and of `A V`); the norms, the
score matrix, the softmax and the activation are recomputed from them. Storing those too
would stack `L` copies of every `(B, H, T, S)` and `(B, T, F)` element-wise intermediate: on
XLA:CPU every byte of a step's temporary memory is a freshly mapped page that faults on
first touch, every step, which costs more than the recomputation. `Config.remat=True` keeps
only the block's input.

The KV hook. What an attention layer stores of its keys and values, and what it reads back,
is one function, `kv_hook(inputs, slot, offset)` (`KVHook`); the default, `dense_kv`, writes
`K` and `V` into the layer's slot of a cache and reads them all (in the layer scan,
`stacked_kv` does so on the whole `KVCache`, carried through the scan). A hook may read other
coordinates (`transformer.latent` reads basis coefficients: queries, keys and values in a
key/value basis, the output mapped back before `W_O`); the attention function of the registry
and everything around it (norms, residual, feed-forward, embedding, unembedding) is the
model's, unchanged. `forward_layerwise` runs the model with one hook per layer, for caches
whose layers differ in shape.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from transformer.attention import ATTENTION, attention_options, make_mask, rope
from transformer.config import Config

ACTIVATION_FNS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "identity": lambda x: x,
    "swiglu": jax.nn.silu,  # the gate's non-linearity; the product with `x @ w_1` is in FFN
}

# The values of one block that its backward pass reads from memory, by their tags: the products
# `X [W_Q | W_K | W_V]` (`X [W_Q | W_V]` with tied keys), `· W_O`, `X [W_gate | W_1]` (or
# `X W_1`), the attention's output `A V` and, for the softmax family, its unnormalized `E V`
# (`transformer.attention._mix`). Everything else in the block is recomputed (see the module
# docstring); the output of `w_2` is not needed by the backward.
SAVED_FOR_BACKWARD = ("w_qkv", "w_qv", "w_o", "w_gate1", "w_1", "attn_out", "attn_mixed")


def _project(module: nn.Module, name: str, x, d_out: int, std: float):
  """`x @ w_{name} (+ b_{name})`: declares the weight `(d_in, d_out)` in `module`.

  The product is tagged `w_{name}` for the remat policy (`SAVED_FOR_BACKWARD`)."""
  cfg = module.cfg
  w = module.param(f"w_{name}", nn.initializers.normal(std), (x.shape[-1], d_out),
                   cfg.jnp_param_dtype)
  y = checkpoint_name(x @ w.astype(cfg.jnp_dtype), f"w_{name}")
  if cfg.use_bias:
    b = module.param(f"b_{name}", nn.initializers.zeros, (d_out,), cfg.jnp_param_dtype)
    y = y + _lead(b.astype(cfg.jnp_dtype), y.ndim)
  return y


def _project_side_by_side(module: nn.Module, widths: dict[str, int], x, std: float):
  """`x @ [w_a | w_b | ...] (+ [b_a | b_b | ...])`, split into one product per name.

  Each `w_{name}: (d_in, width)` is its own parameter (declared in the order `_project` would
  declare them, so the initialization is the same); side by side they are one matmul, which
  reads `x` once and runs faster than several narrow ones. Tagged `w_{a}{b}...` for the remat
  policy.
  """
  cfg = module.cfg
  ws, bs = [], []
  for name, width in widths.items():
    ws.append(module.param(f"w_{name}", nn.initializers.normal(std), (x.shape[-1], width),
                           cfg.jnp_param_dtype))
    if cfg.use_bias:
      bs.append(module.param(f"b_{name}", nn.initializers.zeros, (width,), cfg.jnp_param_dtype))
  w = jnp.concatenate(ws, axis=1).astype(cfg.jnp_dtype)
  y = checkpoint_name(x @ w, "w_" + "".join(widths))
  if cfg.use_bias:
    y = y + _lead(jnp.concatenate(bs).astype(cfg.jnp_dtype), y.ndim)
  ends = list(itertools.accumulate(widths.values()))
  return jnp.split(y, ends[:-1], axis=-1)


def _lead(v_D, ndim: int):
  """`v_D` with leading unit axes, to broadcast against a rank-`ndim` activation."""
  return v_D.reshape((1,) * (ndim - 1) + v_D.shape)


def _out_std(cfg: Config) -> float:
  """Init scale of the matrices that write into the residual stream (`w_o`, `w_2`)."""
  return cfg.init_std / (2 * cfg.n_layers) ** 0.5 if cfg.init_residual_scale else cfg.init_std


def _mask_window(cfg: Config):
  """The window the dense mask applies: none for a variant that takes `window` itself
  (`bigbird` reads global and random keys outside it)."""
  return None if "window" in attention_options(ATTENTION[cfg.attention], cfg) else cfg.window


class KVInputs(NamedTuple):
  """What a KV hook is given: one chunk's projections, before and after RoPE.

  Attributes:
    q: `(B, T, H, Dh)` queries, after RoPE (as the attention reads them).
    k: `(B, T, K, Dh)` keys, after RoPE (as the dense cache stores them).
    v: `(B, T, K, Dh)` values.
    k_raw: `(B, T, K, Dh)` keys before RoPE (`k` itself without RoPE): a hook that compresses
      before the rotation reads these, and rotates what it rebuilds with `rope`.
    pos: `(B, T)` positions of the chunk.
  """

  q: jax.Array
  k: jax.Array
  v: jax.Array
  k_raw: jax.Array
  pos: jax.Array


# `kv_hook(inputs, slot, offset) -> (q_BTHX, k_BSKX, v_BSKY, slot, out_fn)`: the queries, keys
# and values the attention function reads (`X`, `Y` may differ from `Dh`), the layer's new
# cache slot, and `out_fn`, which maps the attention's output `(B, T, H, Y)` back to
# `(B, T, H, Dh)` before `W_O`.
KVHook = Callable[..., tuple]


def _identity(x):
  return x


def _write(cache, x_BTKDh, offset, *lead):
  """`cache` `(*lead, B, K, S, Dh)` with the chunk written at slot `offset` (of entry `lead`)."""
  x = x_BTKDh.transpose(0, 2, 1, 3).astype(cache.dtype)[(None,) * len(lead)]
  return jax.lax.dynamic_update_slice(cache, x, (*lead, 0, 0, offset, 0))


def dense_kv(inputs: KVInputs, slot, offset):
  """The default KV hook: attend to this chunk's `K`, `V`, or write them into the layer's
  cache `slot = (k_BKSDh, v_BKSDh)` at `offset` and attend to every slot (read as `k_BSKDh`,
  a transpose that XLA folds into the einsums, whose batch axes `(B, K)` lead)."""
  if slot is None:
    return inputs.q, inputs.k, inputs.v, None, _identity
  k_BKSDh, v_BKSDh = _write(slot[0], inputs.k, offset), _write(slot[1], inputs.v, offset)
  return (inputs.q, k_BKSDh.transpose(0, 2, 1, 3), v_BKSDh.transpose(0, 2, 1, 3),
          (k_BKSDh, v_BKSDh), _identity)


def stacked_kv(inputs: KVInputs, slot, offset):
  """`dense_kv` on the whole cache, `slot = (k_LBKSDh, v_LBKSDh, l)`: the hook of the layer
  scan, which carries the cache and writes it in place (when the caller donates it, as
  `transformer.decode_step` does); a layer's slot scanned in and stacked out would be a second
  cache, written whole at every decoded token.

  A step still pays for XLA:CPU copying layer `l`'s slice before the einsums (one more read
  and a write of each byte): `L` separate arrays read by an unrolled layer loop
  (`forward_layerwise`, `dense_kv`) skip it, 1.7–2.6× faster at `T` = 2048–8192 in
  `experiments.benchmarks.kv_cache`, but compile in time linear in `L` (0.3 s per layer)."""
  if slot is None:
    return dense_kv(inputs, None, offset)
  k_LBKSDh, v_LBKSDh, l = slot
  k_LBKSDh, v_LBKSDh = _write(k_LBKSDh, inputs.k, offset, l), _write(v_LBKSDh, inputs.v, offset, l)
  return (inputs.q, k_LBKSDh[l].transpose(0, 2, 1, 3), v_LBKSDh[l].transpose(0, 2, 1, 3),
          (k_LBKSDh, v_LBKSDh, l), _identity)


def _repeat_heads(x_BSKX, groups: int):
  """`(B, S, K·groups, X)`, each KV head once per query head it serves; repeated heads before
  slots, a cache's layout, so that XLA reads a cache without transposing it."""
  return x_BSKX if groups == 1 else jnp.repeat(
      x_BSKX.transpose(0, 2, 1, 3), groups, axis=1).transpose(0, 2, 1, 3)


class KVCache(NamedTuple):
  """Keys and values of every layer for `S` slots, plus which slots hold real tokens.

  Attributes:
    k: `(L, B, K, S, Dh)` keys (after RoPE): heads before slots, so that decoding reads each
      head's keys in place; stored `(L, B, S, K, Dh)`, every layer's keys and values would be
      transposed into a fresh buffer at every decoded token (`dense_kv`).
    v: `(L, B, K, S, Dh)` values.
    valid: `(B, S)` True where a slot holds a real (written, non-padding) token.
    index: `()` int32, the next slot to write.
  """

  k: jax.Array
  v: jax.Array
  valid: jax.Array
  index: jax.Array


class Norm(nn.Module):
  """LayerNorm or RMSNorm over the last axis (computed in float32), or nothing."""

  cfg: Config

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    if cfg.norm == "none":
      return x_BTD
    d = x_BTD.shape[-1]
    x = x_BTD.astype(jnp.float32)
    if cfg.norm == "layernorm":
      x = x - x.mean(-1, keepdims=True)
    y = x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps)
    y = y * _lead(self.param("scale", nn.initializers.ones, (d,), cfg.jnp_param_dtype), y.ndim)
    if cfg.norm == "layernorm" and cfg.use_bias:
      y = y + _lead(self.param("bias", nn.initializers.zeros, (d,), cfg.jnp_param_dtype), y.ndim)
    return y.astype(cfg.jnp_dtype)


class Attention(nn.Module):
  """Multi-head (grouped-query) attention: `Q = X W_Q`, `K = X W_K`, `V = X W_V`,
  `A = softmax(Q Kᵀ / sqrt(Dh))`, output `(A V) W_O`. Keys and values go through `kv_hook`
  (default `dense_kv`)."""

  cfg: Config
  kv_hook: KVHook | None = None

  @nn.compact
  def __call__(self, x_BTD, pos_BT, mask_BTS, kv=None, offset=0):
    cfg = self.cfg
    H, K, dh, std = cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.init_std
    B, T, _ = x_BTD.shape
    self.sow("intermediates", "attn_in", x_BTD)
    if cfg.qk_tied:  # K = X W_Q: the score kernel is a Gram matrix, PSD by construction
      q, v = _project_side_by_side(self, {"q": H * dh, "v": K * dh}, x_BTD, std)
      k = q
    else:  # [Q | K | V] = X [W_Q | W_K | W_V]
      q, k, v = _project_side_by_side(self, {"q": H * dh, "k": K * dh, "v": K * dh}, x_BTD, std)
    q_BTHDh = q.reshape(B, T, H, dh)
    k_raw_BTKDh, v_BTKDh = k.reshape(B, T, K, dh), v.reshape(B, T, K, dh)
    k_BTKDh = k_raw_BTKDh
    if cfg.positions == "rope":
      q_BTHDh = rope(q_BTHDh, pos_BT, cfg.rope_theta)
      k_BTKDh = rope(k_BTKDh, pos_BT, cfg.rope_theta)
    self.sow("intermediates", "q", q_BTHDh)
    self.sow("intermediates", "k", k_BTKDh)
    self.sow("intermediates", "v", v_BTKDh)

    # Without a cache (`kv=None`) the hook returns this chunk's keys and values; decoding, it
    # writes the chunk into the cache at `offset` and returns every slot.
    hook = dense_kv if self.kv_hook is None else self.kv_hook
    q_BTHX, k_BSKX, v_BSKY, kv, out_fn = hook(
        KVInputs(q_BTHDh, k_BTKDh, v_BTKDh, k_raw_BTKDh, pos_BT), kv, offset)

    # Grouped-query attention: each key/value head serves H / K query heads.
    k_BSHX = _repeat_heads(k_BSKX.astype(cfg.jnp_dtype), cfg.kv_groups)
    v_BSHY = _repeat_heads(v_BSKY.astype(cfg.jnp_dtype), cfg.kv_groups)
    fn = ATTENTION[cfg.attention]
    out_BTHY, aux = fn(q_BTHX, k_BSHX, v_BSHY, mask_BTS, scale=dh**-0.5,
                       **attention_options(fn, cfg, offset))
    self.sow("intermediates", "scores", aux["scores"])
    self.sow("intermediates", "weights", aux["weights"])
    out_BTHDh = checkpoint_name(out_fn(out_BTHY), "attn_out")
    return _project(self, "o", out_BTHDh.reshape(B, T, H * dh), cfg.d_model, _out_std(cfg)), kv


class FeedForward(nn.Module):
  """`act(X W_1) W_2`, or SwiGLU `(silu(X W_gate) ⊙ X W_1) W_2`."""

  cfg: Config

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    act = ACTIVATION_FNS[cfg.activation]
    self.sow("intermediates", "ffn_in", x_BTD)
    if cfg.activation == "swiglu":
      gate_BTF, up_BTF = _project_side_by_side(self, {"gate": cfg.d_ff, "1": cfg.d_ff}, x_BTD,
                                               cfg.init_std)
      h_BTF = act(gate_BTF) * up_BTF
    else:
      h_BTF = act(_project(self, "1", x_BTD, cfg.d_ff, cfg.init_std))
    self.sow("intermediates", "ffn_hidden", h_BTF)
    return _project(self, "2", h_BTF, cfg.d_model, _out_std(cfg))


class Block(nn.Module):
  """One layer: attention then feed-forward, each wrapped by norm and residual.

  Pre-norm:  `x += attn(norm_1(x))`;  `x += ffn(norm_2(x))`.
  Post-norm: `x = norm_1(x + attn(x))`;  `x = norm_2(x + ffn(x))`.
  With `residual=False` the `x +` is dropped.
  """

  cfg: Config
  kv_hook: KVHook | None = None

  def setup(self):
    self.norm_1 = Norm(self.cfg)
    self.attn = Attention(self.cfg, self.kv_hook)
    self.norm_2 = Norm(self.cfg)
    self.ffn = FeedForward(self.cfg)

  def _add(self, x, branch):
    return x + branch if self.cfg.residual else branch

  def attn_branch(self, x_BTD, pos_BT, mask_BTS):
    """The attention sub-layer without its residual: `attn(norm_1(x))` (pre-norm)."""
    x = x_BTD if self.cfg.norm_position == "post" else self.norm_1(x_BTD)
    return self.attn(x, pos_BT, mask_BTS)[0]

  def ffn_branch(self, x_BTD):
    """The feed-forward sub-layer without its residual: `ffn(norm_2(x))` (pre-norm)."""
    return self.ffn(x_BTD if self.cfg.norm_position == "post" else self.norm_2(x_BTD))

  def __call__(self, x_BTD, kv, ctx):
    """`ctx` is `(pos_BT, mask_BTS)` in a forward pass, `(pos_BT, mask_BTS, offset)` with a
    KV cache; left out, `offset` is the Python int 0, so the attention's fast paths apply."""
    pos_BT, mask_BTS, *cache_offset = ctx
    offset = cache_offset[0] if cache_offset else 0
    self.sow("intermediates", "resid_pre", x_BTD)
    if self.cfg.norm_position == "pre":
      a_BTD, kv = self.attn(self.norm_1(x_BTD), pos_BT, mask_BTS, kv, offset)
      x_BTD = self._add(x_BTD, a_BTD)
      self.sow("intermediates", "resid_mid", x_BTD)
      x_BTD = self._add(x_BTD, self.ffn(self.norm_2(x_BTD)))
    else:
      a_BTD, kv = self.attn(x_BTD, pos_BT, mask_BTS, kv, offset)
      x_BTD = self.norm_1(self._add(x_BTD, a_BTD))
      self.sow("intermediates", "resid_mid", x_BTD)
      x_BTD = self.norm_2(self._add(x_BTD, self.ffn(x_BTD)))
    self.sow("intermediates", "resid_post", x_BTD)
    return x_BTD, kv


class ScanBlock(Block):
  """`Block` as the layer scan's body (same parameters): its carry is `x_BTD`, or with a cache
  `(x_BTD, k_LBKSDh, v_LBKSDh)` and the layer index as the scanned input (`stacked_kv`)."""

  kv_hook: KVHook | None = stacked_kv

  def __call__(self, carry, l, ctx):
    if l is None:
      return super().__call__(carry, None, ctx)
    x_BTD, k_LBKSDh, v_LBKSDh = carry
    x_BTD, (k_LBKSDh, v_LBKSDh, _) = super().__call__(x_BTD, (k_LBKSDh, v_LBKSDh, l), ctx)
    return (x_BTD, k_LBKSDh, v_LBKSDh), None


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
    return h_BTD @ self.embedding.T.astype(self.cfg.jnp_dtype)


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
  """

  cfg: Config

  def setup(self):
    cfg = self.cfg
    self.embed = Embed(cfg, cfg.vocab_size)
    if cfg.positions == "learned":
      self.pos_embed = Embed(cfg, cfg.max_len)
    policy = (jax.checkpoint_policies.nothing_saveable if cfg.remat
              else jax.checkpoint_policies.save_only_these_names(*SAVED_FOR_BACKWARD))
    # Inside a scan the remat needs no CSE barrier (the loop body is not CSE'd with its copy).
    block = nn.remat(ScanBlock, policy=policy, prevent_cse=False)
    self.blocks = nn.scan(block, variable_axes={"params": 0, "intermediates": 0},
                          split_rngs={"params": True}, in_axes=(0, nn.broadcast),
                          length=cfg.n_layers)(cfg)
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
