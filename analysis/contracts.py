"""The contract every attention variant must pass, checked on a live model.

`check_attention` builds a small model whose `Config.attention` is the variant and checks,
each in the strongest form the arithmetic allows:

1. **causality by gradient**: `∂ logits_t / ∂ x_s = 0` exactly for every `s > t`, where `x`
   is the input embedding (`jax.jacrev`, through a random projection of the logits);
2. **suffix perturbation**: changing the tokens after position `p` leaves the logits of
   positions `< p` bit-identical;
3. **padding**: with left padding, the padded tokens move no real position's logits, neither
   by gradient (exactly zero) nor by perturbation (bit-identical). The comparison is between
   two sequences with the *same* padding layout and different padded tokens, at the real
   positions only. It does not ask that a padded sequence give the unpadded answer: the
   block-sparse variants (`bigbird`, `moba`) place blocks on slot indices, so left padding
   shifts their block boundaries relative to the real tokens and legitimately changes which
   keys a real query reads (right padding would not, but under a causal mask right padding
   is invisible to real tokens by causality alone and so tests nothing);
4. **decode = forward**: prefill half the sequence into a KV cache, decode the rest one
   token at a time, and match the full forward pass to `1e-5`.

(With `causal=False` only the padding check applies.) A violated property raises
`AssertionError` naming it; otherwise a small report of the measured sizes comes back.

Variants with options (`window`, `block_size`, `top_k_blocks`, ...) are checked with the
options of `cfg`. The default model uses blocks of 4 and, where a variant needs a window,
`window = 5`, so a 16-token check crosses block boundaries and the window edge
(`VARIANT_OPTIONS`); a given `cfg` without a window gets `window = 5` for `local`/`bigbird`.
"""


from __future__ import annotations

import contextlib
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import transformer

# The default model's block-sparse options: 4 blocks of 4 at T = 16, a window crossing blocks.
VARIANT_OPTIONS = {"block_size": 4, "top_k_blocks": 1, "n_global": 1, "n_random": 1}
DEFAULT_WINDOW = 5
WINDOWED = ("local", "bigbird")


@contextlib.contextmanager
def _registered(name_or_fn):
  """The registry name of `name_or_fn`; a bare function is registered for the duration."""
  if isinstance(name_or_fn, str):
    if name_or_fn not in transformer.ATTENTION:
      raise ValueError(f"check_attention: {name_or_fn!r} is not in transformer.ATTENTION. Fix: "
                       f"use one of {sorted(transformer.ATTENTION)} or pass the function itself.")
    yield name_or_fn
    return
  if not callable(name_or_fn):
    raise ValueError(f"check_attention: expected a registry name or a function, got "
                     f"{type(name_or_fn).__name__}.")
  name = f"_check_attention_{getattr(name_or_fn, '__name__', 'fn')}_{id(name_or_fn)}"
  transformer.ATTENTION[name] = name_or_fn
  try:
    yield name
  finally:
    del transformer.ATTENTION[name]


