"""Roles from parameter paths: only hidden matrices ever reach Muon.

(`optim/roles.py`; the public names are `optim.labels`, `optim.select`, `optim.head_layout`.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim
import transformer
from optim.roles import head_layout, merge_heads, split_heads

# Written out here, not read from `transformer.names`, so the test checks the table.
HIDDEN = ("w_q", "w_k", "w_v", "w_o", "w_1", "w_2", "w_gate")


@pytest.fixture(scope="module", params=["tiny", "llama-tiny"])
def model(request):
  overrides = {"tie_embeddings": False} if request.param == "tiny" else {}
  cfg = transformer.preset(request.param, **overrides)
  return cfg, transformer.init(cfg, jax.random.key(0))


def test_roles_of_the_transformer(model):
  cfg, params = model
  roles = dict((jax.tree_util.keystr(p), r) for p, r in
               jax.tree_util.tree_leaves_with_path(optim.labels(params)))
  for path, r in roles.items():
    name = path.split("'")[-2]
    expected = ("hidden" if name in HIDDEN else "embedding"
                if name == "embedding" else "unembedding" if name == "w_out" else "vector")
    assert r == expected, path
  assert roles["['embed']['embedding']"] == "embedding"
  assert roles["['blocks']['attn']['w_q']"] == "hidden"
  assert roles["['blocks']['norm_1']['scale']"] == "vector"
  if "['unembed']['w_out']" in roles:
    assert roles["['unembed']['w_out']"] == "unembedding"
  assert "hidden" in roles.values() and "vector" in roles.values()


def test_embedding_unembedding_vectors_never_reach_muon(model):
  cfg, params = model
  grads = jax.tree.map(lambda p: jnp.cos(jnp.arange(p.size, dtype=jnp.float32)).reshape(p.shape),
                       params)
  tx = optim.muon(0.02, adam_learning_rate=1e-3, adam_b1=0.8, adam_b2=0.9, adam_weight_decay=0.1)
  # AdamW's Nesterov momentum follows Muon's `nesterov` (True), as optax.contrib.muon's.
  adam = optax.adamw(1e-3, b1=0.8, b2=0.9, weight_decay=0.1, nesterov=True)
  u, _ = jax.jit(tx.update)(grads, tx.init(params), params)
  u_adam, _ = adam.update(grads, adam.init(params), params)
  roles = optim.labels(params)
  for a, b, r in zip(jax.tree.leaves(u), jax.tree.leaves(u_adam), jax.tree.leaves(roles),
                     strict=True):
    if r == "hidden":
      assert not np.allclose(a, b)
    else:
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def test_select_by_role_and_name(model):
  _, params = model
  residual = optim.select(names=("w_o", "w_2"))(params)
  assert residual["blocks"]["attn"]["w_o"] and residual["blocks"]["ffn"]["w_2"]
  assert not residual["blocks"]["attn"]["w_q"] and not residual["embed"]["embedding"]
  everything = optim.select(roles=None)(params)
  assert all(jax.tree.leaves(everything))
  with pytest.raises(ValueError, match="unknown role"):
    optim.select(roles=("weights",))


def test_head_layout_and_split_roundtrip(model):
  cfg, params = model
  layout = head_layout(params, cfg.n_heads, cfg.n_kv_heads)
  attn = layout["blocks"]["attn"]
  assert attn["w_q"] == ("columns", cfg.n_heads) and attn["w_o"] == ("rows", cfg.n_heads)
  assert attn["w_k"] == ("columns", cfg.n_kv_heads) and layout["blocks"]["ffn"]["w_1"] is None
  w_q = params["blocks"]["attn"]["w_q"]
  blocks = split_heads(w_q, cfg.n_heads, "columns")
  np.testing.assert_array_equal(blocks[:, 1], w_q[:, :, cfg.d_head:2 * cfg.d_head])
  np.testing.assert_array_equal(merge_heads(blocks, "columns"), w_q)
  w_o = params["blocks"]["attn"]["w_o"]
  rows = split_heads(w_o, cfg.n_heads, "rows")
  np.testing.assert_array_equal(rows[:, 1], w_o[:, cfg.d_head:2 * cfg.d_head])
  np.testing.assert_array_equal(merge_heads(rows, "rows"), w_o)
