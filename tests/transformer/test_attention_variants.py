"""Attention variants against float64 numpy references, their kernel properties, causality,
decode = forward, the receptive field of a window, and the MoBA gate's causality.

Compilation is what these tests cost: every attention call and Jacobian runs under one `jit`
(op by op, each primitive of each shape would compile on its own), and model parameters are
drawn by numpy (`random_params`) rather than by compiling each config's initializer.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer as tr
from tests.conftest import random_params
from transformer.attention import (
    ATTENTION,
    bigbird_attention,
    linear_attention,
    linear_quadratic,
    local_attention,
    make_mask,
    moba_attention,
    rbf_attention,
    softmax_attention,
)
from transformer.decode import decode_step, init_cache, prefill
from transformer.sparse_attention import _random_blocks

OPTS = {
    "softmax": {}, "rbf": {}, "linear": {},
    "local": dict(window=3, block_size=4),
    "bigbird": dict(window=3, block_size=4, n_global=2, n_random=2),
    "moba": dict(block_size=4, top_k_blocks=2),
}


def _qkv(seed, B=2, T=23, H=2, Dh=4):
  rng = np.random.default_rng(seed)
  return tuple(rng.normal(size=(B, T, H, Dh)) for _ in range(3))


def _np_attention(logits, allowed, v):
  """Reference: row softmax of `logits` (B, H, T, S) over `allowed`, then mix `v`.

  A row with no allowed key (a padded query) gets zero weights: the reference never forms
  `-inf - (-inf)` or `0 / 0`, and `_check` skips those rows."""
  allowed = np.broadcast_to(allowed, logits.shape)
  top = np.max(logits, axis=-1, keepdims=True, where=allowed, initial=-np.inf)
  a = np.where(allowed, np.exp(np.where(allowed, logits - np.where(np.isfinite(top), top, 0), 0)),
               0.0)
  total = a.sum(-1, keepdims=True)
  a = a / np.where(total > 0, total, 1.0)
  return np.einsum("bhts,bshd->bthd", a, v), a


def _padded_mask(B, T, n_pad=3):
  valid = np.ones((B, T), bool)
  valid[-1, :n_pad] = False  # the last sequence is left-padded
  pos = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
  mask = jax.jit(make_mask, static_argnames="causal")(pos, pos, causal=True, k_valid_BS=valid)
  return np.asarray(mask), valid


def _check(out, want, valid, atol=1e-5):
  """Compare at real query positions (a padded query has no keys to read)."""
  out = np.asarray(out)
  for b in range(out.shape[0]):
    np.testing.assert_allclose(out[b, valid[b]], want[b, valid[b]], atol=atol)


def _f32(*xs):
  return tuple(jax.device_put(np.asarray(x, np.float32)) for x in xs)


def _jit(fn, **options):
  """`fn(q, k, v, mask)` with its keyword options fixed, compiled once; its outputs as numpy
  arrays (an index into a jax array compiles on its own)."""
  jitted = jax.jit(functools.partial(fn, **options))
  return lambda *args: jax.tree.map(np.asarray, jitted(*args))


def test_rbf_matches_numpy():
  q, k, v = _qkv(0)
  B, T, H, Dh = q.shape
  mask, valid = _padded_mask(B, T)
  out, aux = _jit(rbf_attention, scale=Dh**-0.5)(*_f32(q, k, v), mask)
  d2 = ((q[:, :, None] - k[:, None, :]) ** 2).sum(-1).transpose(0, 3, 1, 2)  # (B, H, T, S)
  want, a = _np_attention(-d2 / (2 * np.sqrt(Dh)), mask[:, None], v)
  _check(out, want, valid)
  np.testing.assert_allclose(aux["weights"][-1, :, 3:], a[-1, :, 3:], atol=1e-6)


@pytest.mark.parametrize("causal,T", [(True, 23), (True, 150), (False, 23)])
def test_linear_running_sums_equal_quadratic_form_and_numpy(causal, T):
  q, k, v = _qkv(1, T=T)  # T = 150 spans three chunks of the running sums
  B, T, H, Dh = q.shape
  if causal:
    mask, valid = _padded_mask(B, T)
  else:
    mask, valid = np.ones((B, T, T), bool), np.ones((B, T), bool)
  args = (*_f32(q, k, v), mask)
  out, aux = _jit(linear_attention, scale=Dh**-0.5, causal=causal)(*args)
  quad, _ = _jit(linear_quadratic, scale=Dh**-0.5)(*args)
  _check(out, np.asarray(quad), valid)

  def phi(x):
    x = x * Dh**-0.25
    return np.where(x > 0, x + 1, np.exp(x))

  kern = np.einsum("bthd,bshd->bhts", phi(q), phi(k))
  want, a = _np_attention(np.log(kern), mask[:, None], v)
  _check(out, want, valid)
  np.testing.assert_allclose(np.exp(aux["scores"][0]) * mask[0, None], kern[0] * mask[0, None],
                             rtol=1e-5)


@pytest.mark.parametrize("window,block_size,T", [(3, 4, 23), (5, 4, 16), (1, 4, 9), (8, 3, 23),
                                                 (4, 32, 23)])
def test_local_equals_dense_window(window, block_size, T):
  q, k, v = _qkv(2, T=T)
  B, _, H, Dh = q.shape
  mask, valid = _padded_mask(B, T)
  out, aux = _jit(local_attention, scale=Dh**-0.5, window=window,
                  block_size=block_size)(*_f32(q, k, v), mask)
  t, s = np.arange(T)[:, None], np.arange(T)[None]
  allowed = mask & ((t - s) < window)[None]
  want, a = _np_attention(np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(Dh), allowed[:, None], v)
  _check(out, want, valid)
  np.testing.assert_allclose(aux["weights"][0], a[0], atol=1e-6)
  # Only the window is read, and the budget says so.
  np.testing.assert_array_equal(aux["keys_read"][0, 0], np.minimum(np.arange(T) + 1, window))


def test_bigbird_equals_numpy_pattern():
  q, k, v = _qkv(3, T=23)
  B, T, H, Dh = q.shape
  w, bs, g, r = 3, 4, 2, 2
  mask, valid = _padded_mask(B, T)
  out, aux = _jit(bigbird_attention, scale=Dh**-0.5, window=w, block_size=bs, n_global=g,
                  n_random=r)(*_f32(q, k, v), mask)
  blocks, ok = (np.asarray(x) for x in jax.jit(_random_blocks, static_argnums=1)(
      np.arange(T // bs + 1, dtype=np.int32), r))
  pattern = np.zeros((T, T), bool)
  for t in range(T):
    for s in range(t + 1):
      rand = any(ok[t // bs, j] and blocks[t // bs, j] == s // bs for j in range(r))
      pattern[t, s] = (t - s < w) or s < g or rand
  assert ok[1:].all() or r > 1  # every block past the first picks a random block
  assert (blocks[ok] < np.arange(T // bs + 1)[:, None].repeat(r, 1)[ok]).all()  # earlier ones
  allowed = mask & pattern[None]
  want, _ = _np_attention(np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(Dh), allowed[:, None], v)
  _check(out, want, valid)
  np.testing.assert_array_equal(aux["keys_read"][0, 0], allowed[0].sum(-1))


def test_moba_equals_numpy_gate_and_pattern():
  q, k, v = _qkv(4, T=22)
  B, T, H, Dh = q.shape
  bs, top = 4, 2
  mask, valid = _padded_mask(B, T)
  out, aux = _jit(moba_attention, scale=Dh**-0.5, block_size=bs,
                  top_k_blocks=top)(*_f32(q, k, v), mask)
  allowed = np.zeros((B, H, T, T), bool)
  for b in range(B):
    for h in range(H):
      for t in range(T):
        n_past = t // bs  # complete past blocks
        real = [j for j in range(n_past) if valid[b, j * bs:(j + 1) * bs].any()]
        kbar = np.stack([k[b, j * bs:(j + 1) * bs, h][valid[b, j * bs:(j + 1) * bs]].mean(0)
                         for j in real] or [np.zeros(Dh)])  # the mean over real keys only
        gate = kbar @ q[b, t, h]
        chosen = [real[i] for i in np.argsort(-gate)[:min(top, len(real))]] if real else []
        for s in range(t + 1):
          allowed[b, h, t, s] = s // bs == t // bs or s // bs in chosen
  allowed &= mask[:, None]
  want, _ = _np_attention(np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(Dh), allowed, v)
  _check(out, want, valid)
  # The key budget is the selection actually made.
  np.testing.assert_array_equal(aux["keys_read"][0], allowed[0].sum(-1))
  own = np.minimum(np.arange(T) % bs + 1, np.arange(T) + 1)
  np.testing.assert_array_equal(aux["keys_read"][0, 0], own + bs * np.minimum(np.arange(T) // bs,
                                                                              top))


def test_moba_gate_reads_only_the_past():
  """Perturbing every position ≥ p changes neither the outputs nor the selection before p."""
  qkv = _qkv(5, B=1, T=24)
  fn = _jit(moba_attention, scale=0.5, block_size=4, top_k_blocks=2)
  out, aux = fn(*_f32(*qkv), None)
  for p in (5, 8, 13, 20):
    noise = np.random.default_rng(p).normal(size=(3,) + qkv[0].shape) * 10.0
    later = (np.arange(qkv[0].shape[1]) >= p)[None, :, None, None]
    qp, kp, vp = _f32(*(x + np.where(later, n, 0.0) for x, n in zip(qkv, noise, strict=True)))
    out_p, aux_p = fn(qp, kp, vp, None)
    np.testing.assert_array_equal(out_p[:, :p], out[:, :p])
    np.testing.assert_array_equal(aux_p["blocks"][:, :, :p], aux["blocks"][:, :, :p])
    # ... and the perturbation is strong enough to change the selection after p.
    if p <= 13:
      assert (aux_p["blocks"][:, :, p:] != aux["blocks"][:, :, p:]).any()


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_exact_causality_by_gradient(name):
  """d out_t / d (q, k, v)_s is exactly zero for s > t."""
  q, k, v = _f32(*_qkv(6, B=1, T=13, H=1, Dh=4))
  fn = functools.partial(ATTENTION[name], scale=0.5, **OPTS[name])

  def f(q, k, v):
    return fn(q, k, v, None)[0][0, :, 0]  # (T, Dh)

  T = q.shape[1]
  future = np.arange(T)[None, :] > np.arange(T)[:, None]  # [t, s]: s after t
  for J in jax.jit(jax.jacrev(f, argnums=(0, 1, 2)))(q, k, v):
    J_TS = np.abs(np.asarray(J)[:, :, 0, :, 0, :]).sum((1, 3))
    assert (J_TS[future] == 0).all()
    assert (J_TS[~future] > 0).sum() >= T - 1  # and the past does move it (not q_0, k_0)


def _variant_cfg(name):
  extra = dict(OPTS[name])
  return tr.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_len=32,
                   positions="rope", attention=name, **extra)


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_model_decode_equals_forward(name):
  cfg = _variant_cfg(name)
  params = random_params(cfg)
  tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 14), dtype=np.int32)
  jitted = jax.jit(tr.Transformer(cfg).apply)
  apply = lambda variables, tokens: np.asarray(jitted(variables, tokens))
  full = apply({"params": params}, tokens)
  cache = init_cache(cfg, 2, 16)
  logits, cache = prefill(params, cfg, tokens[:, :6], cache)
  steps = [np.asarray(logits)]
  for t in range(6, 14):
    logits_t, cache = decode_step(params, cfg, tokens[:, t], cache)
    steps.append(np.asarray(logits_t)[:, None])
  np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
  # The full model is causal too: a later token cannot move earlier logits.
  changed = tokens.copy()
  changed[:, 9] = (tokens[:, 9] + 1) % cfg.vocab_size
  full_2 = apply({"params": params}, changed)
  np.testing.assert_array_equal(full_2[:, :9], full[:, :9])
  assert not np.allclose(full_2[:, 9:], full[:, 9:])


def test_bigbird_model_reads_global_token_beyond_the_window():
  """Token 0 is global: with window 3 and 2 layers (reach 4), logits at t = 15 still see it."""
  cfg = _variant_cfg("bigbird").replace(n_random=0, n_global=1)
  params = random_params(cfg)
  tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, (1, 16), dtype=np.int32)
  jitted = jax.jit(tr.Transformer(cfg).apply)
  apply = lambda variables, tokens: np.asarray(jitted(variables, tokens))

  def moved(s):
    changed = tokens.copy()
    changed[0, s] = (tokens[0, s] + 1) % 64
    return apply({"params": params}, changed)

  base, moved_0, moved_5 = apply({"params": params}, tokens), moved(0), moved(5)
  assert np.abs(moved_0[0, 15] - base[0, 15]).max() > 1e-6  # the global token reaches t = 15
  np.testing.assert_array_equal(moved_5[0, 10:], base[0, 10:])  # a local one reaches t ≤ 9


def test_receptive_field_is_layers_times_window_minus_one():
  """After L layers of window w, output t depends on input s exactly when 0 ≤ t−s ≤ L(w−1)."""
  L, w, T = 3, 3, 16
  cfg = tr.Config(vocab_size=32, d_model=16, n_layers=L, n_heads=2, max_len=T,
                  attention="local", window=w, block_size=4, positions="none")
  params = random_params(cfg)
  f_l = tr.block_fn(cfg)

  def stack(x_TD):
    for layer in range(L):
      x_TD = f_l(tr.layer(params, layer), x_TD)
    return x_TD

  x = np.random.default_rng(1).normal(size=(T, cfg.d_model)).astype(np.float32)
  J_TS = np.abs(np.asarray(jax.jit(jax.jacrev(stack))(x))).sum((1, 3))
  lag = np.arange(T)[:, None] - np.arange(T)[None, :]
  reach = (lag >= 0) & (lag <= L * (w - 1))
  assert (J_TS[~reach] == 0).all()
  assert (J_TS[reach] > 0).all()
  assert L * (w - 1) < T - 1  # so the test can see the edge


# --- Kernel properties, float64 --------------------------------------------------------


def _bidirectional(fn, q, k, v):
  B, T = q.shape[:2]
  return _jit(fn, scale=q.shape[-1] ** -0.5)(q, k, v, np.ones((B, T, k.shape[1]), bool))


@pytest.mark.parametrize("name", ["softmax", "rbf", "linear"])
def test_tied_kernel_gram_is_psd_and_attention_spectrum_in_unit_interval(name):
  fn = functools.partial(linear_quadratic) if name == "linear" else ATTENTION[name]
  with jax.enable_x64(True):
    rng = np.random.default_rng(7)
    x = jax.device_put(rng.normal(size=(1, 12, 1, 6)))  # q = k: a tied projection
    _, aux = _bidirectional(fn, x, x, x)
    K = np.exp(np.asarray(aux["scores"][0, 0], np.float64))
    assert aux["scores"].dtype == jnp.float32  # scores are float32 by contract ...
    scores = np.asarray(aux["scores"][0, 0])
    # ... so check symmetry/PSD on the float64 kernel computed from the same inputs.
    xx = np.asarray(x[0, :, 0])
    Dh = xx.shape[-1]
    if name == "softmax":
      K = np.exp(xx @ xx.T / np.sqrt(Dh))
    elif name == "rbf":
      K = np.exp(-((xx[:, None] - xx[None]) ** 2).sum(-1) / (2 * np.sqrt(Dh)))
    else:
      p = np.where(xx * Dh**-0.25 > 0, xx * Dh**-0.25 + 1, np.exp(xx * Dh**-0.25))
      K = p @ p.T
    np.testing.assert_allclose(np.exp(scores), K, rtol=2e-5)  # the variant's kernel is K
    np.testing.assert_allclose(K, K.T, rtol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-9 * np.abs(K).max()
    A = K / K.sum(1, keepdims=True)  # D⁻¹K
    np.testing.assert_allclose(np.asarray(aux["weights"][0, 0]), A, atol=1e-6)
    ev = np.linalg.eigvals(A)
    assert np.abs(ev.imag).max() < 1e-9
    assert ev.real.min() > -1e-9 and ev.real.max() < 1 + 1e-9


def test_untied_softmax_fails_the_properties():
  rng = np.random.default_rng(8)
  q, k = rng.normal(size=(12, 6)), rng.normal(size=(12, 6))
  K = np.exp(q @ k.T / np.sqrt(6))
  assert np.abs(K - K.T).max() > 0.1  # not symmetric
  assert np.linalg.eigvalsh((K + K.T) / 2).min() < 0  # its symmetric part is indefinite
  ev = np.linalg.eigvals(K / K.sum(1, keepdims=True))
  assert np.abs(ev.imag).max() > 1e-3 or ev.real.min() < -1e-3  # complex or negative


def test_qk_tied_model_has_no_w_k_and_psd_scores():
  cfg = tr.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_len=16,
                  positions="rope", qk_tied=True, causal=False, init_std=0.3)
  params = random_params(cfg)  # the initializer's tree
  assert "w_k" not in params["blocks"]["attn"] and "b_k" not in params["blocks"]["attn"]
  tokens = np.random.default_rng(1).integers(0, 64, (1, 16), dtype=np.int32)
  _, state = jax.jit(functools.partial(tr.Transformer(cfg).apply, mutable=["intermediates"]))(
      {"params": params}, tokens)
  state = jax.tree.map(np.asarray, state)
  inter = state["intermediates"]["blocks"]["attn"]
  q, k = np.asarray(inter["q"][0], np.float64), np.asarray(inter["k"][0], np.float64)
  np.testing.assert_array_equal(q, k)  # keys are the (rotated) queries
  for layer in range(cfg.n_layers):
    for h in range(cfg.n_heads):
      G = q[layer, 0, :, h] @ q[layer, 0, :, h].T / np.sqrt(cfg.d_head)
      K = np.exp(G - G.max())
      assert np.linalg.eigvalsh(K).min() > -1e-9 * np.abs(K).max()
      # The model's bidirectional weights are D⁻¹K, with a real spectrum in [0, 1].
      ev = np.linalg.eigvals(np.asarray(inter["weights"][0][layer, 0, h], np.float64))
      assert np.abs(ev.imag).max() < 1e-4 and ev.real.min() > -1e-5 and ev.real.max() < 1 + 1e-5


# --- Configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("field,kwargs", [
    ("qk_tied", dict(qk_tied=True, n_heads=4, n_kv_heads=2)),
    ("window", dict(attention="local")),
    ("window", dict(attention="bigbird")),
    ("window", dict(attention="linear", window=8)),
    ("causal", dict(attention="moba", causal=False)),
    ("block_size", dict(attention="moba", block_size=0)),
    ("top_k_blocks", dict(attention="moba", top_k_blocks=0)),
    ("n_random", dict(attention="bigbird", window=4, n_random=-1)),
])
def test_invalid_variant_config_names_the_field(field, kwargs):
  with pytest.raises(ValueError, match=f"Config.{field}=.*Fix:"):
    tr.Config(**kwargs)


def test_direct_calls_refuse_bad_options():
  q = np.ones((1, 4, 1, 2), np.float32)
  with pytest.raises(ValueError, match="block_size"):
    local_attention(q, q, q, None, scale=1.0, window=2, block_size=0)
  with pytest.raises(ValueError, match="window"):
    local_attention(q, q, q, None, scale=1.0, window=None, block_size=2)


def test_softmax_registry_entry_unchanged():
  q, k, v = _f32(*_qkv(9, B=1, T=6))
  out, _ = _jit(softmax_attention, scale=0.5)(q, k, v, None)
  want, _ = _np_attention(np.einsum("bthd,bshd->bhts", *_qkv(9, B=1, T=6)[:2]) * 0.5,
                          np.tril(np.ones((6, 6), bool))[None, None], _qkv(9, B=1, T=6)[2])
  np.testing.assert_allclose(out, want, atol=1e-5)
