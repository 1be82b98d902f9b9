"""`matrix_axes=`: which axes of each leaf are its matrix, for every transform in `optim`.

One argument, one type (`MatrixAxes`, from `transformer.linalg`, which `analysis.spectrum`
reads too), accepted by `muon`, `scale_by_muon`, `spectral_cap`, `spectral_normalize`,
`scale_by_condition` and `orthogonal_heads`:

- `None`: ours and 2-D foreign leaves by their convention (`optim.conventions.place`), the
  leading axes a batch otherwise;
- one `MatrixAxes` (or a plain pair `(reduction, output)`) for every leaf;
- a mapping path suffix -> `MatrixAxes` (on `/` boundaries: `"qkv/kernel"`); a key that names
  no leaf of the tree raises, naming the nearest paths;
- a function `params -> pytree of MatrixAxes | None`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from optim.conventions import KERNEL, path_str, place
from transformer import names as _names
from transformer.linalg.axes import (
    MatrixAxes,
    as_matrices,
    as_matrix_axes,
    ask_matrix_axes,
    check_axes,
)

AxesSpec = MatrixAxes | tuple | Mapping[str, MatrixAxes] | Callable | None


def listing(items: list[str], limit: int = 4) -> str:
  """`'a' (2, 3), 'b' (4, 5) and 3 more`."""
  shown = ", ".join(items[:limit])
  return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def suffix_matches(path: str, key: str) -> bool:
  """Whether `key` is `path` or a suffix of it on `/` boundaries (`fc1/kernel`, `kernel`)."""
  return path == key or path.endswith("/" + key)


def nearest(key: str, paths: list[str], n: int = 3) -> list[str]:
  """The `n` leaf paths most like `key` (by their suffixes of as many segments as `key`)."""
  depth = key.count("/") + 1
  tails = {"/".join(p.split("/")[-depth:]): p for p in paths}
  close = difflib.get_close_matches(key, list(tails), n=n, cutoff=0.0)
  return [tails[c] for c in close]


def check_keys(keys, tree, argument: str) -> None:
  """Raise (one line) for a key of `argument` that names no leaf of `tree`.

  Args:
    keys: path suffixes (`overrides`, `matrix_axes` keys).
    tree: the whole parameter tree.
    argument: e.g. `"optim.muon: matrix_axes"`, for the message.
  """
  paths = [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)]
  for key in keys:
    if not isinstance(key, str):
      raise ValueError(f"{argument}: key {key!r} is not a path; use a path suffix string such "
                       f"as {paths[0] if paths else 'fc1/kernel'!r}")
    if not any(suffix_matches(p, key) for p in paths):
      raise ValueError(f"{argument}: key {key!r} names no leaf of the tree; the nearest paths "
                       f"are {nearest(key, paths)}; use a path suffix on '/' boundaries")


def check_spec(spec, caller: str) -> AxesSpec:
  """`matrix_axes=` normalized at construction: plain pairs become `MatrixAxes`.

  Raises:
    ValueError: (one line) for anything that is not one of the forms of the module docstring.
  """
  where = f"{caller}: matrix_axes"
  if spec is None or isinstance(spec, MatrixAxes):
    return None if spec is None else as_matrix_axes(spec, where)
  if isinstance(spec, Mapping):
    return {k: None if a is None else as_matrix_axes(a, f"{where}[{k!r}]")
            for k, a in spec.items()}
  if callable(spec):
    return spec
  if isinstance(spec, tuple | list):
    return as_matrix_axes(spec, where)
  raise ValueError(f"{where}: {spec!r} is not a MatrixAxes; pass a MatrixAxes, a pair "
                   f"(reduction, output), a mapping path suffix -> MatrixAxes, or a function")


def names_leaf(spec, path: str) -> bool:
  """Whether `spec` states the axes of the leaf at `path` (so that it is not ambiguous)."""
  if spec is None:
    return False
  if isinstance(spec, Mapping):
    return any(suffix_matches(path, k) and a is not None for k, a in spec.items())
  return True


def resolve_axes(params, spec: AxesSpec = None, *, strict: bool = False,
                 caller: str = "optim.muon") -> list:
  """The `MatrixAxes` of every leaf of `params`, in `jax.tree.leaves` order, checked.

  Args:
    params: a pytree.
    spec: `matrix_axes=` (see the module docstring).
    strict: raise for a leaf of three or more axes that neither `spec` nor our names place.
    caller: the transform's name, for messages.

  Returns:
    A list of `MatrixAxes`, one per leaf, each in range for its leaf.

  Raises:
    ValueError: (one line) for an ambiguous leaf (with `strict`), or axes out of range.
  """
  spec = check_spec(spec, caller)
  leaves = jax.tree_util.tree_leaves_with_path(params)
  if callable(spec) and not isinstance(spec, MatrixAxes | Mapping):
    given = jax.tree.leaves(spec(params), is_leaf=lambda a: a is None or isinstance(a, tuple))
    if len(given) != len(leaves):
      raise ValueError(f"{caller}: the matrix_axes function returned {len(given)} leaves for a "
                       f"tree of {len(leaves)}; return one MatrixAxes (or None) per leaf")
  else:
    given = [None] * len(leaves)
  out, ambiguous, first = [], [], None
  for (path, x), g in zip(leaves, given, strict=True):
    s = path_str(path)
    if isinstance(spec, MatrixAxes):
      g = spec
    elif isinstance(spec, Mapping):
      g = next((a for k, a in spec.items() if suffix_matches(s, k)), None)
    if g is None:
      g = place(s, x).axes
      if g is None:
        if strict and jnp.ndim(x) > 2:
          ambiguous.append(f"{s!r} {tuple(jnp.shape(x))}")
          first = first or s
        g = KERNEL
    if jnp.ndim(x) >= 2:
      g = check_axes(g, tuple(jnp.shape(x)), repr(s))
    out.append(g)
  if ambiguous:
    ask_matrix_axes(ambiguous, first, caller)
  return out


def ambiguous_leaves(params, mask_tree, spec) -> list[str]:
  """Selected leaves of three or more axes whose matrix is neither ours nor stated by `spec`,
  each as `'path' (shape)` (a mask that is not a full tree of Python bools is not read)."""
  leaves = jax.tree_util.tree_leaves_with_path(params)
  masks = jax.tree.leaves(mask_tree)
  if len(masks) != len(leaves):
    return []
  return [f"{path_str(p)!r} {tuple(jnp.shape(x))}"
          for (p, x), m in zip(leaves, masks, strict=True)
          if isinstance(m, bool | np.bool_) and m and jnp.ndim(x) > 2
          and _names.library_key(path_str(p)) is None and not names_leaf(spec, path_str(p))]


def on_matrices(inner, spec: AxesSpec, caller: str):
  """`inner` (a transform on `(..., m, n)` leaves) run on each leaf's matrices by `spec`.

  Parameters and updates are seen as `(*batch, d_in, d_out)` (`as_matrices`), the inner
  transform runs on that view (its state too), and the updates come back in the leaves' shape.
  With `spec=None`, `inner` itself.
  """
  spec = check_spec(spec, caller)
  if spec is None:
    return inner

  def view(tree):
    axes = resolve_axes(tree, spec, caller=caller)
    pairs = [as_matrices(x, a, repr(path_str(p))) for (p, x), a in
             zip(jax.tree_util.tree_leaves_with_path(tree), axes, strict=True)]
    treedef = jax.tree.structure(tree)
    restores = [r for _, r in pairs]

    def restore(M_tree):
      return jax.tree.unflatten(treedef, [r(M) for r, M in
                                          zip(restores, jax.tree.leaves(M_tree), strict=True)])

    return jax.tree.unflatten(treedef, [M for M, _ in pairs]), restore

  def init_fn(params):
    return inner.init(view(params)[0])

  def update_fn(updates, state, params=None):
    u, restore = view(updates)
    p = None if params is None else view(params)[0]
    u, state = inner.update(u, state, p)
    return restore(u), state

  return optax.GradientTransformation(init_fn, update_fn)
