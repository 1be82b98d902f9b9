"""One layer of the model: norm, attention, feed-forward, and the block around them.

Every weight is a named matrix used as `x @ W` with `W: (d_in, d_out)`; there is no
`nn.Dense`. Matrices that read the same input are applied side by side,
`[Q | K | V] = X [W_Q | W_K | W_V]` (and `X [W_gate | W_1]`): one wider matmul, the matrices
still separate parameters. The weight products are tagged by name for the model's remat policy
(`transformer.model.SAVED_FOR_BACKWARD`).
"""

from __future__ import annotations

import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from transformer.attention import ATTENTION, attention_options, rope
from transformer.config import Config
from transformer.kvhook import KVHook, KVInputs, dense_kv, stacked_kv
from transformer.layout import matmul

ACTIVATION_FNS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "identity": lambda x: x,
    "swiglu": jax.nn.silu,  # the gate's non-linearity; the product with `x @ w_1` is in FFN
}


def _project(module: nn.Module, name: str, x, d_out: int, std: float):
  """`x @ w_{name} (+ b_{name})`: declares the weight `(d_in, d_out)` in `module`.

  The product is tagged `w_{name}` for the remat policy
  (`transformer.model.SAVED_FOR_BACKWARD`)."""
  cfg = module.cfg
  w = module.param(f"w_{name}", nn.initializers.normal(std), (x.shape[-1], d_out),
                   cfg.jnp_param_dtype)
  y = checkpoint_name(matmul(x, w.astype(cfg.jnp_dtype)), f"w_{name}")
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
  y = checkpoint_name(matmul(x, w), "w_" + "".join(widths))
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


def _repeat_heads(x_BSKX, groups: int):
  """`(B, S, K·groups, X)`, each KV head once per query head it serves; repeated heads before
  slots, a cache's layout, so that XLA reads a cache without transposing it."""
  return x_BSKX if groups == 1 else jnp.repeat(
      x_BSKX.transpose(0, 2, 1, 3), groups, axis=1).transpose(0, 2, 1, 3)


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
