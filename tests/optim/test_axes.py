"""`matrix_axes=` on every transform: a fused qkv kernel `(D, 3, H, Dh)` and an Einsum kernel
`(D, H, Dh)` work wherever Muon works, checked against numpy in float64 on the reshaped
matrices; plain pairs are accepted, anything else refused in one line.
(`optim/axes.py`, `transformer/linalg/axes.py`.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim
from tests.optim.test_foreign import _one_line

D, H, DH = 16, 2, 8
FUSED = {"qkv/kernel": optim.MatrixAxes(0, (2, 3))}  # three (D, H·Dh) matrices


def _tree(x):
  """A linen-style fused projection: `attn/qkv/kernel` (a `kernel`: hidden by its name)."""
  return {"attn": {"qkv": {"kernel": x}}}


def _leaf(tree):
  return tree["attn"]["qkv"]["kernel"]


def _matrices(x):
  """`(3, D, H·Dh)` float64 from a fused `(D, 3, H, Dh)` leaf (numpy's reshape, the reference)."""
  return np.moveaxis(np.asarray(x, np.float64), 1, 0).reshape(3, D, H * DH)


def _fused(M):
  """The inverse of `_matrices`."""
  return np.moveaxis(np.asarray(M).reshape(3, D, H, DH), 0, 1)


def _with_spectrum(seed, sigmas):
  """A fused leaf whose three matrices have the given singular values (float32)."""
  rng = np.random.default_rng(seed)
  mats = []
  for s in sigmas:
    U = np.linalg.qr(rng.normal(size=(D, D)))[0]
    V = np.linalg.qr(rng.normal(size=(H * DH, H * DH)))[0]
    mats.append(U @ np.diag(s) @ V.T)
  return jnp.asarray(_fused(np.stack(mats)), jnp.float32)


def test_spectral_cap_on_fused_qkv_matches_numpy():
  sig = [np.geomspace(3.0, 0.3, D), np.geomspace(0.5, 0.1, D), np.geomspace(8.0, 1.0, D)]
  params = _tree(_with_spectrum(0, sig))
  grads = _tree(0.01 * _with_spectrum(1, [np.ones(D)] * 3))
  tx = optim.spectral_cap(1.0, method="svd", matrix_axes=FUSED)  # the default mask: hidden
  u, state = jax.jit(tx.update)(grads, tx.init(params), params)
  W = _matrices(_leaf(params)) + _matrices(_leaf(grads))
  top = np.linalg.svd(W, compute_uv=False)[:, 0]
  expected = W * np.minimum(1.0, 1.0 / top)[:, None, None]
  got = _matrices(_leaf(params) + _leaf(u))
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  assert np.linalg.svd(got, compute_uv=False)[:, 0] == pytest.approx([1.0, top[1], 1.0],
                                                                    rel=1e-5)
  # The untouched middle matrix keeps its update bit for bit.
  np.testing.assert_array_equal(_matrices(_leaf(u))[1], _matrices(_leaf(grads))[1])
  assert _leaf(state.inner_state.v).shape == (3, H * DH)  # one vector per matrix


def test_spectral_normalize_on_an_einsum_kernel_per_head():
  """`(D, H, Dh)` with `MatrixAxes(0, 2)`: `H` matrices `(D, Dh)`, each normalized."""
  rng = np.random.default_rng(2)
  k = jnp.asarray(rng.normal(size=(D, H, DH)), jnp.float32)
  tx = optim.spectral_normalize(0.5, method="svd", matrix_axes={"kernel": (0, 2)})
  params = {"einsum": {"kernel": k}}
  u, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  per_head = np.moveaxis(np.asarray(k + u["einsum"]["kernel"], np.float64), 1, 0)  # (H, D, Dh)
  np.testing.assert_allclose(np.linalg.svd(per_head, compute_uv=False)[:, 0], 0.5, rtol=1e-5)


def test_scale_by_condition_one_multiplier_per_fused_matrix():
  sig = [np.geomspace(1.0, 0.5, D), np.geomspace(1.0, 1 / 80, D), np.geomspace(1.0, 1 / 8, D)]
  params = _tree(_with_spectrum(3, sig))
  tx = optim.scale_by_condition(alpha=1.0, kappa_ref=4.0, power_steps=60, init_power_steps=60,
                                matrix_axes=FUSED)
  ones = jax.tree.map(jnp.ones_like, params)
  u, state = jax.jit(tx.update)(ones, tx.init(params), params)
  kappa = np.array([2.0, 80.0, 8.0])  # σ_max/σ_min of each matrix, by construction
  np.testing.assert_allclose(_leaf(state.inner_state.kappa), kappa, rtol=2e-2)
  expected = np.minimum(1.0, 4.0 / kappa)  # condition_multiplier with α = 1, κ_ref = 4
  got = _matrices(_leaf(u))
  for j in range(3):
    np.testing.assert_allclose(got[j], expected[j], rtol=2e-2)


def _overlap_grad(X, n):
  """`∇ ½ Σ_{h≠g} ‖X_hᵀ X_g‖²` over column blocks (numpy, float64): `2 X M_off`."""
  M = X.T @ X
  head = np.arange(X.shape[1]) // (X.shape[1] // n)
  return 2 * X @ np.where(head[:, None] == head[None, :], 0.0, M)


def test_orthogonal_heads_on_fused_qkv_and_an_output_kernel():
  rng = np.random.default_rng(4)
  qkv = jnp.asarray(rng.normal(size=(D, 3, H, DH)) / 4, jnp.float32)
  out = jnp.asarray(rng.normal(size=(H, DH, D)) / 4, jnp.float32)  # (H, Dh, D): rows
  params = {"attn": {"qkv": qkv, "out": out}, "fc": jnp.ones((D, D))}
  tx = optim.orthogonal_heads(0.1, n_heads=H, matrix_axes={
      "attn/qkv": optim.MatrixAxes(0, (2, 3)), "attn/out": optim.MatrixAxes((0, 1), 2)})
  zeros = jax.tree.map(jnp.zeros_like, params)
  u, _ = jax.jit(lambda g, p: tx.update(g, optax.EmptyState(), p))(zeros, params)
  want = np.stack([-0.1 * _overlap_grad(M, H) for M in _matrices(qkv)])
  np.testing.assert_allclose(_matrices(u["attn"]["qkv"]), want, rtol=1e-4, atol=1e-6)
  rows = np.asarray(out, np.float64).reshape(H * DH, D)
  want_out = -0.1 * _overlap_grad(rows.T, H).T
  np.testing.assert_allclose(np.asarray(u["attn"]["out"]).reshape(H * DH, D), want_out,
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal(u["fc"], 0.0)  # not a projection: passed through
  with pytest.raises(ValueError) as e:  # neither side holds the heads: refused, one line
    optim.orthogonal_heads(0.1, H, matrix_axes={"fc": optim.MatrixAxes(0, 1)}).update(
        {"fc": zeros["fc"]}, optax.EmptyState(), {"fc": params["fc"]})
  _one_line(e, "'fc' (16, 16)", "layout_fn=")


def test_muon_on_fused_qkv_equals_muon_on_each_matrix():
  rng = np.random.default_rng(5)
  g = _tree(jnp.asarray(rng.normal(size=(D, 3, H, DH)), jnp.float32))
  tx = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none", matrix_axes=FUSED)
  u, _ = tx.update(g, tx.init(g))
  ref = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none",
                            matrix_axes=optim.MatrixAxes(-2, -1))
  flat = {"w": jnp.asarray(_matrices(_leaf(g)), jnp.float32)}
  want = ref.update(flat, ref.init(flat))[0]["w"]
  np.testing.assert_allclose(_matrices(_leaf(u)), want, rtol=1e-5, atol=1e-6)


def test_plain_pairs_accepted_and_bad_axes_refused_in_one_line():
  params = _tree(jnp.ones((D, 3, H, DH)))
  a = optim.spectral_cap(1.0, method="svd", matrix_axes=(0, (2, 3))).init(params)
  b = optim.spectral_cap(1.0, method="svd", matrix_axes=FUSED["qkv/kernel"]).init(params)
  assert jax.tree.map(np.shape, a) == jax.tree.map(np.shape, b)
  for bad, needle in (((0, 1, 2), "not a MatrixAxes"), ((0, "x"), "not a MatrixAxes"),
                      ("kernel", "not a MatrixAxes"), ({"qkv": (0,)}, "not a MatrixAxes")):
    for build in (optim.muon, optim.spectral_cap, optim.spectral_normalize):
      with pytest.raises(ValueError) as e:
        build(0.5, matrix_axes=bad)
      _one_line(e, needle, "matrix_axes")
    with pytest.raises(ValueError) as e:
      optim.scale_by_condition(matrix_axes=bad)
    _one_line(e, needle)
  for axes in (optim.MatrixAxes(0, 7), optim.MatrixAxes(0, (2, 2))):
    with pytest.raises(ValueError) as e:
      optim.spectral_cap(1.0, matrix_axes={"qkv/kernel": axes}).init(params)
    _one_line(e, "'attn/qkv/kernel'", "(16, 3, 2, 8)")
    every_leaf_hidden = lambda p: jax.tree.map(lambda _: "hidden", p)
    with pytest.raises(ValueError) as e:
      optim.muon(0.02, label_fn=every_leaf_hidden, matrix_axes=axes).init(params)
    _one_line(e, "'attn/qkv/kernel'", "(16, 3, 2, 8)")
