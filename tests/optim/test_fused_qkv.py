"""Other libraries' attention in Muon (issue 48): a fused q, k, v orthogonalized as its three
matrices, per-head Muon in equinox's `(d_out, d_in)` layout, and an equinox transformer's roles.
Each update is checked against the exact polar factor (float64 SVD) of its own block.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optim


def _polar(G):
  U, _, Vt = np.linalg.svd(np.asarray(G, np.float64), full_matrices=False)
  return U @ Vt


@pytest.mark.parametrize("name,stored", [("c_attn/weight", "d_in, d_out"),
                                         ("qkv/weight", "d_out, d_in"),
                                         ("self_attn/in_proj_weight", "d_out, d_in")])
def test_muon_orthogonalizes_a_fused_qkv_as_three_matrices(name, stored):
  D = 16
  rng = np.random.default_rng(7)
  # q, k, v gradients at different scales: orthogonalized whole, the small one would stay small.
  G = np.concatenate([s * rng.normal(size=(D, D)) for s in (1.0, 0.3, 3.0)], axis=1)  # (D, 3D)
  leaf = G if stored == "d_in, d_out" else G.T
  grads = {"fc": {"kernel": jnp.ones((D, D))}}
  node = grads
  *owners, last = name.split("/")
  for o in owners:
    node = node.setdefault(o, {})
  node[last] = jnp.asarray(leaf, jnp.float32)
  tx = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none", ns_steps=12,
                           coeffs="polar_express")
  u, _ = tx.update(grads, tx.init(grads))
  U = np.asarray(functools.reduce(lambda t, k: t[k], name.split("/"), u), np.float64)
  U = U if stored == "d_in, d_out" else U.T
  for part, G_part in zip(np.split(U, 3, axis=1), np.split(G, 3, axis=1), strict=True):
    # Each third is the polar factor of its own gradient (to Newton–Schulz's accuracy).
    np.testing.assert_allclose(part, _polar(G_part), atol=0.05)
  # Asked not to split, it is one matrix: the polar factor of the whole, unlike the above.
  whole = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none", ns_steps=12,
                              coeffs="polar_express", split_qkv=False)
  w, _ = whole.update(grads, whole.init(grads))
  W = np.asarray(functools.reduce(lambda t, k: t[k], name.split("/"), w), np.float64)
  W = W if stored == "d_in, d_out" else W.T
  np.testing.assert_allclose(W, _polar(G), atol=0.05)
  assert np.linalg.svd(np.split(W, 3, axis=1)[1], compute_uv=False).min() < 0.2


def test_grouped_kv_fused_qkv_splits_by_head_widths():
  # Phi-3's qkv_proj with H = 4, K = 2, Dh = 4: outputs [16 | 8 | 8], stored (d_out, d_in).
  D, H, K, dh = 16, 4, 2, 4
  G = np.random.default_rng(8).normal(size=(D, (H + 2 * K) * dh))
  grads = {"qkv_proj": {"weight": jnp.asarray(G.T, jnp.float32)}}
  tx = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none", ns_steps=12,
                           coeffs="polar_express", n_heads=H, n_kv_heads=K)
  u = np.asarray(tx.update(grads, tx.init(grads))[0]["qkv_proj"]["weight"], np.float64).T
  for part, G_part in zip(np.split(u, [H * dh, (H + K) * dh], axis=1),
                          np.split(G, [H * dh, (H + K) * dh], axis=1), strict=True):
    np.testing.assert_allclose(part, _polar(G_part), atol=0.05)


def test_equinox_transformer_routes_every_leaf():
  eqx = pytest.importorskip("equinox")
  keys = jax.random.split(jax.random.key(0), 8)
  model = {"emb": eqx.nn.Embedding(50, 32, key=keys[0]),
           "blocks": [{"attn": eqx.nn.MultiheadAttention(4, 32, key=keys[1 + 2 * i]),
                       "mlp": eqx.nn.MLP(32, 32, 64, 1, key=keys[2 + 2 * i]),
                       "norm": eqx.nn.LayerNorm(32)} for i in range(2)],
           "lm_head": eqx.nn.Linear(32, 50, use_bias=False, key=keys[7])}
  params = eqx.filter(model, eqx.is_inexact_array)
  roles = {optim.roles.path_str(p): r
           for p, r in jax.tree_util.tree_leaves_with_path(optim.labels(params))}
  hidden = sorted(p for p, r in roles.items() if r == "hidden")
  assert len(hidden) == 12, hidden  # 4 projections + 2 MLP layers, per block
  assert roles["emb/weight"] == "embedding" and roles["lm_head/weight"] == "unembedding"
  assert {r for p, r in roles.items() if "norm" in p or "bias" in p} == {"vector"}
  tx = optim.muon(0.02, n_heads=4)  # per head on query_proj ... output_proj, (d_out, d_in)
  grads = jax.tree.map(jnp.ones_like, params)
  u, _ = tx.update(grads, tx.init(params), params)
  assert jax.tree.structure(u) == jax.tree.structure(params)


def test_per_head_muon_reads_equinox_projections_in_their_layout():
  # equinox query_proj.weight (H·Dh, D) = (d_out, d_in): head h is rows h·Dh ... (h+1)·Dh, the
  # map D -> Dh; its update must be the polar factor of that block's gradient, on its own.
  H, D = 4, 32
  dh = D // H
  rng = np.random.default_rng(9)
  g_q, g_o = rng.normal(size=(D, D)), rng.normal(size=(D, D))
  grads = {"attn": {"query_proj": {"weight": jnp.asarray(g_q, jnp.float32)},
                    "output_proj": {"weight": jnp.asarray(g_o, jnp.float32)}}}
  tx = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none", ns_steps=12,
                           coeffs="polar_express", n_heads=H)
  u = tx.update(grads, tx.init(grads))[0]["attn"]
  for h in range(H):
    rows = slice(h * dh, (h + 1) * dh)
    np.testing.assert_allclose(np.asarray(u["query_proj"]["weight"])[rows], _polar(g_q[rows]),
                               atol=0.05)
    # output_proj.weight (D, H·Dh): head h is columns h·Dh ..., the map Dh -> D.
    np.testing.assert_allclose(np.asarray(u["output_proj"]["weight"])[:, rows],
                               _polar(g_o[:, rows]), atol=0.05)
