"""Muon against optax.contrib.muon, per-head blocks, and the alias's arithmetic."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim
from optim.roles import merge_heads, split_heads
from transformer.linalg.polar import newton_schulz

# Our names at their places (`blocks/attn/w_q`): stacked `(L, d_in, d_out)`, heads by `NAMES`.
SHAPES = {"blocks": {"attn": {"w_q": (2, 32, 32), "w_o": (2, 32, 32)},
                     "ffn": {"w_1": (2, 32, 64), "w_2": (2, 64, 32)},
                     "norm_1": {"scale": (2, 32)}}, "embed": {"embedding": (50, 32)}}


def _tree(seed):
  leaves, treedef = jax.tree.flatten(SHAPES, is_leaf=lambda x: isinstance(x, tuple))
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  arrays = [jax.random.normal(k, s) for k, s in zip(keys, leaves, strict=True)]
  return jax.tree.unflatten(treedef, arrays)


@pytest.mark.parametrize("shape_scaling,consistent_rms,nesterov",
                         [("width", None, True), ("rms", 0.2, False)])
def test_matches_optax_contrib_muon_on_every_leaf(shape_scaling, consistent_rms, nesterov):
  # Muon on the hidden matrices; since issue 48 our AdamW defaults are optax's too (b2 0.999,
  # AdamW at Muon's rate), so with the same routing every leaf's update agrees.
  params = _tree(0)
  roles = optim.labels(params)
  dims = jax.tree.map(lambda r, p: optax.contrib.MuonDimensionNumbers(p.ndim - 2, p.ndim - 1)
                      if r == "hidden" else None, roles, params)
  ours = optim.muon(0.02, shape_scaling=shape_scaling, nesterov=nesterov)
  ref = optax.contrib.muon(0.02, nesterov=nesterov, muon_weight_dimension_numbers=dims,
                           consistent_rms=consistent_rms)
  s_ours, s_ref = ours.init(params), ref.init(params)
  for t in range(3):
    grads = _tree(t + 1)
    u_ours, s_ours = jax.jit(ours.update)(grads, s_ours, params)
    u_ref, s_ref = jax.jit(ref.update)(grads, s_ref, params)
    for (path, a), b, r in zip(jax.tree_util.tree_leaves_with_path(u_ours), jax.tree.leaves(u_ref),
                               jax.tree.leaves(roles), strict=True):
      tol = 1e-5 if r == "hidden" else 1e-7  # AdamW: the same arithmetic
      np.testing.assert_allclose(a, b, atol=tol, rtol=1e-6, err_msg=f"{path} ({r})")


def test_alias_is_orthogonalized_momentum_plus_decay_times_lr():
  params, grads = _tree(0), _tree(1)
  tx = optim.muon(0.1, beta=0.9, nesterov=False, weight_decay=0.5, shape_scaling="none")
  updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
  # First step, no Nesterov: the debiased momentum is the gradient itself.
  for name in ("w_q", "w_o"):
    g, p = grads["blocks"]["attn"][name], params["blocks"]["attn"][name]
    expected = -0.1 * (newton_schulz(g) + 0.5 * p)
    np.testing.assert_allclose(updates["blocks"]["attn"][name], expected, rtol=1e-5, atol=1e-6)


def test_stacked_layers_are_independent_matrices():
  grads = _tree(1)
  tx = optim.scale_by_muon(shape_scaling="rms", matrix_axes=optim.MatrixAxes(-2, -1))
  w = {"w_1": grads["blocks"]["ffn"]["w_1"]}  # out of our tree: its layout is stated
  stacked, _ = tx.update(w, tx.init(w))
  for l in range(2):
    single = {"w_1": w["w_1"][l]}
    np.testing.assert_allclose(stacked["w_1"][l], tx.update(single, tx.init(single))[0]["w_1"],
                               rtol=1e-5, atol=1e-6)
  assert optim.shape_scale(32, 64, "rms") == pytest.approx(0.2 * 8)
  assert optim.shape_scale(64, 32, "width") == 1.0 and optim.shape_scale(32, 128, "width") == 2.0


def test_per_head_orthogonalizes_each_block():
  attn = {"w_q": jax.random.normal(jax.random.key(3), (2, 32, 32)),
          "w_o": jax.random.normal(jax.random.key(4), (2, 32, 32))}
  tx = optim.scale_by_muon(n_heads=4, shape_scaling="none")
  u, _ = jax.jit(tx.update)({"blocks": {"attn": attn}}, tx.init({"blocks": {"attn": attn}}))
  u, g = u["blocks"]["attn"], attn
  for name, side in (("w_q", "columns"), ("w_o", "rows")):
    blocks = split_heads(u[name], 4, side)
    assert blocks.shape == ((2, 4, 32, 8) if side == "columns" else (2, 4, 8, 32))
    s = np.linalg.svd(np.asarray(blocks, np.float64), compute_uv=False)
    assert 0.68 <= s.min() and s.max() <= 1.135  # each head's block is (nearly) orthogonal
    expected = merge_heads(newton_schulz(split_heads(g[name], 4, side)), side)
    np.testing.assert_allclose(u[name], expected, rtol=1e-5, atol=1e-6)
  # The whole w_q is *not* orthogonal: heads are orthogonalized separately.
  assert np.linalg.svd(np.asarray(u["w_q"][0], np.float64), compute_uv=False).max() > 1.2


def test_momentum_dtype_and_bad_leaf():
  g = {"w_2": jnp.ones((4, 6), jnp.bfloat16)}
  tx = optim.scale_by_muon(mu_dtype=jnp.float32)
  u, state = tx.update(g, tx.init(g))
  assert u["w_2"].dtype == jnp.bfloat16 and state.mu["w_2"].dtype == jnp.float32
  with pytest.raises(ValueError, match="matrix"):
    tx.update({"b": jnp.ones(3)}, tx.init({"b": jnp.ones(3)}))


@pytest.mark.parametrize("ns_steps", [1, 2, 7])
def test_ns_steps_is_the_newton_schulz_iteration_count(ns_steps):
  """With β = 0 (no momentum) and no shape scaling, Muon's update is `NS_k(g)` with
  `k = ns_steps`: checked against the iteration written out in float64."""
  from transformer.linalg.polar import coeff_table

  g = jax.random.normal(jax.random.key(3), (2, 16, 24))
  tx = optim.scale_by_muon(0.0, nesterov=False, ns_steps=ns_steps, shape_scaling="none",
                           matrix_axes=optim.MatrixAxes(-2, -1))
  u, _ = tx.update({"w": g}, tx.init({"w": g}))
  a, b, c = np.asarray(coeff_table("standard"), np.float64)[0]
  X = np.asarray(g, np.float64)
  X = X / (np.linalg.norm(X, axis=(-2, -1), keepdims=True) + 1e-8)
  for _ in range(ns_steps):
    A = X @ np.swapaxes(X, -1, -2)
    X = a * X + (b * A + c * A @ A) @ X
  np.testing.assert_allclose(u["w"], X, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("n_heads", [None, 4])
def test_gram_iteration_gives_the_same_update(n_heads):
  """The Gram iteration (feed-forward `(32, 64)`, per-head `(32, 8)` blocks) changes the
  FLOPs, not the update; `coeffs` and `gram` reach `newton_schulz` unchanged."""
  params, grads = _tree(0), _tree(1)
  blk = grads["blocks"]
  hidden = {"blocks": {"attn": blk["attn"], "ffn": blk["ffn"]}}
  u = {}
  for gram in (None, True, False):
    tx = optim.scale_by_muon(n_heads=n_heads, coeffs="polar_express", gram=gram)
    u[gram], _ = jax.jit(tx.update)(hidden, tx.init(hidden))
  for (path, a), b, c in zip(jax.tree_util.tree_leaves_with_path(u[None]),
                            jax.tree.leaves(u[True]), jax.tree.leaves(u[False]), strict=True):
    # Auto: the Gram iteration for rectangular blocks (w_1, w_2, and the per-head blocks).
    square = n_heads is None and a.shape[-1] == a.shape[-2]
    np.testing.assert_array_equal(a, c if square else b, err_msg=str(path))
    # The Gram iteration amplifies float32 rounding by up to the slope at 0 (~1000 × 1.2e-7).
    np.testing.assert_allclose(b, c, rtol=0, atol=1.2e-4, err_msg=str(path))
  w_1 = blk["ffn"]["w_1"]
  expected = newton_schulz(w_1, coeffs="polar_express", gram=False)
  # (Momentum rescales the first gradient, which Newton–Schulz ignores up to rounding.)
  np.testing.assert_allclose(u[False]["blocks"]["ffn"]["w_1"],
                             expected * optim.shape_scale(32, 64, "width"), rtol=1e-5, atol=1e-5)
  tx = optim.muon(0.1, coeffs="polar_express", gram=False, shape_scaling="none", nesterov=False)
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["blocks"]["ffn"]["w_1"],
                             -0.1 * newton_schulz(w_1, coeffs="polar_express", gram=False),
                             rtol=1e-5, atol=1e-6)


def _spectrum(seed, shape, kappa):
  """`U diag(s) Vᵀ` with `s` log-spaced in `[1/kappa, 1]`, Haar `U`, `V`; and `U Vᵀ` (float64)."""
  rng = np.random.default_rng(seed)
  m, n = shape[-2:]
  k = min(m, n)
  U = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
  V = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
  return (U * np.geomspace(1, 1 / kappa, k)) @ np.swapaxes(V, -1, -2), U @ np.swapaxes(V, -1, -2)


def test_bfloat16_newton_schulz_with_polar_express_against_svd():
  # The float32 band of "polar_express" is E = 0.125 (every σ in [1e-3, 1] ends in [1-E, 1+E]).
  E, ulp = 0.125, float(jnp.finfo(jnp.bfloat16).eps)  # ulp = 2^-7, bfloat16's spacing at 1
  worst = {}
  for seed, shape in [(0, (4, 64, 64)), (1, (4, 32, 96)), (2, (4, 64, 64))]:
    G, P = _spectrum(seed, shape, kappa=10.0)
    for dtype in (jnp.float32, jnp.bfloat16):
      tx = optim.scale_by_muon(coeffs="polar_express", compute_dtype=dtype, nesterov=False,
                               shape_scaling="none", matrix_axes=optim.MatrixAxes(-2, -1))
      u, _ = jax.jit(tx.update)({"w": jnp.asarray(G, jnp.float32)},
                                tx.init({"w": jnp.zeros(shape)}))
      O = np.asarray(u["w"], np.float64)
      s = np.linalg.svd(O, compute_uv=False)
      polar = np.linalg.norm(O - P, ord=2, axis=(-2, -1)).max()
      lo, hi, err = worst.get(dtype, (1.0, 1.0, 0.0))
      worst[dtype] = (min(lo, s.min()), max(hi, s.max()), max(err, polar))
  lo, hi, err = worst[jnp.float32]
  assert 1 - E <= lo and hi <= 1 + E and err <= E + 1e-3
  # bfloat16 keeps the top of the band to one ulp (the schedule's 1% margin), not its bottom:
  # rounding in the early steps, amplified by the later ones, pulls σ_min below it.
  lo, hi, err = worst[jnp.bfloat16]
  assert hi <= 1 + E + ulp and 0.72 <= lo < 1 - E and err <= 0.28
  # Running the first steps' products in float32 (`float32_steps`) lifts the bottom back:
  # three of five steps put every σ within the band plus one bfloat16 ulp on these spectra.
  from transformer.linalg.polar import newton_schulz
  lows = []
  for k in (0, 3):
    s = [np.linalg.svd(np.asarray(newton_schulz(
        jnp.asarray(_spectrum(seed, shape, kappa=10.0)[0], jnp.float32), coeffs="polar_express",
        compute_dtype=jnp.bfloat16, float32_steps=k, gram=False), np.float64),
        compute_uv=False) for seed, shape in [(0, (4, 64, 64)), (1, (4, 32, 96))]]
    lows.append(min(x.min() for x in s))
    assert max(x.max() for x in s) <= 1 + E + ulp
  assert lows[0] < 1 - E - ulp <= lows[1]
