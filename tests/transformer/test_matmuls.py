"""The matrix catalog agrees with the parameters it describes."""

import jax

import transformer


def test_catalog_lists_every_matrix_with_its_shape():
  cfg = transformer.preset("llama-tiny")
  params = transformer.init(cfg, jax.random.key(0))
  entries = {e.path: e for e in transformer.catalog(params, cfg, seq_len=10)}
  blocks = params["blocks"]
  for group, names in (("attn", ("w_q", "w_k", "w_v", "w_o")),
                       ("ffn", ("w_gate", "w_1", "w_2"))):
    for name in names:
      e = entries[f"blocks/{group}/{name}"]
      assert e.shape == blocks[group][name].shape and e.size == blocks[group][name].size
  assert entries["unembed/w_out"].role == "output"
  assert entries["embed/embedding"].step == 1
  L, H = cfg.n_layers, cfg.n_heads
  assert entries["Q K^T"].shape == (L, H, 10, 10) and entries["Q K^T"].kind == "product"
  assert entries["A V"].shape == (L, 10, H * cfg.d_head)
  n_matrix = sum(e.size for e in entries.values())
  n_all = sum(x.size for x in jax.tree.leaves(params))
  n_vectors = sum(x.size for x in jax.tree.leaves(params) if x.ndim == 1 or
                  (x.ndim == 2 and x.shape[0] == L and x.shape[1] == cfg.d_model))
  assert n_matrix + n_vectors == n_all


def test_tied_catalog_uses_transposed_embedding():
  cfg = transformer.preset("tiny")
  params = transformer.init(cfg, jax.random.key(0))
  out = [e for e in transformer.catalog(params, cfg) if e.role == "output"]
  assert len(out) == 1 and out[0].kind == "tied"
  assert out[0].shape == (cfg.d_model, cfg.vocab_size)
