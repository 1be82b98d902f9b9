"""Named matrices and per-head circuits against slicing the weights by hand."""

import jax
import numpy as np

import transformer
from analysis.weights import circuits, matrices


def test_matrices_lists_every_weight_per_layer_and_the_tied_output():
  cfg = transformer.preset("tiny", d_model=32, n_heads=4)
  params = transformer.init(cfg, jax.random.key(0))
  entries = matrices(params, cfg, include_circuits=False)
  paths = [(m.path, m.layer) for m in entries]
  assert paths[:2] == [("embed/embedding", None), ("pos_embed/embedding", None)]
  assert ("blocks/ffn/w_2", 1) in paths and paths[-1] == ("embed/embedding^T", None)
  assert len(entries) == 2 + 6 * cfg.n_layers + 1
  w_o_1 = next(m.array for m in entries if m.path == "blocks/attn/w_o" and m.layer == 1)
  np.testing.assert_array_equal(w_o_1, params["blocks"]["attn"]["w_o"][1])
  full = matrices(params, cfg)
  assert sum(m.role == "circuit" for m in full) == 2 * cfg.n_layers * cfg.n_heads


def test_circuits_equal_hand_sliced_products_with_gqa():
  cfg = transformer.preset("llama-tiny", d_model=32, n_heads=4, n_kv_heads=2, d_ff=64)
  params = transformer.init(cfg, jax.random.key(1))
  attn = {k: np.asarray(v, np.float64) for k, v in params["blocks"]["attn"].items()}
  c = circuits(params, cfg)
  dh = cfg.d_head
  for l in range(cfg.n_layers):
    for h in range(cfg.n_heads):
      kv = h // (cfg.n_heads // cfg.n_kv_heads)
      W_Q = attn["w_q"][l][:, h * dh:(h + 1) * dh]
      W_K = attn["w_k"][l][:, kv * dh:(kv + 1) * dh]
      W_V = attn["w_v"][l][:, kv * dh:(kv + 1) * dh]
      W_O = attn["w_o"][l][h * dh:(h + 1) * dh, :]
      np.testing.assert_allclose(c["qk"].dense()[l, h], W_Q @ W_K.T, rtol=1e-5, atol=1e-9)
      np.testing.assert_allclose(c["ov"].dense()[l, h], W_V @ W_O, rtol=1e-5, atol=1e-9)
  qk = np.asarray(c["qk"].dense()[0, 0])
  assert np.linalg.matrix_rank(qk, tol=1e-4 * np.linalg.norm(qk, 2)) == dh  # rank <= dh


def test_tied_query_key_circuits_are_symmetric_psd_and_bounded():
  """With `qk_tied` there is no `w_k`: the circuit `W_Q W_Qᵀ` is a Gram matrix (float64 check),
  and the certified logit bound still holds on the measured scores."""
  import analysis

  cfg = transformer.preset("tiny", d_model=32, n_heads=4, qk_tied=True)
  params = transformer.init(cfg, jax.random.key(3))
  assert "w_k" not in params["blocks"]["attn"]
  W = np.asarray(circuits(params, cfg)["qk"].dense(), np.float64)  # (L, H, D, D)
  np.testing.assert_allclose(W, np.swapaxes(W, -1, -2), atol=1e-6)
  assert np.linalg.eigvalsh(W).min() > -1e-6
  tokens = jax.random.randint(jax.random.key(4), (2, 16), 0, cfg.vocab_size)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                               mutable=["intermediates"])
  scores = state["intermediates"]["blocks"]["attn"]["scores"][0]
  assert bool((analysis.max_logit(scores) <= analysis.logit_bound(params, cfg)).all())
