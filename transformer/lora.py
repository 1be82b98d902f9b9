"""LoRA: a low-rank update `ΔW = (alpha / R) A B` on chosen block matrices, base frozen.

For each target matrix `W: (L, D_in, D_out)` (stacked over layers like every block weight) the
adapter is `A: (L, D_in, R)` (random) and `B: (L, R, D_out)` (zeros), so at initialisation
`ΔW = 0` and the adapted model is the base model bit for bit. Training updates only `A`, `B`;
`merge` writes `W + (alpha / R) A B` into a copy of the params.

Example:
  >>> import jax, transformer
  >>> from transformer import lora
  >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
  >>> adapters = lora.init(params, 4, jax.random.key(1))
  >>> adapters["w_q"]["A"].shape, adapters["w_q"]["B"].shape
  ((2, 64, 4), (2, 4, 64))
  >>> merged = lora.merge(params, adapters, alpha=8.0)

References:
  Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (2021).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from transformer.model import is_key, key_order_error, param_tree

# Where each target lives in `params["blocks"]`.
_SUBLAYER = {"w_q": "attn", "w_k": "attn", "w_v": "attn", "w_o": "attn",
             "w_1": "ffn", "w_2": "ffn", "w_gate": "ffn"}
# Every hidden (block) matrix; `w_gate` is skipped when the model has none.
ALL_HIDDEN = ("w_q", "w_k", "w_v", "w_o", "w_gate", "w_1", "w_2")


def _targets(params, targets: Sequence[str]) -> list[str]:
  blocks = param_tree(params)["blocks"]
  names = []
  for name in targets:
    if name not in _SUBLAYER:
      raise ValueError(f"lora: target {name!r} is not a block matrix. Fix: use names from "
                       f"{ALL_HIDDEN}.")
    if name in blocks[_SUBLAYER[name]]:
      names.append(name)
    elif name != "w_gate" or tuple(targets) != ALL_HIDDEN:
      raise ValueError(f"lora: target {name!r} is absent from these params (e.g. w_gate needs "
                       "activation='swiglu'). Fix: drop it from targets.")
  return names


def init(params, rank: int, key: jax.Array,
         targets: Sequence[str] = ("w_q", "w_v")) -> dict[str, dict[str, jax.Array]]:
  """Adapters `{name: {"A": (L, D_in, R), "B": (L, R, D_out)}}` with `A ~ N(0, 1/D_in)`, `B = 0`.

  Args:
    params: the base model's params (bare or `{"params": ...}`).
    rank: `R`, at least 1 and at most `min(D_in, D_out)`.
    key: PRNG key for `A` (last, as everywhere in the library).
    targets: block matrix names (`w_q`, `w_k`, `w_v`, `w_o`, `w_1`, `w_2`, `w_gate`), or
      `lora.ALL_HIDDEN` for every hidden matrix the model has.

  Returns:
    The adapters; `A` and `B` take the dtype of their base matrix.

  Raises:
    TypeError: the old order `init(key, params, rank)`; the message gives the new one.

  Example:
    >>> import jax, transformer
    >>> from transformer import lora
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> sorted(lora.init(params, 2, jax.random.key(1), lora.ALL_HIDDEN))
    ['w_1', 'w_2', 'w_k', 'w_o', 'w_q', 'w_v']
  """
  if is_key(params):
    raise key_order_error("lora.init(params, rank, key)")
  blocks = param_tree(params)["blocks"]
  names = _targets(params, targets)
  adapters = {}
  for name, k in zip(names, jax.random.split(key, max(len(names), 1)), strict=False):
    w_LIO = blocks[_SUBLAYER[name]][name]
    L, d_in, d_out = w_LIO.shape
    if not isinstance(rank, int) or not 1 <= rank <= min(d_in, d_out):
      raise ValueError(f"lora.init: rank={rank!r} must be an integer in [1, {min(d_in, d_out)}] "
                       f"for {name} of shape {w_LIO.shape}. Fix: choose a smaller rank.")
    a = jax.random.normal(k, (L, d_in, rank), jnp.float32) * d_in**-0.5
    adapters[name] = {"A": a.astype(w_LIO.dtype), "B": jnp.zeros((L, rank, d_out), w_LIO.dtype)}
  return adapters


def delta(adapters, alpha: float) -> dict[str, jax.Array]:
  """The updates `ΔW = (alpha / R) A B`, one `(L, D_in, D_out)` array per target."""
  out = {}
  for name, ab in adapters.items():
    rank = ab["A"].shape[-1]
    out[name] = (alpha / rank) * jnp.einsum("lir,lro->lio", ab["A"], ab["B"])
  return out


def merge(params, adapters, alpha: float):
  """A copy of `params` with every target `W` replaced by `W + (alpha / R) A B`.

  Args:
    params: the base params (bare or `{"params": ...}`; the result has the same form).
    adapters: from `init` (or trained).
    alpha: LoRA's scale; the update is divided by the rank so that changing `R` keeps the
      update's size.

  Returns:
    The merged params. With `B = 0` every leaf equals the base leaf bit for bit.

  Example:
    >>> import jax, numpy as np, transformer
    >>> from transformer import lora
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> merged = lora.merge(params, lora.init(params, 4, jax.random.key(1)), alpha=8.0)
    >>> bool(np.array_equal(merged["blocks"]["attn"]["w_q"], params["blocks"]["attn"]["w_q"]))
    True
  """
  wrapped = "params" in params
  tree = param_tree(params)
  blocks = {k: dict(v) if isinstance(v, dict) else v for k, v in tree["blocks"].items()}
  for name, d in delta(adapters, alpha).items():
    w = blocks[_SUBLAYER[name]][name]
    blocks[_SUBLAYER[name]][name] = (w + d.astype(w.dtype)).astype(w.dtype)
  merged = {**tree, "blocks": blocks}
  return {"params": merged} if wrapped else merged


def params_fn(base_params, alpha: float) -> Callable[[Any], Any]:
  """`f(adapters) -> merged params`: the map from trained leaves to model params.

  Only the adapters are arguments, so gradients reach only them; the base is a constant
  closed over by `f` (frozen). This is the `params_fn` of `experiments.train.sweep.train_many`.

  Example:
    >>> import jax, transformer
    >>> from transformer import lora
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> f = lora.params_fn(params, alpha=8.0)
    >>> logits = transformer.Transformer(cfg).apply(
    ...     {"params": f(lora.init(params, 4, jax.random.key(1)))}, jax.numpy.zeros((1, 4), int))
  """
  return lambda adapters: merge(base_params, adapters, alpha)
