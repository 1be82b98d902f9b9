"""Parameter roles from parameter paths and shapes, for our trees and everyone else's; role masks;
and per-head blocks of the projections.

Every transform in `optim` decides what to touch by role (`hidden`, `embedding`,
`unembedding`, `vector`), and roles come from one function, `labels`:

1. `overrides` (path suffix -> role) decide first; a key that names no leaf raises;
2. names: `optim.conventions.place` (ours at their place in our trees, then `CONVENTIONS`,
   the names of linen/nnx, equinox, Haiku and Hugging Face trees);
3. shapes: the vocabulary size (rows of the token embeddings, or `vocab_size=`) is evidence.
   An unnamed 2-D leaf whose leading axis is the vocabulary is an `embedding`, one whose last
   axis is, the `unembedding`; a generic name (`weight`, `kernel`, `output`, ...) that the
   shape contradicts (a "hidden" `(V, D)` table, an "output" with no vocabulary axis) is an
   ambiguity;
4. a leaf of two or more axes that no rule places, and every ambiguity, raises one line naming
   the leaves and the fix (`overrides=`, a `label_fn` of your own, or `labels_by_shape`,
   optax's every-2-D rule). Nothing unrecognised is ever orthogonalized silently.

Which axes of a leaf are its matrix is `MatrixAxes` (`optim.axes`; the type lives in
`transformer.linalg` so that `analysis` reads it too). The names below are re-exported from
`optim.conventions` and `optim.axes`, so `optim.roles.place`, `optim.roles.path_str`,
`optim.roles.as_matrices` keep working.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import optax

from optim.axes import AxesSpec as AxesSpec
from optim.axes import ambiguous_leaves, check_keys, listing, suffix_matches
from optim.axes import resolve_axes as resolve_axes
from optim.conventions import CONVENTIONS as CONVENTIONS
from optim.conventions import GENERIC, fused_qkv, head_name, is_positional, path_str, place
from optim.conventions import KERNEL as KERNEL
from optim.conventions import TORCH as TORCH
from optim.conventions import Convention as Convention
from optim.conventions import Placement as Placement
from transformer import names as _names
from transformer.linalg.axes import MatrixAxes as MatrixAxes
from transformer.linalg.axes import as_matrices as as_matrices
from transformer.linalg.axes import as_matrix_axes, ask_matrix_axes

# The one head split lives beside `Name.heads`; re-exported here for `optim.orthogonalized`.
from transformer.names import Side as Side
from transformer.names import merge_heads as merge_heads
from transformer.names import split_heads as split_heads

# Names of an output (logits) layer and of an embedding, for the hints of `labels`' messages.
_OUTPUT_NAME = re.compile(r"(^|/|_)(out|output|logits?|head|vocab|readout|unembed\w*)(/|_|$)",
                          re.IGNORECASE)
_EMBED_NAME = re.compile(r"emb|wte|wpe|tok", re.IGNORECASE)

#: The four roles a leaf can have: `hidden` (to Muon), `embedding`, `unembedding`, `vector`.
ROLES = _names.UPDATE_ROLES
_listing = listing  # the name `optim.orthogonalized` and older callers use


def _is_masked(x) -> bool:
  return isinstance(x, optax.MaskedNode)


def _whole(tree) -> bool:
  """Whether `tree` is a whole parameter tree, not the part `optax.masked`/`partition` passes
  on (where the other parts are `optax.MaskedNode`s and selecting nothing is legitimate)."""
  return not any(_is_masked(x) for x in jax.tree.leaves(tree, is_leaf=_is_masked))


def labels(params, *, overrides: Mapping[str, str] | None = None,
           vocab_size: int | None = None):
  """The role of every leaf of a parameter tree: ours, linen/nnx, equinox or Hugging Face.

  Roles (see the module docstring for the rule, `transformer.names.NAMES` for our names and
  `CONVENTIONS` for everyone else's):

  - `hidden`: the matrices Muon orthogonalizes — ours `w_q, w_k, w_v, w_o, w_1, w_2, w_gate`;
    any `kernel` (linen/nnx `Dense`, `Linear`, `Einsum`, `Conv`) or 2-D `weight` (PyTorch,
    equinox) not owned by an embedding or output layer; `q_proj`, `c_attn`, `fc1`, ...;
  - `embedding`: `embedding` leaves, `embed_tokens`, `wte`, `wpe`, equinox `Embedding`s
    named `emb`, `tok_embed`, ..., and unnamed tables whose leading axis is the vocabulary;
  - `unembedding`: `unembed/w_out`, `lm_head`, `head`, `classifier`, `to_vocab`, `readout`,
    `logits`, `decoder`, ...;
  - `vector`: every leaf of fewer than two axes, and norm scales and biases (`scale`,
    `bias`) at any rank.

  Args:
    params: a parameter pytree (a `{"params": ...}` wrapper and an `nnx.State` are fine; an
      equinox module after `eqx.filter(model, eqx.is_inexact_array)`).
    overrides: path suffix (on `/` boundaries) -> role, deciding before every rule, e.g.
      `{"encoder/proj": "hidden", "readout": "output"}` (`"output"` is a synonym of
      `"unembedding"`). A key that names no leaf raises.
    vocab_size: the vocabulary size `V`, as shape evidence; default the row counts of the
      leaves that names place as token embeddings.

  Returns:
    A pytree of the same structure with one of `ROLES` at each leaf — the `param_labels`
    of `optax.partition`.

  Raises:
    ValueError: (one line) naming every leaf of two or more axes that no rule places, every
      leaf whose name and shape disagree, an unknown role or override key, and the fixes.

  Example:
    >>> import jax, jax.numpy as jnp, optim, transformer
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> optim.labels(params)["blocks"]["attn"]["w_q"]
    'hidden'
    >>> linen = {"params": {"fc1": {"kernel": jnp.ones((4, 8)), "bias": jnp.ones(8)},
    ...                     "lm_head": {"kernel": jnp.ones((8, 5))}}}
    >>> optim.labels(linen)["params"]
    {'fc1': {'bias': 'vector', 'kernel': 'hidden'}, 'lm_head': {'kernel': 'unembedding'}}
    >>> eqx = {"emb": {"weight": jnp.ones((5, 4))}, "to_vocab": {"weight": jnp.ones((5, 4))}}
    >>> optim.labels(eqx)
    {'emb': {'weight': 'embedding'}, 'to_vocab': {'weight': 'unembedding'}}
  """
  # `'output'` names the output layer's role in words: it is the `unembedding`.
  overrides = {k: "unembedding" if r == "output" else r for k, r in (overrides or {}).items()}
  for k, r in overrides.items():
    if r not in ROLES:
      raise ValueError(f"optim.labels: unknown role {r!r} for {k!r} in overrides; choose from "
                       f"{ROLES}")
  if overrides:
    check_keys(overrides, params, "optim.labels: overrides")
  if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                 or vocab_size < 1):
    raise ValueError(f"optim.labels: vocab_size={vocab_size!r}; pass a positive int or None")
  leaves = [(path_str(p), x) for p, x in jax.tree_util.tree_leaves_with_path(params)]
  decided = {}
  for s, x in leaves:
    r = next((r for k, r in overrides.items() if suffix_matches(s, k)), None)
    decided[s] = (r, "overrides") if r is not None else place(s, x)[::2]
  tables = [(s, tuple(jnp.shape(x))) for s, x in leaves
            if decided[s][0] == "embedding" and decided[s][1] != "overrides"
            and jnp.ndim(x) == 2 and not is_positional(s)]
  # V -> (D, the table's path): the shape evidence (`vocab_size=` alone: D unknown).
  vocab = ({vocab_size: None} if vocab_size is not None
           else {shape[0]: (shape[1], s) for s, shape in tables})
  unplaced, ambiguous = [], []
  for s, x in leaves:
    role, rule = decided[s]
    shape = tuple(jnp.shape(x))
    if rule in ("overrides", "transformer.names") or len(shape) < 2 or not vocab:
      if role is None:
        unplaced.append(f"{s!r} {shape}")
      continue
    m, n = shape[-2:]
    vocab_shaped = any(v in (m, n) and (d is None or {m, n} == {v, d[0]})
                       for v, d in vocab.items())
    if role is None and len(shape) == 2 and (m in vocab or n in vocab):
      role = "embedding" if m in vocab else "unembedding"
    elif role == "hidden" and rule in GENERIC and vocab_shaped:
      src = next((f" of {d[1]!r}" for d in vocab.values() if d), "")
      ambiguous.append((s, shape, "hidden", f"its shape is that of the vocabulary table{src}"))
    elif role == "unembedding" and rule in GENERIC and not (m in vocab or n in vocab):
      ambiguous.append((s, shape, "the output", f"no axis is the vocabulary size "
                        f"{'/'.join(map(str, sorted(vocab)))}"))
    if role is None:
      unplaced.append(f"{s!r} {shape}")
    decided[s] = (role, rule)
  if ambiguous:
    s, shape, said, why = ambiguous[0]
    others = f" (and {len(ambiguous) - 1} more)" if len(ambiguous) > 1 else ""
    # The likely role first: never 'hidden' for a leaf shaped like the vocabulary table (that
    # would orthogonalize the output or the embedding).
    likely = (("output", "embedding", "hidden") if said == "hidden" and
              (_OUTPUT_NAME.search(s) or not _EMBED_NAME.search(s))
              else ("embedding", "output", "hidden") if said == "hidden"
              else ("hidden", "embedding", "output"))
    raise ValueError(
        f"optim.labels: name and shape disagree for {s!r} {shape}{others}: its name says "
        f"{said} but {why}; state its role with overrides={{{s!r}: {likely[0]!r}}} (or "
        f"{likely[1]!r}, {likely[2]!r}), or pass label_fn=")
  if unplaced:
    guess = "output" if _OUTPUT_NAME.search(unplaced[0].split("'")[1]) else "hidden"
    raise ValueError(
        f"optim.labels: no naming convention places {len(unplaced)} leaves of >= 2 axes: "
        f"{listing(unplaced)}; pass label_fn= (your own `params -> roles`, or "
        f"optim.labels_by_shape for every 2-D leaf), or "
        f"label_fn=functools.partial(optim.labels, overrides={{{unplaced[0].split(chr(39))[1]!r}: "
        f"{guess!r}}}) ('output' for the layer that makes the logits)")
  it = iter(decided[s][0] for s, _ in leaves)
  return jax.tree.map(lambda _: next(it), params)


def check_roles(roles, params, caller: str) -> None:
  """Raise (one line) when a `label_fn`'s result does not fit `params` or holds a role not in
  `ROLES`, naming the leaf and the fix."""
  is_str = lambda x: isinstance(x, str)
  got = jax.tree_util.tree_leaves_with_path(roles, is_leaf=is_str)
  want = [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
  paths = [path_str(p) for p, _ in got]
  if paths != want:
    extra = [p for p in paths if p not in set(want)] or paths
    raise ValueError(f"{caller}: label_fn returned a tree that does not match the parameters "
                     f"(e.g. {extra[:2]} against the leaves {listing(want)}); return one role "
                     f"per leaf of params, in its structure")
  for p, r in got:
    if r not in ROLES:
      raise ValueError(f"{caller}: label_fn gave {r!r} to {path_str(p)!r}; a role is one of "
                       f"{ROLES}")


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
      your own an empty selection is yours to make (a role not in `ROLES`, or a tree that does
      not match the parameters, still raises).

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
  for arg, value in (("roles", roles), ("names", names)):
    if isinstance(value, str):
      raise ValueError(f"optim.select: {arg}={value!r} is a str; pass a tuple, e.g. "
                       f"{arg}=({value!r},)")
  roles = None if roles is None else frozenset(roles)
  names = None if names is None else frozenset(names)
  for r in roles or ():
    if r not in ROLES:
      raise ValueError(f"optim.select: unknown role {r!r}; choose from {ROLES}")
  strict = label_fn is None
  label_fn = labels if label_fn is None else label_fn

  def mask_fn(params):
    role_tree = label_fn(params)
    if not strict:
      check_roles(role_tree, params, "optim.select")

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


def default_mask(caller: str, matrix_axes: AxesSpec = None) -> Callable:
  """The default `mask` of a transform on matrices: the `hidden` role, loud when it is empty
  or holds a foreign leaf of three or more axes whose matrix neither our names nor
  `matrix_axes` state (only the user can).

  Args:
    caller: the transform's name, for the error message.
    matrix_axes: the transform's `matrix_axes=` (see `optim.axes`).

  Returns:
    `mask_fn(params)`.
  """
  hidden = select()

  def mask_fn(params):
    mask = hidden(params)
    ambiguous = ambiguous_leaves(params, mask, matrix_axes)
    if ambiguous:
      ask_matrix_axes(ambiguous, ambiguous[0].split("'")[1], f"optim.{caller}")
    return mask

  return mask_fn


def checked_mask(mask, matrix_axes: AxesSpec, caller: str) -> Callable:
  """`mask` (a bool tree or `params -> bool tree`; `None` for `default_mask`) that also checks,
  on the whole tree, that every key of a `matrix_axes` mapping names a leaf, and that every
  chosen leaf of three or more axes has its matrix stated (ours, or by `matrix_axes`)."""
  inner = default_mask(caller, matrix_axes) if mask is None else mask

  def mask_fn(params):
    if isinstance(matrix_axes, Mapping) and _whole(params):
      check_keys(matrix_axes, params, f"optim.{caller}: matrix_axes")
    chosen = inner(params) if callable(inner) else inner
    if mask is not None:
      ambiguous = ambiguous_leaves(params, chosen, matrix_axes)
      if ambiguous:
        ask_matrix_axes(ambiguous, ambiguous[0].split("'")[1], f"optim.{caller}")
    return chosen

  return mask_fn


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


def head_split(path, n_heads: int, n_kv_heads: int | None = None, *, ndim: int | None = None):
  """`head_layout` of one key path: `(side, count)` or `None`.

  Ours (`blocks/attn/w_q`, ...) by `transformer.names`; with `ndim=2`, also the 2-D attention
  projections of other people's trees by `HEAD_NAMES` (equinox `query_proj` ... `output_proj`,
  Hugging Face `q_proj` ... `o_proj`, linen/nnx `query` ... `out`), whose side is that of the
  `(d_in, d_out)` matrix their convention reads (an equinox `weight` is stored transposed).
  """
  key = _names.library_key(path_str(path))
  heads = None if key is None else _names.NAMES[key].heads  # ours, in our trees only
  if heads is None and ndim == 2:
    heads = head_name(path, ndim)
  if heads is None:
    return None
  return heads[0], {"H": n_heads, "K": n_heads if n_kv_heads is None else n_kv_heads}[heads[1]]


#: `split_qkv=`: `True` (the names of `FUSED_QKV`), `False` (none), or a mapping path suffix ->
#: parts (`3`, `(q, k, v)` output widths, or `None` not to split), added to the names.
SplitSpec = bool | Mapping[str, int | tuple[int, ...] | None]


def check_split(spec, caller: str):
  """`split_qkv=` checked at construction (one line naming the fix)."""
  if isinstance(spec, bool):
    return spec
  fix = ("pass True (split the fused q, k, v of optim.conventions.FUSED_QKV), False, or a "
         "mapping path suffix -> 3, (q_width, k_width, v_width) or None")
  if not isinstance(spec, Mapping):
    raise ValueError(f"{caller}: split_qkv={spec!r}; {fix}")
  out = {}
  for k, v in spec.items():
    ok = (v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
          or (isinstance(v, tuple) and len(v) >= 1 and all(
              isinstance(i, int) and not isinstance(i, bool) and i >= 1 for i in v)))
    if not isinstance(k, str) or not ok:
      raise ValueError(f"{caller}: split_qkv[{k!r}]={v!r}; {fix}")
    out[k] = v
  return out


def fused_sizes(path, shape, axes, spec, n_heads=None, n_kv_heads=None,
                caller: str = "optim.scale_by_muon") -> tuple[int, ...] | None:
  """The output widths of the matrices a fused q, k, v leaf holds, or `None` (not fused).

  A 2-D leaf named in `FUSED_QKV` (or in a `split_qkv` mapping) is read by `axes` as
  `(d_in, d_out)`, and its output side `[q | k | v]` splits in three equal parts, or, with
  `n_kv_heads < n_heads` (grouped-query attention), in `H : K : K` head widths.

  Raises:
    ValueError: (one line, naming the leaf) when the output side does not split so.
  """
  s = path_str(path)
  parts = None
  if isinstance(spec, Mapping):
    hit = [k for k in spec if suffix_matches(s, k)]
    if hit:
      parts = spec[hit[0]]
      if parts is None:
        return None
  if parts is None and spec is not False and fused_qkv(s):
    parts = 3
  if parts is None or len(shape) != 2:
    return None
  d_out = shape[as_matrix_axes(axes).output % 2] if isinstance(
      as_matrix_axes(axes).output, int) else None
  if d_out is None:
    return None
  if isinstance(parts, tuple):
    widths = parts
  elif (parts == 3 and n_heads and n_kv_heads and n_kv_heads != n_heads
        and d_out % (n_heads + 2 * n_kv_heads) == 0):
    dh = d_out // (n_heads + 2 * n_kv_heads)
    widths = (n_heads * dh, n_kv_heads * dh, n_kv_heads * dh)
  elif d_out % parts == 0:
    widths = (d_out // parts,) * parts
  else:
    widths = None
  if widths is None or sum(widths) != d_out:
    raise ValueError(
        f"{caller}: the fused q, k, v leaf {s!r} {tuple(shape)} has {d_out} outputs, which do "
        f"not split as {parts}; pass split_qkv={{{s!r}: (q_width, k_width, v_width)}}, or "
        f"split_qkv={{{s!r}: None}} to orthogonalize it as one matrix")
  return tuple(widths)


def unzip_tree(like, tree_of_tuples, n: int):
  """A pytree of `n`-tuples (structured like `like`) as `n` pytrees; `n` copies of the (leafless)
  tree when `like` has no leaves, as when a mask selects nothing inside `optax.partition`."""
  if not jax.tree.leaves(like):
    return (tree_of_tuples,) * n
  return jax.tree.transpose(jax.tree.structure(like), jax.tree.structure((0,) * n),
                            tree_of_tuples)
