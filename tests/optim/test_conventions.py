"""Foreign trees as a new user brings them: equinox modules, readouts named `to_vocab`,
`logits`, `readout`, `decoder`, an attention `output`, a user's own `w_q` of shape
`(D, H, Dh)`, and keys that name nothing.

Done when: every hidden matrix is orthogonalized (singular values of each of its matrices
those of Newton–Schulz applied to the gradient's, computed here in float64), every embedding
and output gets AdamW's update exactly, and every ambiguity is one line naming the leaf and
the fix. (`optim/conventions.py`: `place`, `CONVENTIONS`; `optim/roles.py`: `labels`.)
"""

import dataclasses
import functools

import jax
import numpy as np
import pytest

import optim
from tests.optim.test_foreign import D, F, H, V, _array, _check_muon, _grads, _one_line, _plain

# ------------------------------------------------------------------------------ equinox-like
# Modules registered as dataclasses flatten exactly as equinox's do: `GetAttrKey` paths,
# `embedding.weight` -> "embedding/weight"; `Linear.weight` is `(d_out, d_in)`.


def _module(cls):
  cls = dataclasses.dataclass(cls)
  return jax.tree_util.register_dataclass(
      cls, data_fields=[f.name for f in dataclasses.fields(cls)], meta_fields=[])


@_module
class Embedding:
  weight: jax.Array  # (num_embeddings, embedding_size)


@_module
class Linear:
  weight: jax.Array  # (out_features, in_features)
  bias: jax.Array


@_module
class LayerNorm:
  weight: jax.Array
  bias: jax.Array


@_module
class Attention:
  w_q: jax.Array  # the user's own einsum kernel (D, H, Dh): not our `blocks/attn/w_q`
  output: Linear  # the attention's output projection (D, D)


@_module
class EquinoxLM:
  emb: Embedding
  norm: LayerNorm
  attn: Attention
  fc1: Linear
  fc2: Linear
  to_vocab: Linear


def _linear(rng, d_out, d_in):
  return Linear(_array(rng.normal(size=(d_out, d_in)) / np.sqrt(d_in)), _array(np.zeros(d_out)))


