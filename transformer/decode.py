"""Autoregressive decoding with a KV cache: prefill, one-token steps, sampling.

The cache holds every layer's keys and values for `S` slots (`KVCache`); `prefill`
writes the prompt, `decode_step` appends one token, and `generate` loops `decode_step`
inside `lax.scan`, so the whole generation is one compiled program.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from transformer.config import Config
from transformer.model import KVCache, Transformer, param_tree


def init_cache(cfg: Config, batch: int, length: int | None = None, dtype=None) -> KVCache:
  """An empty cache of `length` slots (default `cfg.max_len`)."""
  S = cfg.max_len if length is None else length
  if S > cfg.max_len and cfg.positions == "learned":
    raise ValueError(f"init_cache: length={S} exceeds max_len={cfg.max_len} of the learned "
                     "positions. Fix: use a shorter length or a config with a larger max_len.")
  shape = (cfg.n_layers, batch, S, cfg.n_kv_heads, cfg.d_head)
  dtype = cfg.jnp_dtype if dtype is None else dtype
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                 jnp.zeros((batch, S), bool), jnp.zeros((), jnp.int32))


@functools.partial(jax.jit, static_argnames="cfg")
def prefill(params, cfg: Config, prompt_BT: jax.Array, cache: KVCache,
            padding_mask=None) -> tuple[jax.Array, KVCache]:
  """Run the prompt through the model, writing its keys/values; returns `(logits_BTV, cache)`."""
  return Transformer(cfg).apply({"params": param_tree(params)}, prompt_BT, cache=cache,
                                padding_mask=padding_mask)


@functools.partial(jax.jit, static_argnames="cfg")
def decode_step(params, cfg: Config, token_B: jax.Array, cache: KVCache):
  """Append one token per sequence; returns `(logits_BV, cache)`."""
  logits_B1V, cache = Transformer(cfg).apply({"params": param_tree(params)}, token_B[:, None],
                                             cache=cache)
  return logits_B1V[:, 0], cache


def sample(rng: jax.Array, logits_BV: jax.Array, temperature: float = 1.0,
           top_k: int | None = None) -> jax.Array:
  """Draw token ids from `softmax(logits / temperature)`, restricted to the `top_k` largest.

  `temperature=0` is greedy decoding (argmax).
  """
  if temperature == 0:
    return jnp.argmax(logits_BV, axis=-1)
  logits_BV = logits_BV / temperature
  if top_k is not None:
    kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
    logits_BV = jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)
  return jax.random.categorical(rng, logits_BV, axis=-1)


@functools.partial(jax.jit, static_argnames=("cfg", "steps", "temperature", "top_k"))
def generate(params, cfg: Config, prompt_BT: jax.Array, steps: int, *, rng: jax.Array,
             temperature: float = 1.0, top_k: int | None = None) -> jax.Array:
  """Continue `prompt_BT` by `steps` sampled tokens; returns `(B, T + steps)` token ids.

  Example:
    >>> cfg = preset("tiny"); params = init(cfg, jax.random.key(0))
    >>> out = generate(params, cfg, jnp.array([[72, 105]]), 5, rng=jax.random.key(1))
  """
  B, T = prompt_BT.shape
  if T + steps > cfg.max_len:
    raise ValueError(f"generate: prompt length {T} + steps {steps} exceeds max_len="
                     f"{cfg.max_len}. Fix: fewer steps or a config with a larger max_len.")
  cache = init_cache(cfg, B, T + steps)
  logits_BTV, cache = prefill(params, cfg, prompt_BT, cache)

  def step(carry, rng_t):
    logits_BV, cache = carry
    token_B = sample(rng_t, logits_BV, temperature, top_k).astype(prompt_BT.dtype)
    logits_BV, cache = decode_step(params, cfg, token_B, cache)
    return (logits_BV, cache), token_B

  _, new_SB = jax.lax.scan(step, (logits_BTV[:, -1], cache), jax.random.split(rng, steps))
  return jnp.concatenate([prompt_BT, new_SB.T], axis=1)
