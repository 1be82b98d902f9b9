"""Autoregressive decoding with a KV cache: prefill, one-token steps, sampling.

The cache holds every layer's keys and values for `S` slots (`KVCache`); `prefill`
writes the prompt, `decode_step` appends one token, and `generate` loops `decode_step`
inside `lax.scan`, so the whole generation is one compiled program. `prefill` and
`decode_step` donate the cache they are given and write into it in place.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import Config
from transformer.model import KVCache, Transformer, is_key, key_order_error, param_tree


def init_cache(cfg: Config, batch: int, length: int | None = None, dtype=None) -> KVCache:
  """An empty cache of `length` slots (default `cfg.max_len`)."""
  S = cfg.max_len if length is None else length
  if S > cfg.max_len and cfg.positions == "learned":
    raise ValueError(f"init_cache: length={S} exceeds max_len={cfg.max_len} of the learned "
                     "positions. Fix: use a shorter length or a config with a larger max_len.")
  shape = (cfg.n_layers, batch, cfg.n_kv_heads, S, cfg.d_head)
  dtype = cfg.jnp_dtype if dtype is None else dtype
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                 jnp.zeros((batch, S), bool), jnp.zeros((), jnp.int32))


def cache_nbytes(cache) -> int:
  """Bytes of every array of a cache, from their shapes and dtypes: keys, values, validity
  flags and index of a `KVCache` or a `transformer.latent.LatentCache` (or of its
  `jax.eval_shape`, nothing allocated).

  Example:
    >>> import transformer
    >>> cfg = transformer.preset("tiny")
    >>> cache = transformer.init_cache(cfg, batch=1, length=8)
    >>> cache_nbytes(cache) == cache.k.nbytes + cache.v.nbytes + 8 + 4  # valid (bool), index
    True
  """
  return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(cache))


def bytes_per_token(cache) -> float:
  """Bytes a cache allocates per cached token: `cache_nbytes(cache) / (B·S)`, each of its `B`
  sequences' `S` slots a token.

  For a `KVCache` that is `2·L·K·Dh·itemsize + 1 + 4/(B·S)`: a key and a value per layer and KV
  head, its validity flag, and the shared index.
  """
  B, S = cache.valid.shape
  return cache_nbytes(cache) / (B * S)


@functools.partial(jax.jit, static_argnames="cfg", donate_argnames="cache")
def prefill(params, cfg: Config, prompt_BT: jax.Array, cache: KVCache,
            padding_mask=None) -> tuple[jax.Array, KVCache]:
  """Run the prompt through the model, writing its keys/values; returns `(logits_BTV, cache)`.

  The cache passed in is donated (its buffers become the returned cache's, written in place):
  use the returned one."""
  return Transformer(cfg).apply({"params": param_tree(params)}, prompt_BT, cache=cache,
                                padding_mask=padding_mask)


@functools.partial(jax.jit, static_argnames="cfg", donate_argnames="cache")
def decode_step(params, cfg: Config, token_B: jax.Array, cache: KVCache):
  """Append one token per sequence; returns `(logits_BV, cache)`.

  The cache passed in is donated: the token's keys and values are written into its buffers in
  place, and a step reads the cache once instead of also copying it whole. Use the returned
  cache; the one passed in is deleted."""
  logits_B1V, cache = Transformer(cfg).apply({"params": param_tree(params)}, token_B[:, None],
                                             cache=cache)
  return logits_B1V[:, 0], cache


def cached_logits(params, cfg: Config, tokens_BT: jax.Array, n_prefill: int) -> jax.Array:
  """The logits of every position of `tokens_BT`, computed through the KV cache: prefill the
  first `n_prefill` tokens, then one `decode_step` per remaining token.

  They must equal the full forward pass; the demo and `analysis.check_attention` check it.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jnp.arange(8)[None]
    >>> full = transformer.Transformer(cfg).apply({"params": params}, tokens)
    >>> bool(jnp.abs(transformer.cached_logits(params, cfg, tokens, 3) - full).max() < 1e-5)
    True
  """
  B, T = tokens_BT.shape
  if not 1 <= n_prefill <= T:
    raise ValueError(f"cached_logits: n_prefill={n_prefill} must be in [1, T={T}]")
  cache = init_cache(cfg, B, T)
  logits_BPV, cache = prefill(params, cfg, tokens_BT[:, :n_prefill], cache)
  rows = [logits_BPV]
  for t in range(n_prefill, T):
    logits_BV, cache = decode_step(params, cfg, tokens_BT[:, t], cache)
    rows.append(logits_BV[:, None])
  return jnp.concatenate(rows, 1)


def _check_sampling(temperature: float, top_k: int | None) -> None:
  if temperature < 0:
    raise ValueError(f"temperature={temperature} is negative. Fix: pass temperature >= 0 "
                     "(0 is greedy decoding).")
  if top_k is not None and top_k <= 0:
    raise ValueError(f"top_k={top_k} must be positive. Fix: pass top_k >= 1, or None to "
                     "sample from the whole vocabulary.")


def sample(logits_BV: jax.Array, key: jax.Array | None, temperature: float = 1.0,
           top_k: int | None = None) -> jax.Array:
  """Draw token ids from `softmax(logits / temperature)`, restricted to the `top_k` largest.

  `temperature=0` is greedy decoding (argmax) and needs no key (`key=None`).

  Args:
    logits_BV: the logits.
    key: a PRNG key (last of the required arguments, as everywhere), or `None` when greedy.
    temperature: softmax temperature, `>= 0`.
    top_k: sample among the `top_k` largest (`None`: all).

  Raises:
    ValueError: `temperature < 0`, `top_k <= 0`, or no `key` for `temperature > 0`.
    TypeError: the old order `sample(rng, logits_BV, ...)`; the message gives the new one.

  Example:
    >>> import jax.numpy as jnp
    >>> from transformer import sample
    >>> sample(jnp.array([[0.1, 2.0, -1.0]]), None, temperature=0).tolist()
    [1]
  """
  if logits_BV is None or is_key(logits_BV) or (key is not None and not is_key(key)):
    raise key_order_error("transformer.sample(logits_BV, key, temperature, top_k)")
  _check_sampling(temperature, top_k)
  if temperature == 0:
    return jnp.argmax(logits_BV, axis=-1)
  if key is None:
    raise ValueError(f"key=None with temperature={temperature}: sampling needs a key. Fix: "
                     "pass key=jax.random.key(seed), or temperature=0 for greedy decoding.")
  logits_BV = logits_BV / temperature
  if top_k is not None:
    kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
    logits_BV = jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)
  return jax.random.categorical(key, logits_BV, axis=-1)


def generate(params, cfg: Config, prompt_BT: jax.Array, max_new_tokens: int, *,
             key: jax.Array | None = None, temperature: float = 1.0,
             top_k: int | None = None, rng=None) -> jax.Array:
  """Continue `prompt_BT` by `max_new_tokens` sampled tokens; returns `(B, T + max_new_tokens)`.

  One compiled program: the prompt is prefilled into a `KVCache`, then `lax.scan` runs
  `decode_step` and `sample` once per new token.

  Args:
    params: the model's params.
    cfg: its config.
    prompt_BT: int token ids.
    max_new_tokens: tokens to append.
    key: a PRNG key (keyword: it is optional); may be `None` when `temperature=0` (greedy).
    temperature: softmax temperature, `>= 0`.
    top_k: sample among the `top_k` most likely tokens (`None`: all).
    rng: the old name of `key`; passing it raises a `TypeError` that names `key=`.

  Raises:
    ValueError: a bad `temperature`, `top_k`, `max_new_tokens`, a missing `key`, or a
      request longer than `cfg.max_len`.

  Example:
    >>> import jax, jax.numpy as jnp, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> out = transformer.generate(params, cfg, jnp.array([[72, 105]]), 5, temperature=0)
    >>> out.shape
    (1, 7)
  """
  if rng is not None:
    raise TypeError("generate: rng= is now key= (a PRNG key is named `key` throughout "
                    "transformer, analysis and optim). Fix: generate(..., key=jax.random.key(0)).")
  _check_sampling(temperature, top_k)
  if max_new_tokens < 1:
    raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1.")
  if temperature > 0 and key is None:
    raise ValueError(f"key=None with temperature={temperature}: sampling needs a key. Fix: "
                     "pass key=jax.random.key(seed), or temperature=0 for greedy decoding.")
  T = prompt_BT.shape[1]
  if T + max_new_tokens > cfg.max_len:
    raise ValueError(f"generate: prompt length {T} + max_new_tokens {max_new_tokens} exceeds "
                     f"max_len={cfg.max_len}. Fix: fewer new tokens, a shorter prompt, or a "
                     "config with a larger max_len.")
  if key is None:
    key = jax.random.key(0)  # unused by greedy decoding; keeps one compiled signature
  return _generate(params, cfg, prompt_BT, max_new_tokens, key, temperature=temperature,
                   top_k=top_k)


@functools.partial(jax.jit, static_argnames=("cfg", "max_new_tokens", "temperature", "top_k"))
def _generate(params, cfg: Config, prompt_BT: jax.Array, max_new_tokens: int, key: jax.Array, *,
              temperature: float, top_k: int | None) -> jax.Array:
  B, T = prompt_BT.shape
  cache = init_cache(cfg, B, T + max_new_tokens)
  logits_BTV, cache = prefill(params, cfg, prompt_BT, cache)

  def step(carry, key_t):
    logits_BV, cache = carry
    token_B = sample(logits_BV, key_t, temperature, top_k).astype(prompt_BT.dtype)
    logits_BV, cache = decode_step(params, cfg, token_B, cache)
    return (logits_BV, cache), token_B

  keys = jax.random.split(key, max_new_tokens)
  _, new_tokens = jax.lax.scan(step, (logits_BTV[:, -1], cache), keys)
  return jnp.concatenate([prompt_BT, new_tokens.T], axis=1)
