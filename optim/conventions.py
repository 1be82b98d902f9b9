"""Whose leaf is this? The naming conventions of other people's trees, and `place`.

`place(path, leaf)` decides one leaf from its path and number of axes, by this rule:

1. a name of ours at its place in a tree of this library (`transformer.names.library_key`:
   `blocks/attn/w_q`, `embed/embedding`, ...) takes our role and our layout `(..., d_in, d_out)`;
2. a leaf with fewer than two axes is a `vector` (biases, norm scales, LayerNorm `weight`);
3. the layer that owns the leaf (the path segment before it) by `CONVENTIONS` (`embed_tokens`,
   `lm_head`, `q_proj`, ...), then by name families: an owner named like an embedding
   (`emb`, `tok_embed`, `word_embeddings`, ...) is an `embedding`; an `output` inside an
   attention layer (`attn/output`) is a `hidden` projection, not the model's output;
4. the leaf's own name by `CONVENTIONS` (`kernel`, `weight`, `embedding`, `scale`, ...; a flat
   tree `{"q_proj": W}` is placed the same way; our names outside our trees, e.g. a user's
   `attn/w_q`, are hidden matrices whose layout only their author knows);
5. else nothing: `optim.labels` then looks at shapes, and raises when they do not decide.

A placement by a generic name (`GENERIC`: `kernel`, `weight`, `w`, `output`, `decoder`, ...)
is checked against the shapes of the tree by `optim.labels` (a "hidden" `weight` of the
vocabulary's shape, an "output" with no vocabulary axis are ambiguities it names).

Paths are read as `/`-joined keys (`fc1/kernel`); a `.` inside a key splits it too, so a flat
state dict `{"model.layers.0.self_attn.q_proj.weight": W}` reads as nested, and the `value`
key of a `flax.nnx` variable is dropped (`fc1/kernel/value` is `fc1/kernel`).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from transformer import names as _names
from transformer.linalg.axes import MatrixAxes

KERNEL = MatrixAxes(-2, -1)
TORCH = MatrixAxes(-1, -2)


class Convention(NamedTuple):
  """One row of `CONVENTIONS`: what a name means in someone else's parameter tree.

  Attributes:
    role: one of `ROLES`.
    match: `"owner"` (the name of the layer holding the leaf, e.g. `lm_head` of
      `lm_head/kernel`) or `"leaf"` (the leaf's own name, e.g. `kernel`). An owner name also
      places a leaf of that name in a flat tree (`{"lm_head": W}`).
    source: whose convention it is.
    axes: the matrix layout of its 2-D leaves, or `None` to take it from the leaf's name.
  """

  role: str
  match: Literal["owner", "leaf"]
  source: str
  axes: MatrixAxes | None = None


def _rows(role, match, source, keys, axes=None):
  return {k: Convention(role, match, source, axes) for k in keys.split()}


#: The naming conventions of other people's trees, one line per convention: owners first, then
#: leaf names (rules 3 and 4 of the module docstring).
CONVENTIONS: dict[str, Convention] = {
    # Embeddings: the token table and learned positions. Rows are the vocabulary: x_onehot @ E.
    **_rows("embedding", "leaf", "flax linen / nnx `Embed`", "embedding", KERNEL),
    **_rows("embedding", "owner", "Hugging Face Llama, Mistral, Qwen, OPT, Gemma",
            "embed_tokens embed_positions", KERNEL),
    **_rows("embedding", "owner", "Hugging Face GPT-2, GPT-J", "wte wpe", KERNEL),
    **_rows("embedding", "owner", "Hugging Face BERT, RoBERTa",
            "word_embeddings position_embeddings token_type_embeddings", KERNEL),
    **_rows("embedding", "owner", "Hugging Face GPT-NeoX, T5", "embed_in shared", KERNEL),
    # The output matrix (logits), never orthogonalized.
    **_rows("unembedding", "owner", "Hugging Face causal LMs", "lm_head"),
    **_rows("unembedding", "owner", "Hugging Face GPT-NeoX; Meta Llama", "embed_out output"),
    **_rows("unembedding", "owner", "classifier heads", "unembed head classifier score"),
    **_rows("unembedding", "owner", "common names of a readout to the vocabulary",
            "to_vocab to_logits logits readout decoder lm_out vocab_proj"),
    # Hidden matrices by layer name (their leaf is `weight` or `kernel`, or the name itself).
    **_rows("hidden", "owner", "Hugging Face Llama, Mistral, Qwen, OPT, BART",
            "q_proj k_proj v_proj o_proj out_proj qkv_proj gate_proj up_proj down_proj "
            "fc1 fc2"),
    **_rows("hidden", "owner", "Hugging Face GPT-2 `Conv1D` (stored `(d_in, d_out)`)",
            "c_attn c_proj c_fc", KERNEL),
    **_rows("hidden", "owner", "Hugging Face BERT, GPT-NeoX, GPT-J",
            "query key value dense query_key_value dense_h_to_4h dense_4h_to_h fc_in fc_out"),
    **_rows("hidden", "owner", "Meta Llama", "wq wk wv wo w1 w2 w3"),
    **_rows("hidden", "owner", "equinox `MultiheadAttention`",
            "query_proj key_proj value_proj output_proj"),
    # By leaf name: the weight of any dense, linear, einsum or conv layer; norms and biases.
    **_rows("hidden", "leaf", "flax linen / nnx `Dense`, `Linear`, `Einsum`, `Conv`", "kernel",
            KERNEL),
    **_rows("hidden", "leaf", "PyTorch / Hugging Face state dicts, equinox `Linear`", "weight",
            TORCH),
    **_rows("hidden", "leaf", "Haiku `Linear`", "w", KERNEL),
    **_rows("hidden", "leaf", "PyTorch `nn.MultiheadAttention` (a fused `(3D, D)` q, k, v)",
            "in_proj_weight", TORCH),
    **_rows("hidden", "leaf", "our names outside our trees (a 2-D one read as x @ W)",
            "w_q w_k w_v w_o w_1 w_2 w_gate", KERNEL),
    **_rows("vector", "leaf", "norm scales and biases at any rank (a scanned LayerNorm)",
            "scale bias"),
}

#: Attention projections of other people's trees, by the layer that owns the leaf: which side of
#: the `(d_in, d_out)` matrix holds the heads (`columns` of q, k, v; `rows` of the output) and
#: whether they count query heads (`H`) or key/value heads (`K`). A 2-D leaf is read by its
#: convention (an equinox or PyTorch `weight` is `(d_out, d_in)`); a 3-D flax kernel carries its
#: head axis (`nnx.MultiHeadAttention`'s `query/kernel` `(D, H, Dh)`, `out/kernel` `(H, Dh, D)`).
HEAD_NAMES: dict[str, tuple[str, str]] = {
    # equinox `MultiheadAttention`
    "query_proj": ("columns", "H"), "key_proj": ("columns", "K"),
    "value_proj": ("columns", "K"), "output_proj": ("rows", "H"),
    # Hugging Face Llama, Mistral, Qwen, OPT, BART; Meta Llama
    "q_proj": ("columns", "H"), "k_proj": ("columns", "K"), "v_proj": ("columns", "K"),
    "o_proj": ("rows", "H"), "wq": ("columns", "H"), "wk": ("columns", "K"),
    "wv": ("columns", "K"), "wo": ("rows", "H"),
    # flax linen / nnx `MultiHeadAttention` (`out` only inside an attention layer, or 3-D)
    "query": ("columns", "H"), "key": ("columns", "K"), "value": ("columns", "K"),
    "out": ("rows", "H"),
}

#: Fused q, k, v projections, by the name of their layer (or leaf): one matrix whose output side
#: is `[q | k | v]`, contiguous. Muon orthogonalizes each of the three on its own (`split_qkv=`).
#: Not here: GPT-NeoX's `query_key_value`, whose output interleaves q, k, v per head.
FUSED_QKV = frozenset("qkv c_attn in_proj in_proj_weight qkv_proj Wqkv W_pack to_qkv".split())

#: Names too common to trust alone: `optim.labels` checks a placement by one of them against
#: the tree's vocabulary shape, and says so when the two disagree.
GENERIC = frozenset("kernel weight w w_q w_k w_v w_o w_1 w_2 w_gate output decoder".split())

# Rule 3's name families: an embedding table (`emb`, `tok_embed`, `word_embeddings`,
# `pos_emb`; never `unembed`, `embed_out`, `embed_proj`), and an attention layer.
_EMBEDDING_OWNER = re.compile(r"(?:[a-z0-9]+_)*(?:emb|embed|embeds|embedding|embeddings)",
                              re.IGNORECASE)
_ATTENTION = re.compile(r"attn|attention|mha", re.IGNORECASE)
_POSITIONAL = re.compile(r"pos|wpe", re.IGNORECASE)


def path_str(path) -> str:
  """The string of a key path as `optim` reads it: `/`-joined, `.` splits a key, and the
  `value` of a `flax.nnx` variable dropped.

  Example:
    >>> import jax
    >>> from optim.roles import path_str
    >>> tree = {"model.layers.0.mlp.up_proj.weight": 0, "fc1": {"kernel": 1}}
    >>> [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)]
    ['fc1/kernel', 'model/layers/0/mlp/up_proj/weight']
  """
  if isinstance(path, str):
    return path
  path = tuple(path)
  if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
    path = path[:-1]  # an nnx `Variable`'s array
  return _names.path_str(path).replace(".", "/")


class Placement(NamedTuple):
  """Where `place` put one leaf.

  Attributes:
    role: one of `ROLES`, or `None` for a leaf of two or more axes that no rule places.
    axes: its matrix layout (`None` for vectors, and for foreign leaves of three or more axes,
      whose layout only the user can state).
    rule: what decided: `"transformer.names"`, `"shape"`, a `CONVENTIONS` key, or the owner
      that a name family matched (`"tok_embed"`, `"attn/output"`).
  """

  role: str | None
  axes: MatrixAxes | None
  rule: str | None


def is_positional(path: str) -> bool:
  """Whether an embedding at `path` is a table of positions (`wpe`, `pos_embed`, ...)."""
  return bool(_POSITIONAL.search("/".join(path.split("/")[-2:])))


def place(path, leaf) -> Placement:
  """The role and matrix layout of one leaf, by the rule of the module docstring.

  Args:
    path: a key path or its string (`fc1/kernel`).
    leaf: the leaf (anything with `.ndim`) or its number of axes.

  Returns:
    A `Placement`.

  Example:
    >>> from optim.roles import place
    >>> place("model/layers/0/self_attn/q_proj/weight", 2)
    Placement(role='hidden', axes=MatrixAxes(reduction=-1, output=-2), rule='q_proj')
    >>> place("lm_head/kernel", 2).role, place("ln_f/weight", 1).role, place("x/y", 2).role
    ('unembedding', 'vector', None)
    >>> place("tok_embed/weight", 2).role, place("attn/output/weight", 2).role
    ('embedding', 'hidden')
  """
  s = path_str(path)
  ndim = leaf if isinstance(leaf, int) else jnp.ndim(leaf)
  key = _names.library_key(s)
  if key is not None:
    name = _names.NAMES[key]
    return Placement(name.update, KERNEL if name.update != "vector" else None,
                     "transformer.names")
  if ndim < 2:
    return Placement("vector", None, "shape")
  parts = s.split("/")
  owner = parts[-2] if len(parts) > 1 else None
  parent = parts[-3] if len(parts) > 2 else ""
  own = CONVENTIONS.get(parts[-1])
  if own is not None and own.role == "vector":
    return Placement("vector", None, parts[-1])  # before the owner: `q_proj/bias` (L, D)
  leaf_axes = own.axes if own is not None else None
  found = None
  if owner in CONVENTIONS and CONVENTIONS[owner].match == "owner":
    found = owner
    conv = CONVENTIONS[owner]
    if conv.role == "unembedding" and owner == "output" and _ATTENTION.search(parent):
      # `attn/output`: the attention's output projection, not the model's.
      conv, found = Convention("hidden", "owner", "attention output"), f"{parent}/{owner}"
  elif owner is not None and _EMBEDDING_OWNER.fullmatch(owner):
    conv, found = Convention("embedding", "owner", "embedding family", KERNEL), owner
  elif parts[-1] in CONVENTIONS:
    found = parts[-1]
    conv = CONVENTIONS[found]
  if found is None:
    return Placement(None, None, None)
  axes = conv.axes or leaf_axes or KERNEL
  return Placement(conv.role, axes if ndim == 2 else None, found)


def head_name(path, ndim: int) -> tuple[str, str] | None:
  """`HEAD_NAMES`' entry for a foreign leaf (`(side, "H" | "K")`), or `None`.

  The owner of the leaf (`query_proj` of `attn/query_proj/weight`) is looked up; `out` counts
  only inside an attention layer or as a 3-D kernel (else it may be the model's output).

  Example:
    >>> from optim.conventions import head_name
    >>> head_name("blocks/0/attn/query_proj/weight", 2), head_name("attn/out/kernel", 3)
    (('columns', 'H'), ('rows', 'H'))
    >>> head_name("decoder/out/kernel", 2) is None
    True
  """
  s = path_str(path)
  if _names.library_key(s) is not None or ndim < 2:
    return None
  parts = s.split("/")
  owner = parts[-2] if len(parts) > 1 else None
  found = HEAD_NAMES.get(owner)
  if found is None:
    return None
  if owner == "out" and ndim == 2 and not _ATTENTION.search("/".join(parts[:-2])):
    return None
  return found


def fused_qkv(path) -> bool:
  """Whether the leaf at `path` is a fused q, k, v projection by name (`FUSED_QKV`): its layer
  (`c_attn/weight`, `qkv/kernel`) or the leaf itself (`in_proj_weight`, a flat `{"qkv": W}`)."""
  parts = path_str(path).split("/")
  if _names.library_key("/".join(parts)) is not None:
    return False
  return parts[-1] in FUSED_QKV or (len(parts) > 1 and parts[-2] in FUSED_QKV
                                    and parts[-1] in ("weight", "kernel", "w"))
