"""Model configuration: one frozen dataclass and named presets.

A `Config` is hashable, so it can be a static argument of `jax.jit`. Every field is
validated at construction; a bad value raises `ValueError` naming the field and the fix.
Derived sizes (`n_kv_heads`, `d_head`, `d_ff`) default to `None` and are resolved in
`__post_init__`, so a constructed config always holds concrete integers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax.numpy as jnp

from transformer.attention import ATTENTION

Norm = Literal["layernorm", "rmsnorm", "none"]
NormPosition = Literal["pre", "post"]
Activation = Literal["gelu", "gelu_tanh", "relu", "swiglu", "identity"]
Positions = Literal["learned", "rope", "none"]

NORMS = ("layernorm", "rmsnorm", "none")
NORM_POSITIONS = ("pre", "post")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "swiglu", "identity")
POSITIONS = ("learned", "rope", "none")
DTYPES = ("float32", "bfloat16", "float16", "float64")


def _fail(field: str, value: Any, why: str, fix: str) -> None:
  raise ValueError(f"Config.{field}={value!r} is invalid: {why}. Fix: {fix}.")


@dataclasses.dataclass(frozen=True)
class Config:
  """Hyper-parameters of a decoder-only transformer with explicit weight matrices.

  Attributes:
    vocab_size: number of token ids `V` (rows of the embedding matrix `E`).
    d_model: residual width `D`.
    n_layers: number of blocks `L` (stacked on a leading axis of every block weight).
    n_heads: query heads `H`.
    n_kv_heads: key/value heads `K` (GQA when `1 < K < H`, MQA when 1); default `H`.
    d_head: per-head width `Dh`; default `d_model // n_heads`.
    d_ff: feed-forward hidden width `F`; default `4 * d_model`.
    max_len: longest sequence (rows of the learned position matrix, KV-cache length).
    norm: `layernorm`, `rmsnorm` or `none`.
    norm_position: `pre` (GPT-2, Llama) or `post` (the original Transformer).
    activation: `gelu` (exact), `gelu_tanh`, `relu`, `swiglu` (adds `w_gate`), `identity`.
    positions: `learned` (adds `pos_embed/embedding`), `rope`, or `none`.
    rope_theta: RoPE base frequency.
    tie_embeddings: if True there is no `w_out`; logits are `h @ E.T`.
    use_bias: biases on projections, feed-forward and LayerNorm.
    residual: if False, each block replaces the stream instead of adding to it.
    causal: causal (True) or bidirectional (False) attention mask.
    attention: name of the score/mixing function in `transformer.ATTENTION`.
    window: sliding-window width `w` (query i sees keys j with i - w < j <= i); None = full.
      Required by `local` and `bigbird`, refused by `linear`.
    qk_tied: keys use the query projection (`w_k` absent, `K = X W_Q`), so the score kernel
      `exp(x W Wᵀ yᵀ / sqrt(dh))` is PSD by construction (RoPE keeps it: `R_t W x` is one
      feature map of token and position). Needs `n_kv_heads == n_heads`.
    block_size: positions per block of the block-sparse variants (`local`, `bigbird`, `moba`).
    n_global: `bigbird`'s leading global tokens.
    n_random: `bigbird`'s random earlier key blocks per query block.
    top_k_blocks: past blocks each query reads in `moba`.
    param_dtype: storage dtype of the parameters.
    dtype: compute dtype of the matmuls (`bfloat16` works); scores and norms are float32.
    norm_eps: epsilon of the norms.
    init_std: standard deviation of the normal initializer of every matrix.
    init_residual_scale: divide the init of `w_o` and `w_2` by sqrt(2 L) (GPT-2).
    remat: the backward pass recomputes each block from its input alone (least memory). When
      False it keeps the block's matmul outputs and recomputes only the element-wise work and
      the scores (`transformer.model.SAVED_FOR_BACKWARD`).
  """

  vocab_size: int = 256
  d_model: int = 64
  n_layers: int = 2
  n_heads: int = 4
  n_kv_heads: int | None = None
  d_head: int | None = None
  d_ff: int | None = None
  max_len: int = 256
  norm: Norm = "layernorm"
  norm_position: NormPosition = "pre"
  activation: Activation = "gelu"
  positions: Positions = "learned"
  rope_theta: float = 10_000.0
  tie_embeddings: bool = True
  use_bias: bool = True
  residual: bool = True
  causal: bool = True
  attention: str = "softmax"
  window: int | None = None
  qk_tied: bool = False
  block_size: int = 32
  n_global: int = 1
  n_random: int = 1
  top_k_blocks: int = 2
  param_dtype: str = "float32"
  dtype: str = "float32"
  norm_eps: float = 1e-5
  init_std: float = 0.02
  init_residual_scale: bool = True
  remat: bool = False

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        _fail(name, value, "it must be a positive integer", f"pass e.g. {name}=2")
    if self.n_kv_heads is None:
      object.__setattr__(self, "n_kv_heads", self.n_heads)
    if self.d_head is None:
      if self.d_model % self.n_heads:
        _fail("d_head", None, f"it defaults to d_model // n_heads but d_model={self.d_model}"
              f" is not divisible by n_heads={self.n_heads}",
              "pass d_head explicitly or choose n_heads dividing d_model")
      object.__setattr__(self, "d_head", self.d_model // self.n_heads)
    if self.d_ff is None:
      object.__setattr__(self, "d_ff", 4 * self.d_model)
    for name in ("n_kv_heads", "d_head", "d_ff"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        _fail(name, value, "it must be a positive integer", f"pass e.g. {name}=16 or leave it None")
    if self.n_heads % self.n_kv_heads:
      _fail("n_kv_heads", self.n_kv_heads, f"n_heads={self.n_heads} must be a multiple of it",
            "use a divisor of n_heads (n_heads for MHA, 1 for MQA)")
    choices = {"norm": NORMS, "norm_position": NORM_POSITIONS, "activation": ACTIVATIONS,
               "positions": POSITIONS, "param_dtype": DTYPES, "dtype": DTYPES}
    for name, allowed in choices.items():
      if getattr(self, name) not in allowed:
        _fail(name, getattr(self, name), "unknown value", f"use one of {allowed}")
    if self.attention not in ATTENTION:
      _fail("attention", self.attention, "no such attention variant",
            f"use one of {sorted(ATTENTION)} or register yours in transformer.ATTENTION")
    if self.positions == "rope" and self.d_head % 2:
      _fail("d_head", self.d_head, "RoPE rotates pairs of features, so d_head must be even",
            "choose an even d_head or positions='learned'")
    if not self.rope_theta > 0:
      _fail("rope_theta", self.rope_theta, "it must be positive", "use e.g. 10000.0")
    if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
      _fail("window", self.window, "the sliding window must be a positive integer",
            "pass window=None for full attention or e.g. window=64")
    self._check_attention()
    if not self.norm_eps > 0:
      _fail("norm_eps", self.norm_eps, "it must be positive", "use e.g. 1e-5")
    if not self.init_std > 0:
      _fail("init_std", self.init_std, "it must be positive", "use e.g. 0.02")
    if self.norm_position == "post" and self.norm == "none":
      _fail("norm_position", self.norm_position, "post-norm needs a norm",
            "set norm='layernorm' or norm_position='pre'")

  def _check_attention(self):
    """The attention variant's own fields, and the combinations it cannot serve."""
    for name, low in (("block_size", 1), ("n_global", 0), ("n_random", 0), ("top_k_blocks", 1)):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < low:
        _fail(name, value, f"it must be an integer >= {low}", f"pass e.g. {name}={max(low, 2)}")
    if not isinstance(self.qk_tied, bool):
      _fail("qk_tied", self.qk_tied, "it must be a bool", "pass qk_tied=True or False")
    if self.qk_tied and self.n_kv_heads != self.n_heads:
      _fail("qk_tied", self.qk_tied, f"tied keys reuse w_q, which has n_heads={self.n_heads} "
            f"heads, but n_kv_heads={self.n_kv_heads}", "set n_kv_heads=None (= n_heads)")
    if self.attention in ("local", "bigbird") and self.window is None:
      _fail("window", None, f"attention={self.attention!r} is a sliding window",
            "pass window=w, e.g. window=32")
    if self.attention == "linear" and self.window is not None:
      _fail("window", self.window, "linear attention keeps running sums over the whole "
            "prefix and has no window", "pass window=None or attention='local'")
    if self.attention in ("local", "bigbird", "moba") and not self.causal:
      _fail("causal", self.causal, f"attention={self.attention!r} is a causal block pattern",
            "set causal=True or attention='softmax'")

  # Derived quantities, named as in the preface.
  @property
  def kv_groups(self) -> int:
    """Query heads per key/value head (`H / K`)."""
    return self.n_heads // self.n_kv_heads

  @property
  def jnp_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def jnp_param_dtype(self):
    return jnp.dtype(self.param_dtype)

  def replace(self, **changes) -> Config:
    """A copy with `changes` applied (re-validated).

    A derived size that still equals its default (`n_kv_heads == n_heads`,
    `d_head == d_model // n_heads`, `d_ff == 4 * d_model`) is derived again unless it is
    itself in `changes`, so `cfg.replace(d_model=128)` also updates `d_head` and `d_ff`.
    """
    derived = {"n_kv_heads": self.n_heads, "d_head": self.d_model // self.n_heads,
               "d_ff": 4 * self.d_model}
    for name, default in derived.items():
      if name not in changes and getattr(self, name) == default:
        changes[name] = None
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def gpt2_config(*, vocab_size=50257, d_model=768, n_layers=12, n_heads=12, max_len=1024,
                **overrides) -> Config:
  """GPT-2 family: pre-LayerNorm, tanh-GELU, learned positions, tied output, biases."""
  base = dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
              max_len=max_len, d_ff=4 * d_model, norm="layernorm", norm_position="pre",
              activation="gelu_tanh", positions="learned", tie_embeddings=True,
              use_bias=True, norm_eps=1e-5)
  return Config(**{**base, **overrides})