def _forward_from_embedding(cfg, params, tokens_BT, padding_mask_BT=None):
  """`delta_TD -> logits_TV`: the model with `delta` added to the token embeddings (batch 0)."""
  model = transformer.Transformer(cfg)

  def f(delta_TD):
    def add_delta(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if context.module.name == "embed" and context.method_name == "__call__":
        out = out + delta_TD[None].astype(out.dtype)
      return out

    with nn.intercept_methods(add_delta):
      return model.apply({"params": params}, tokens_BT, padding_mask=padding_mask_BT)[0]

  return f


def _gradient_blocks(f: Callable, T: int, D: int, V: int, key) -> np.ndarray:
  """`G[t, s] = max |∂(logits_t · R)/∂x_s|` for a random `R: (V, 4)`, via `jax.jacrev`."""
  proj_VR = jax.random.normal(key, (V, 4), jnp.float32)
  J_TRTD = jax.jit(jax.jacrev(lambda d: f(d) @ proj_VR))(jnp.zeros((T, D), jnp.float32))
  return np.asarray(jnp.abs(J_TRTD).max(axis=(1, 3)))


def check_attention(name_or_fn: str | Callable, *, causal: bool = True,
                    cfg: transformer.Config | None = None, seq_len: int = 16,
                    seed: int = 0) -> dict:
  """Checks that an attention variant is exactly causal, cache-consistent and padding-safe.

  .. math:: \\frac{\\partial\\, \\mathrm{logits}_t}{\\partial x_s} = 0 \\quad (s > t)

  Args:
    name_or_fn: an entry of `transformer.ATTENTION`, or a function with the registry's
      signature `fn(q, k, v, mask, *, scale) -> (out, {"scores", "weights"})` (registered
      under a temporary name while checked).
    causal: check the causal contract (gradient, suffix, decode and padding); False checks a
      bidirectional model for padding only.
    cfg: the model to check on (default: the `tiny` preset narrowed to `d_model=32`,
      `n_layers=2`, `init_std=0.1` so every path carries signal, with `VARIANT_OPTIONS`);
      `attention` and `causal` are set from the arguments, and a windowed variant without
      a window gets `DEFAULT_WINDOW`. Its other options (`qk_tied`, `block_size`, ...) are
      checked as given.
    seq_len: `T` of the checked sequences.
    seed: PRNG seed of the params and tokens.

  Returns:
    `{"attention", "causal", "max_future_grad", "prefix_max_change", "decode_max_abs_err",
    "padding_max_grad", "padding_max_change"}` (floats; None for checks that do not apply).

  Raises:
    AssertionError: naming the broken property and where it broke.

  Example:
    >>> from analysis.contracts import check_attention
    >>> check_attention("softmax")["max_future_grad"]
    0.0
  """
  with _registered(name_or_fn) as name:
    base = cfg or transformer.preset("tiny", d_model=32, n_layers=2, init_std=0.1, max_len=64,
                                     **VARIANT_OPTIONS)
    window = DEFAULT_WINDOW if name in WINDOWED and base.window is None else base.window
    cfg = base.replace(attention=name, causal=causal, window=window)
    T, D, V = seq_len, cfg.d_model, cfg.vocab_size
    if T < 4:
      raise ValueError(f"check_attention: {seq_len=} must be at least 4 (prefix, suffix, pad).")
    k_params, k_tok, k_suffix, k_proj, k_pad = jax.random.split(jax.random.key(seed), 5)
    params = transformer.init(cfg, k_params)
    tokens_BT = jax.random.randint(k_tok, (1, T), 0, V)
    # A different token at every later position (an offset in [1, V) never maps x to itself).
    other_BT = (tokens_BT + jax.random.randint(k_suffix, (1, T), 1, V)) % V
    forward = jax.jit(lambda tok, pad: transformer.Transformer(cfg).apply(
        {"params": params}, tok, padding_mask=pad))
    report = {"attention": name if isinstance(name_or_fn, str) else
              getattr(name_or_fn, "__name__", "fn"), "causal": causal,
              "max_future_grad": None, "prefix_max_change": None, "decode_max_abs_err": None}
    full_BTV = forward(tokens_BT, None)
    if not np.all(np.isfinite(np.asarray(full_BTV))):
      raise AssertionError(f"check_attention({report['attention']}): the forward pass is not "
                           "finite")

    if causal:
      G_TT = _gradient_blocks(_forward_from_embedding(cfg, params, tokens_BT), T, D, V, k_proj)
      future_TT = np.triu(np.ones((T, T), bool), 1)
      leak = float(np.where(future_TT, G_TT, 0).max())
      report["max_future_grad"] = leak
      if leak != 0:
        t, s = np.unravel_index(np.argmax(np.where(future_TT, G_TT, 0)), G_TT.shape)
        raise AssertionError(f"check_attention({report['attention']}): causality broken: "
                             f"d logits_t / d x_s = {leak:.3e} != 0 for a later input "
                             f"(t={t}, s={s}); every s > t must give exactly zero")

      p = T // 2
      mixed_BT = tokens_BT.at[:, p:].set(other_BT[:, p:])
      prefix = np.asarray(full_BTV[:, :p])
      changed = np.asarray(forward(mixed_BT, None)[:, :p])
      report["prefix_max_change"] = float(np.abs(prefix - changed).max())
      if not np.array_equal(prefix, changed):
        raise AssertionError(f"check_attention({report['attention']}): suffix perturbation "
                             f"moved the prefix: changing tokens {p}..{T - 1} changed logits of "
                             f"positions < {p} by up to {report['prefix_max_change']:.3e}; they "
                             "must be bit-identical")

    n_pad = T // 4
    pad_BT = jnp.arange(T)[None] >= n_pad  # left padding: the first n_pad slots are not real
    G_TT = _gradient_blocks(_forward_from_embedding(cfg, params, tokens_BT, pad_BT), T, D, V,
                            k_pad)
    report["padding_max_grad"] = float(G_TT[n_pad:, :n_pad].max())
    if report["padding_max_grad"] != 0:
      raise AssertionError(f"check_attention({report['attention']}): padding not respected: "
                           f"d logits_t / d x_pad = {report['padding_max_grad']:.3e} != 0 for "
                           "a real position t; padded inputs must not reach real positions")
    repadded_BT = tokens_BT.at[:, :n_pad].set(other_BT[:, :n_pad])
    real = np.asarray(forward(tokens_BT, pad_BT)[:, n_pad:])
    changed = np.asarray(forward(repadded_BT, pad_BT)[:, n_pad:])
    report["padding_max_change"] = float(np.abs(real - changed).max())
    if not np.array_equal(real, changed):
      raise AssertionError(f"check_attention({report['attention']}): padding not respected: "
                           f"changing the {n_pad} padded tokens moved real positions' logits by "
                           f"{report['padding_max_change']:.3e}; they must be bit-identical")

    if causal:
      err = float(jnp.abs(transformer.cached_logits(params, cfg, tokens_BT, p) - full_BTV).max())
      report["decode_max_abs_err"] = err
      if not err <= 1e-5:
        raise AssertionError(f"check_attention({report['attention']}): KV-cache decoding "
                             f"differs from the full forward pass by {err:.3e} > 1e-5 (prefill "
                             f"{p} tokens, then one at a time)")
    return report
