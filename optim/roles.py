"""Parameter roles from parameter paths, for our trees and everyone else's; role masks;
which axes of a leaf are the matrix; and per-head blocks of the projections.

Every transform in `optim` decides what to touch by role (`hidden`, `embedding`,
`unembedding`, `vector`), and roles come from one function, `labels`, which reads one rule:

1. a name of ours (`transformer.names`, the naming authority of this library) wins;
2. a leaf with fewer than two axes is a `vector` (biases, norm scales, LayerNorm `weight`);
3. else the table `CONVENTIONS` places the leaf by the layer that owns it (`embed_tokens`,
   `lm_head`, `q_proj`, ... — the path segment before the leaf), then by its own name
   (`kernel`, `weight`, `embedding`, ...; a flat tree `{"q_proj": W}` is placed the same way);
4. a leaf of two or more axes that no rule places is an error naming it and the fix: a
   `label_fn` of your own, `labels(params, overrides={...})`, or `labels_by_shape` (optax's
   every-2-D rule). Nothing unrecognised is ever orthogonalized silently.

Paths are read as `/`-joined keys (`fc1/kernel`); a `.` inside a key splits it too, so a flat
state dict `{"model.layers.0.self_attn.q_proj.weight": W}` reads as nested, and the `value`
key of a `flax.nnx` variable is dropped (`fc1/kernel/value` is `fc1/kernel`).

Matrix axes (`MatrixAxes`, as optax's `MuonDimensionNumbers`): which axes of a leaf are the
reduction (input) and output axes of its matrix; every other axis is a batch of independent
matrices. Ours are `(..., d_in, d_out)` with a stacked layer axis; a 2-D foreign leaf takes
the layout of its convention (`kernel` is `(d_in, d_out)`, a PyTorch or equinox `weight` is
`(d_out, d_in)`); a foreign leaf of three or more axes (a scanned stack, an `nn.Einsum`
kernel, a convolution) is ambiguous and needs an explicit `matrix_axes` in `optim.muon`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from transformer import names as _names

# The one head split lives beside `Name.heads`; re-exported here for `optim.orthogonalized`.
from transformer.names import Side as Side
from transformer.names import merge_heads as merge_heads
from transformer.names import split_heads as split_heads

ROLES = _names.UPDATE_ROLES


class MatrixAxes(NamedTuple):
  """Which axes of a leaf are its matrix: `x @ W` reduces over `reduction`, yields `output`.

  Every other axis is a batch axis: each index of the batch axes is one matrix, orthogonalized
  (or measured) on its own. An entry may be a tuple of axes, flattened in order (an `nn.Einsum`
  kernel `(D, H, Dh)` with `reduction=0, output=(1, 2)` is one `(D, H·Dh)` matrix; with
  `reduction=0, output=2` it is `H` matrices `(D, Dh)`, one per head).

  Attributes:
    reduction: the input axis or axes (`d_in`); negative values count from the end.
    output: the output axis or axes (`d_out`).

  Example:
    >>> import optim
    >>> optim.MatrixAxes()            # ours and linen/nnx `kernel`: (..., d_in, d_out)
    MatrixAxes(reduction=-2, output=-1)
    >>> optim.MatrixAxes(-1, -2)      # PyTorch / equinox `weight`: (d_out, d_in)
    MatrixAxes(reduction=-1, output=-2)
  """

  reduction: int | tuple[int, ...] = -2
  output: int | tuple[int, ...] = -1


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


# The naming conventions of other people's trees, one line per convention; rule 3 of the module
# docstring reads owners first, then leaf names.
CONVENTIONS: dict[str, Convention] = {
    # Embeddings: the token table and learned positions.
    **_rows("embedding", "leaf", "flax linen / nnx `Embed`", "embedding"),
    **_rows("embedding", "owner", "Hugging Face Llama, Mistral, Qwen, OPT, Gemma",
            "embed_tokens embed_positions"),
    **_rows("embedding", "owner", "Hugging Face GPT-2, GPT-J", "wte wpe"),
    **_rows("embedding", "owner", "Hugging Face BERT, RoBERTa",
            "word_embeddings position_embeddings token_type_embeddings"),
    **_rows("embedding", "owner", "Hugging Face GPT-NeoX, T5", "embed_in shared"),
    **_rows("embedding", "owner", "Meta Llama, nanoGPT, common names",
            "tok_embeddings tok_emb pos_emb embed embeddings token_embedding "
            "position_embedding"),
    # The output matrix (logits), never orthogonalized.
    **_rows("unembedding", "owner", "Hugging Face causal LMs", "lm_head"),
    **_rows("unembedding", "owner", "Hugging Face GPT-NeoX; Meta Llama", "embed_out output"),
    **_rows("unembedding", "owner", "classifier heads", "unembed head classifier score"),
    # Hidden matrices by layer name (their leaf is `weight` or `kernel`, or the name itself).
    **_rows("hidden", "owner", "Hugging Face Llama, Mistral, Qwen, OPT, BART",
            "q_proj k_proj v_proj o_proj out_proj qkv_proj gate_proj up_proj down_proj "
            "fc1 fc2"),
    **_rows("hidden", "owner", "Hugging Face GPT-2 `Conv1D` (stored `(d_in, d_out)`)",
            "c_attn c_proj c_fc", KERNEL),
    **_rows("hidden", "owner", "Hugging Face BERT, GPT-NeoX, GPT-J",
            "query key value dense query_key_value dense_h_to_4h dense_4h_to_h fc_in fc_out"),
    **_rows("hidden", "owner", "Meta Llama", "wq wk wv wo w1 w2 w3"),
    # Hidden matrices by leaf name: the weight of any dense, linear, einsum or conv layer.
    **_rows("hidden", "leaf", "flax linen / nnx `Dense`, `Linear`, `Einsum`, `Conv`", "kernel",
            KERNEL),
    **_rows("hidden", "leaf", "PyTorch / Hugging Face state dicts, equinox `Linear`", "weight",
            TORCH),
    **_rows("hidden", "leaf", "Haiku `Linear`", "w", KERNEL),
}


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
    rule: what decided: `"transformer.names"`, `"shape"` or the `CONVENTIONS` key.
  """

  role: str | None
  axes: MatrixAxes | None
  rule: str | None


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
  """
  s = path if isinstance(path, str) else path_str(path)
  ndim = leaf if isinstance(leaf, int) else jnp.ndim(leaf)
  key = _names.key_of(s)
  if key is not None:
    name = _names.NAMES[key]
    return Placement(name.update, KERNEL if name.update != "vector" else None,
                     "transformer.names")
  if ndim < 2:
    return Placement("vector", None, "shape")
  parts = s.split("/")
  owner = parts[-2] if len(parts) > 1 else None
  found = None
  if owner in CONVENTIONS and CONVENTIONS[owner].match == "owner":
    found = owner
  elif parts[-1] in CONVENTIONS:
    found = parts[-1]
  if found is None:
    return Placement(None, None, None)
  conv = CONVENTIONS[found]
  axes = conv.axes or CONVENTIONS.get(parts[-1], conv).axes or KERNEL
  return Placement(conv.role, axes if ndim == 2 else None, found)


def _listing(items: list[str], limit: int = 4) -> str:
  """`'a' (2, 3), 'b' (4, 5) and 3 more`."""
  shown = ", ".join(items[:limit])
  return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _is_masked(x) -> bool:
  return isinstance(x, optax.MaskedNode)


def _whole(tree) -> bool:
  """Whether `tree` is a whole parameter tree, not the part `optax.masked`/`partition` passes
  on (where the other parts are `optax.MaskedNode`s and selecting nothing is legitimate)."""
  return not any(_is_masked(x) for x in jax.tree.leaves(tree, is_leaf=_is_masked))


def labels(params, *, overrides: Mapping[str, str] | None = None):
  """The role of every leaf of a parameter tree: ours, linen/nnx, equinox or Hugging Face.

  Roles (see the module docstring for the rule, `transformer.names.NAMES` for our names and
  `CONVENTIONS` for everyone else's):

  - `hidden`: the matrices Muon orthogonalizes — ours `w_q, w_k, w_v, w_o, w_1, w_2, w_gate`;
    any `kernel` (linen/nnx `Dense`, `Linear`, `Einsum`, `Conv`) or 2-D `weight` (PyTorch,
    equinox) not owned by an embedding or output layer; `q_proj`, `c_attn`, `fc1`, ...;
  - `embedding`: `embedding` leaves, `embed_tokens`, `wte`, `wpe`, ...;
  - `unembedding`: `unembed/w_out`, `lm_head`, `head`, `classifier`, ...;
  - `vector`: every leaf of fewer than two axes.

  Args:
    params: a parameter pytree (a `{"params": ...}` wrapper and an `nnx.State` are fine).
    overrides: path suffix (on `/` boundaries) -> role, deciding before every rule, e.g.
      `{"encoder/proj": "hidden", "readout": "unembedding"}`.

  Returns:
    A pytree of the same structure with one of `ROLES` at each leaf — the `param_labels`
    of `optax.partition`.

  Raises:
    ValueError: (one line) naming every leaf of two or more axes that no rule places, and the
      fixes.

  Example:
    >>> import jax, jax.numpy as jnp, optim, transformer
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> optim.labels(params)["blocks"]["attn"]["w_q"]
    'hidden'
    >>> linen = {"params": {"fc1": {"kernel": jnp.ones((4, 8)), "bias": jnp.ones(8)},
    ...                     "lm_head": {"kernel": jnp.ones((8, 5))}}}
    >>> optim.labels(linen)["params"]
    {'fc1': {'bias': 'vector', 'kernel': 'hidden'}, 'lm_head': {'kernel': 'unembedding'}}
  """
  overrides = dict(overrides or {})
  for r in overrides.values():
    if r not in ROLES:
      raise ValueError(f"optim.labels: unknown role {r!r} in overrides; choose from {ROLES}")
  unplaced = []

  def role(path, leaf):
    s = path_str(path)
    for suffix, r in overrides.items():
      if s == suffix or s.endswith("/" + suffix):
        return r
    r = place(s, leaf).role
    if r is None:
      unplaced.append(f"{s!r} {tuple(jnp.shape(leaf))}")
    return r

  roles = jax.tree_util.tree_map_with_path(role, params)
  if unplaced:
    raise ValueError(
        f"optim.labels: no naming convention places {len(unplaced)} leaves of >= 2 axes: "
        f"{_listing(unplaced)}; pass label_fn= (your own `params -> roles`, or "
        f"optim.labels_by_shape for every 2-D leaf), or "
        f"label_fn=functools.partial(optim.labels, overrides={{'NAME': 'hidden'}})")
  return roles


def labels_by_shape(params):
  """optax's rule: every 2-D leaf is `hidden`, every other leaf a `vector`.

  This is `optax.contrib.muon`'s default: it orthogonalizes the embedding and the output
  matrix too, and leaves stacked `(L, d_in, d_out)` leaves to AdamW. Pass it on purpose:
  `optim.muon(0.02, label_fn=optim.labels_by_shape)`.

  Args:
    params: any parameter pytree.

  Returns:
    A pytree of the same structure with `hidden` or `vector` at each leaf.

  Example:
    >>> import jax.numpy as jnp, optim
    >>> optim.labels_by_shape({"a": jnp.ones((3, 4)), "b": jnp.ones(4), "c": jnp.ones((2, 3, 4))})
    {'a': 'hidden', 'b': 'vector', 'c': 'vector'}
  """
  return jax.tree.map(lambda x: "hidden" if jnp.ndim(x) == 2 else "vector", params)


def _matches(path: str, name: str) -> bool:
  """Whether `name` is a run of whole `/` segments of `path` (`w_o`, `attn/w_o`, `fc2`)."""
  return f"/{name}/" in f"/{path}/"


def select(
    *,
    roles: Iterable[str] | None = ("hidden",),
    names: Iterable[str] | None = None,
    label_fn: Callable | None = None,
) -> Callable:
  """A mask function `params -> bool pytree`, for `optax.masked` and the `mask=` arguments.

  A leaf is selected when its role is in `roles` and (if given) one of `names` is a run of
  whole segments of its path (`"w_o"`, `"attn/w_o"`, or a layer's name such as `"fc2"`).

  Args:
    roles: roles to select (see `labels`); `None` for every role.
    names: names to select, e.g. `("w_o", "w_2")` for the matrices that write into the
      residual stream; `None` for every name.
    label_fn: `params -> role pytree`; default `labels`. With the default, a mask that selects
      no leaf of a whole tree raises (naming the leaves and the fix); with a `label_fn` of
      your own an empty selection is yours to make.

  Returns:
    `mask_fn(params)` with `True` at selected leaves.

  Example:
    >>> import jax, transformer, optim
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> residual_branches = optim.select(names=("w_o", "w_2"))
    >>> mask = residual_branches(params)
    >>> bool(mask["blocks"]["attn"]["w_o"]), bool(mask["blocks"]["attn"]["w_q"])
    (True, False)
  """
  roles = None if roles is None else frozenset(roles)
  names = None if names is None else frozenset(names)
  for r in roles or ():
    if r not in ROLES:
      raise ValueError(f"select: unknown role {r!r}; choose from {ROLES}")
  strict = label_fn is None
  label_fn = labels if label_fn is None else label_fn

  def mask_fn(params):
    role_tree = label_fn(params)

    def chosen(path, r):
      s = path_str(path)
      return (roles is None or r in roles) and (names is None or any(_matches(s, n)
                                                                     for n in names))

    mask = jax.tree_util.tree_map_with_path(chosen, role_tree)
    if strict and _whole(params) and not any(jax.tree.leaves(mask)):
      leaves = [f"{path_str(p)!r} {r}" for p, r in jax.tree_util.tree_leaves_with_path(role_tree)]
      raise ValueError(
          f"optim.select: no leaf has a role in {sorted(roles) if roles else 'any'} and a name "
          f"in {sorted(names) if names else 'any'}; the leaves are {_listing(leaves, 6)}; "
          f"choose roles=/names= that exist, or pass label_fn=")
    return mask

  return mask_fn


def default_mask(caller: str) -> Callable:
  """The default `mask` of a transform on matrices: the `hidden` role, loud when it is empty
  or holds a foreign leaf of three or more axes (whose matrix only the user can name).

  Args:
    caller: the transform's name, for the error message.

  Returns:
    `mask_fn(params)`.
  """
  hidden = select()

  def mask_fn(params):
    mask = hidden(params)
    ambiguous = [f"{path_str(p)!r} {tuple(jnp.shape(x))}"
                 for (p, x), m in zip(jax.tree_util.tree_leaves_with_path(params),
                                      jax.tree.leaves(mask), strict=True)
                 if m and jnp.ndim(x) > 2 and _names.key_of(path_str(p)) is None]
    if ambiguous:
      raise ValueError(
          f"optim.{caller}: the default mask would treat the leading axes of "
          f"{_listing(ambiguous)} as a batch of matrices, which only you can confirm; pass "
          f"mask= (e.g. optim.select(names=(...))) with the leaves whose last two axes are "
          f"(d_in, d_out)")
    return mask

  return mask_fn


def _axes_tuple(axes, ndim: int) -> tuple[int, ...]:
  axes = (axes,) if isinstance(axes, int) else tuple(axes)
  return tuple(a % ndim for a in axes)


def as_matrices(x: jax.Array, axes: MatrixAxes):
  """`x` as a batch of matrices `(*batch, d_in, d_out)` by `axes`, and the inverse map.

  Args:
    x: a leaf of any rank >= 2.
    axes: its `MatrixAxes`; the batch axes keep their order.

  Returns:
    `(M, restore)`: `M` of shape `(*batch, prod(reduction), prod(output))` and
    `restore(M') -> array shaped like x`.

  Example:
    >>> import jax.numpy as jnp
    >>> from optim.roles import MatrixAxes, as_matrices
    >>> M, restore = as_matrices(jnp.zeros((16, 4, 8)), MatrixAxes(reduction=0, output=2))
    >>> M.shape, restore(M).shape
    ((4, 16, 8), (16, 4, 8))
  """
  red, out = _axes_tuple(axes.reduction, x.ndim), _axes_tuple(axes.output, x.ndim)
  if set(red) & set(out) or len(set(red)) < len(red) or len(set(out)) < len(out):
    raise ValueError(f"MatrixAxes: reduction and output axes must be distinct, got {axes} "
                     f"for {x.shape=}")
  batch = tuple(a for a in range(x.ndim) if a not in red + out)
  order = batch + red + out
  moved_shape = tuple(x.shape[a] for a in order)
  shape = (moved_shape[: len(batch)] + (math.prod(x.shape[a] for a in red),
                                         math.prod(x.shape[a] for a in out)))
  inverse = tuple(order.index(a) for a in range(x.ndim))

  def restore(M):
    return jnp.transpose(M.reshape(moved_shape), inverse)

  return jnp.transpose(x, order).reshape(shape), restore


AxesSpec = MatrixAxes | Mapping[str, MatrixAxes] | Callable | None


def resolve_axes(params, spec: AxesSpec = None, *, strict: bool = False) -> list:
  """The `MatrixAxes` of every leaf of `params`, in `jax.tree.leaves` order.

  Args:
    params: a pytree.
    spec: `None` (from `place`: ours and 2-D leaves by their convention, leading axes a batch
      otherwise); one `MatrixAxes` for every leaf; a mapping path suffix -> `MatrixAxes`
      (leaves it does not name fall back to `None`'s rule); or `params -> pytree of
      MatrixAxes | None`.
    strict: raise for a leaf of three or more axes that neither `spec` nor our names place.

  Returns:
    A list of `MatrixAxes`, one per leaf.
  """
  leaves = jax.tree_util.tree_leaves_with_path(params)
  if callable(spec) and not isinstance(spec, MatrixAxes):
    given = jax.tree.leaves(spec(params), is_leaf=lambda a: a is None or isinstance(a, MatrixAxes))
    if len(given) != len(leaves):
      raise ValueError(f"resolve_axes: the spec function returned {len(given)} leaves for a tree "
                       f"of {len(leaves)}; return one MatrixAxes (or None) per leaf")
  else:
    given = [None] * len(leaves)
  out, ambiguous, first = [], [], None
  for (path, x), g in zip(leaves, given, strict=True):
    s = path_str(path)
    if isinstance(spec, MatrixAxes):
      g = spec
    elif isinstance(spec, Mapping):
      g = next((a for k, a in spec.items() if s == k or s.endswith("/" + k)), None)
    if g is None:
      g = place(s, x).axes
      if g is None:
        if strict and jnp.ndim(x) > 2:
          ambiguous.append(f"{s!r} {tuple(jnp.shape(x))}")
          first = first or s
        g = KERNEL
    out.append(g)
  if ambiguous:
    raise ValueError(
        f"optim.muon: which axes are the matrix of {_listing(ambiguous)}? pass "
        f"matrix_axes={{{first!r}: optim.MatrixAxes(reduction=..., output=...)}} "
        f"(optim.MatrixAxes(-2, -1) for a scanned (L, d_in, d_out) stack; "
        f"MatrixAxes(0, (1, 2)) for an nn.Einsum (D, H, Dh) kernel as one matrix)")
  return out


def head_layout(params, n_heads: int, n_kv_heads: int | None = None):
  """Per leaf, how its matrices split into heads: `(side, count)` or `None`.

  `w_q` and `w_o` split into `n_heads` heads (`H`), `w_k` and `w_v` into `n_kv_heads` (`K`,
  default `n_heads`; grouped-query attention has fewer): `Name.heads` of
  `transformer.names`. Every other leaf is `None`.

  Args:
    params: a parameter (or update) pytree.
    n_heads: query heads `H`.
    n_kv_heads: key/value heads `K`.

  Returns:
    A pytree of the same structure (its leaves are tuples or `None`; map over it with
    `is_leaf=lambda x: x is None or isinstance(x, tuple)`).
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, _: head_split(path, n_heads, n_kv_heads), params)


def head_split(path, n_heads: int, n_kv_heads: int | None = None):
  """`head_layout` of one key path: `(side, count)` or `None`."""
  heads = _names.name_of(path_str(path)).heads
  if heads is None:
    return None
  return heads[0], {"H": n_heads, "K": n_heads if n_kv_heads is None else n_kv_heads}[heads[1]]


def unzip_tree(like, tree_of_tuples, n: int):
  """A pytree of `n`-tuples (structured like `like`) as `n` pytrees; `n` copies of the (leafless)
  tree when `like` has no leaves, as when a mask selects nothing inside `optax.partition`."""
  if not jax.tree.leaves(like):
    return (tree_of_tuples,) * n
  return jax.tree.transpose(jax.tree.structure(like), jax.tree.structure((0,) * n),
                            tree_of_tuples)