def llama_config(*, vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=None,
                 d_ff=11008, max_len=4096, rope_theta=10_000.0, norm_eps=1e-5,
                 tie_embeddings=False, **overrides) -> Config:
  """Llama family: pre-RMSNorm, SwiGLU, RoPE, grouped-query attention, untied output."""
  base = dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
              n_kv_heads=n_kv_heads, d_ff=d_ff, max_len=max_len, norm="rmsnorm",
              norm_position="pre", activation="swiglu", positions="rope",
              rope_theta=rope_theta, tie_embeddings=tie_embeddings, use_bias=False,
              norm_eps=norm_eps)
  return Config(**{**base, **overrides})


PRESETS: dict[str, Config] = {
    "tiny": Config(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_len=256,
                           activation="gelu_tanh"),
    "gpt2-small": gpt2_config(),
    "gpt2-medium": gpt2_config(d_model=1024, n_layers=24, n_heads=16),
    "llama-tiny": llama_config(vocab_size=256, d_model=64, n_layers=2, n_heads=4,
                                       n_kv_heads=2, d_ff=176, max_len=256),
    "llama-3-8b": llama_config(vocab_size=128256, d_model=4096, n_layers=32,
                                       n_heads=32, n_kv_heads=8, d_ff=14336, max_len=8192,
                                       rope_theta=500_000.0),
}


def preset(name: str, **overrides) -> Config:
  """The named preset, with `overrides` applied (and validated).

  Example:
    >>> import transformer
    >>> transformer.preset("tiny", n_layers=4).n_layers
    4
  """
  if name not in PRESETS:
    raise ValueError(f"unknown preset {name!r}. Fix: use one of {sorted(PRESETS)}.")
  return PRESETS[name].replace(**overrides)