def equinox_lm(seed=0):
  rng = np.random.default_rng(seed)
  return EquinoxLM(
      emb=Embedding(_array(rng.normal(size=(V, D)))),
      norm=LayerNorm(_array(np.ones(D)), _array(np.zeros(D))),
      attn=Attention(_array(rng.normal(size=(D, H, D // H))), _linear(rng, D, D)),
      fc1=_linear(rng, F, D), fc2=_linear(rng, D, F), to_vocab=_linear(rng, V, D))


def _roles(params, **kw):
  return {optim.roles.path_str(p): r
          for p, r in jax.tree_util.tree_leaves_with_path(optim.labels(params, **kw))}


EINSUM = {"attn/w_q": optim.MatrixAxes(0, (1, 2))}  # the user's (D, H, Dh) as one (D, H·Dh)


def test_equinox_model_roles_and_muon_step():
  params = equinox_lm()
  roles = _roles(params)
  assert roles == {
      "emb/weight": "embedding", "norm/weight": "vector", "norm/bias": "vector",
      "attn/w_q": "hidden", "attn/output/weight": "hidden", "attn/output/bias": "vector",
      "fc1/weight": "hidden", "fc1/bias": "vector", "fc2/weight": "hidden",
      "fc2/bias": "vector", "to_vocab/weight": "unembedding", "to_vocab/bias": "vector"}
  # The user's `w_q` is not ours: its (D, H, Dh) layout is theirs to state, in one line.
  with pytest.raises(ValueError) as e:
    optim.muon(0.02).init(params)
  _one_line(e, "'attn/w_q' (32, 4, 8)", "matrix_axes=")
  hidden = {"attn/w_q", "attn/output/weight", "fc1/weight", "fc2/weight"}
  shapes = {"attn/w_q": (D, D, lambda m: m[0].reshape(D, H, D // H), 1),
            "attn/output/weight": (D, D, lambda m: m[0], 1),
            "fc1/weight": (F, D, lambda m: m[0], 1), "fc2/weight": (D, F, lambda m: m[0], 1)}
  grads = _grads(params, lambda p, s: shapes.get(p))
  as_matrices = lambda p, x: (np.asarray(x).reshape(1, D, D) if p == "attn/w_q" else _plain(p, x))
  tx = optim.muon(1.0, shape_scaling="none", adam_learning_rate=1.0, matrix_axes=EINSUM)
  _check_muon(params, grads, hidden, as_matrices, tx)


@pytest.mark.parametrize("owner", ["embedding", "tok_embed", "emb", "embed", "word_embeddings",
                                   "token_embedding", "pos_emb"])
def test_embedding_names_of_equinox_and_others(owner):
  tree = {owner: {"weight": _array(np.ones((V, D)))}, "fc": {"weight": _array(np.ones((D, D)))}}
  assert _roles(tree)[f"{owner}/weight"] == "embedding"
  assert optim.roles.place(f"{owner}/weight", 2).axes == optim.MatrixAxes(-2, -1)  # x_1hot @ E


@pytest.mark.parametrize("owner", ["to_vocab", "logits", "readout", "decoder", "lm_head",
                                   "to_logits", "output"])
def test_readout_names_are_the_output(owner):
  tree = {"emb": {"weight": _array(np.ones((V, D)))}, owner: {"weight": _array(np.ones((V, D)))}}
  assert _roles(tree)[f"{owner}/weight"] == "unembedding"


@pytest.mark.parametrize("parent", ["attn", "attention", "self_attn", "SelfAttention_0", "mha"])
def test_an_attention_output_is_hidden(parent):
  tree = {parent: {"output": {"kernel": _array(np.ones((D, D)))}}}
  assert _roles(tree)[f"{parent}/output/kernel"] == "hidden"
  assert _roles({"output": {"kernel": _array(np.ones((D, V)))}})["output/kernel"] == "unembedding"
  # equinox MultiheadAttention's projections.
  mha = {k: {"weight": _array(np.ones((D, D)))} for k in ("query_proj", "key_proj",
                                                          "value_proj", "output_proj")}
  assert set(_roles({"mha": mha}).values()) == {"hidden"}


def test_our_names_in_a_user_tree_are_the_users():
  """`w_q`, `w_2` of ours apply (role, layout, heads) only at their place in our trees."""
  user = {"attn": {"w_q": _array(np.ones((D, H, D // H))), "w_o": _array(np.ones((D, D)))},
          "w_2": _array(np.ones((F, D)))}
  place = optim.roles.place
  assert place("attn/w_q", 3) == optim.roles.Placement("hidden", None, "w_q")  # layout: ask
  assert place("blocks/attn/w_q", 3).axes == optim.MatrixAxes(-2, -1)  # ours: (L, D, H·Dh)
  assert place("params/blocks/ffn/w_2", 3).rule == "transformer.names"
  assert optim.head_layout(user, n_heads=H) == {"attn": {"w_q": None, "w_o": None},
                                                "w_2": None}
  with pytest.raises(ValueError) as e:
    optim.spectral_cap(1.0).init(user)
  _one_line(e, "'attn/w_q' (32, 4, 8)", "matrix_axes=")
  state = optim.spectral_cap(1.0, matrix_axes=EINSUM).init(user).inner_state
  assert state.v["attn"]["w_q"].shape == (D,)  # one (D, H·Dh) matrix, its right vector


def test_shape_evidence_places_unnamed_tables_and_refuses_contradictions():
  emb = {"emb": {"weight": _array(np.ones((V, D)))}}
  # An unnamed leaf whose leading axis is the vocabulary is an embedding; last axis, output.
  roles = _roles({**emb, "table": {"rows": _array(np.ones((V, D)))},
                  "proj": {"cols": _array(np.ones((D, V)))}})
  assert roles["table/rows"] == "embedding" and roles["proj/cols"] == "unembedding"
  assert _roles({"tokens": {"table": _array(np.ones((V, D)))}}, vocab_size=V) == {
      "tokens/table": "embedding"}
  # A generic "hidden" name on the vocabulary table's shape: ambiguous, one line.
  with pytest.raises(ValueError) as e:
    optim.labels({**emb, "proj": {"weight": _array(np.ones((V, D)))}})
  # The likely roles first: a (V, D) `weight` maps D -> V, the output; never 'hidden' first.
  _one_line(e, "'proj/weight' (40, 32)", "'emb/weight'", "overrides={'proj/weight': 'output'}",
            "(or 'embedding', 'hidden')")
  # An "output" with no vocabulary axis, in a tree with a vocabulary: ambiguous, one line.
  with pytest.raises(ValueError) as e:
    optim.labels({**emb, "output": {"weight": _array(np.ones((D, D)))}})
  _one_line(e, "'output/weight' (32, 32)", "vocabulary size 40", "overrides=")
  # The fix the message names works.
  fixed = optim.labels({**emb, "output": {"weight": _array(np.ones((D, D)))}},
                       overrides={"output/weight": "hidden"})
  assert fixed["output"]["weight"] == "hidden"
  # A specific hidden name is trusted whatever its shape (here V == F by coincidence).
  assert _roles({**emb, "q_proj": {"weight": _array(np.ones((V, D)))}})["q_proj/weight"] == (
      "hidden")


def test_keys_that_name_nothing_raise_one_line():
  params = equinox_lm()
  with pytest.raises(ValueError) as e:
    optim.labels(params, overrides={"fc3/weight": "hidden"})
  _one_line(e, "overrides", "'fc3/weight'", "'fc1/weight'")
  with pytest.raises(ValueError) as e:
    optim.labels(params, overrides={"fc1/weight": "dense"})
  _one_line(e, "unknown role 'dense'", "'hidden'")
  for build in (lambda: optim.muon(0.02, matrix_axes={"atn/w_q": EINSUM["attn/w_q"]}),
                lambda: optim.spectral_cap(1.0, matrix_axes={"atn/w_q": EINSUM["attn/w_q"]}),
                lambda: optim.scale_by_condition(matrix_axes={"atn/w_q": EINSUM["attn/w_q"]})):
    with pytest.raises(ValueError) as e:
      build().init(params)
    _one_line(e, "matrix_axes", "'atn/w_q'", "'attn/w_q'")
  with pytest.raises(ValueError) as e:
    optim.orthogonal_heads(1e-3, H, matrix_axes={"atn/w_q": EINSUM["attn/w_q"]}).update(
        params, optim.orthogonal_heads(1e-3, H).init(params), params)
  _one_line(e, "'atn/w_q'", "'attn/w_q'")


def test_label_fn_roles_and_structure_are_checked():
  params = equinox_lm()
  bad_role = lambda p: jax.tree.map(lambda x: "matrix" if np.ndim(x) == 2 else "vector", p)
  for build in (lambda: optim.muon(0.02, label_fn=bad_role, matrix_axes=EINSUM),
                lambda: optim.spectral_cap(1.0, mask=optim.select(label_fn=bad_role))):
    with pytest.raises(ValueError) as e:
      build().init(params)
    _one_line(e, "label_fn gave 'matrix'", "'emb/weight'", "hidden")
  wrong_tree = lambda p: {"fc1": "hidden"}
  with pytest.raises(ValueError) as e:
    optim.muon(0.02, label_fn=wrong_tree).init(params)
  _one_line(e, "does not match the parameters", "'fc1'")
  # A correct label_fn of one's own is trusted.
  label_fn = functools.partial(optim.labels, overrides={"emb/weight": "embedding"})
  assert optim.muon(0.02, label_fn=label_fn, matrix_axes=EINSUM).init(params) is not None
