"""Muon: momentum, orthogonalized by Newton–Schulz, for the hidden matrices only.

Layered as optax does: the array function `transformer.linalg.polar.newton_schulz`,
then `scale_by_muon` (momentum -> orthogonalize -> shape scaling), then `muon`, which adds
decoupled weight decay and the learning rate and sends every non-`hidden` role to AdamW with
its own hyper-parameters. Rectangular matrices (the `(D, 4D)` feed-forward ones, per-head
blocks) are orthogonalized on their short side's Gram matrix in float32, which is where
`muon` gains its speed over `optax.contrib.muon` at the same coefficients.

Under a device mesh (`shard=`, `mesh=`), each momentum matrix is first given a layout for the
iteration: `"owner"` splits the stacked layer axis over the mesh, so every device
orthogonalizes only the layers it owns, with no collective inside the Newton–Schulz
iterations (one all-to-all in, one back out; the design of modded-nanogpt and nanochat,
written as sharding constraints); `"replicate"` gathers every matrix to every device and
orthogonalizes it redundantly. Without `shard`, GSPMD infers a layout from the momentum's,
which for an FSDP-sharded matrix puts reductions inside every iteration
(`python -m experiments.benchmarks.muon_sharding` counts them in the compiled HLO).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from optim import checks
from optim.axes import AxesSpec, check_keys, check_spec, resolve_axes
from optim.owners import Shard, _check_shard, _iteration_sharding
from optim.roles import (
    SplitSpec,
    check_roles,
    check_split,
    fused_sizes,
    head_split,
    labels,
    merge_heads,
    path_str,
    split_heads,
)
from transformer.linalg.axes import as_matrices
from transformer.linalg.polar import coeff_table, newton_schulz

ShapeScaling = Literal["width", "rms", "none"]

# The named scope of the Newton–Schulz iteration in the lowered program: the HLO benchmark
# finds the collectives inside the iterations by it.
NS_SCOPE = "muon_newton_schulz"


class MuonState(NamedTuple):
  """State of `scale_by_muon`: the step count and the momentum (first moment)."""

  count: jax.Array
  mu: optax.Updates


def shape_scale(d_in: int, d_out: int, shape_scaling: ShapeScaling, rms=0.2):
  r"""The factor by which Muon scales an orthogonalized `(d_in, d_out)` update.

  .. math::
    \text{width: } \sqrt{\max(1, d_\text{out}/d_\text{in})}, \qquad
    \text{rms: } \text{rms}\cdot\sqrt{\max(d_\text{in}, d_\text{out})}, \qquad
    \text{none: } 1

  An orthogonal `(d_in, d_out)` matrix has RMS entry `1/sqrt(max(d_in, d_out))`, so `rms`
  scaling gives every update RMS ≈ `rms` — AdamW's typical update RMS for `rms=0.2` — and
  AdamW learning rates and weight decay carry over (Liu et al., 2025).

  Args:
    d_in: rows (reduction axis) of the matrix that was orthogonalized.
    d_out: columns.
    shape_scaling: `"width"` (Jordan's), `"rms"` (update-RMS matching) or `"none"`.
    rms: target update RMS for `"rms"`.

  Returns:
    A scalar.
  """
  checks.at_least(d_in, 1, "d_in", "optim.shape_scale")
  checks.at_least(d_out, 1, "d_out", "optim.shape_scale")
  if shape_scaling == "rms":
    checks.positive(rms, "rms", "optim.shape_scale", example="0.2")
  if shape_scaling == "width":
    return max(1.0, d_out / d_in) ** 0.5
  if shape_scaling == "rms":
    return rms * max(d_in, d_out) ** 0.5
  if shape_scaling == "none":
    return 1.0
  raise ValueError(f"unknown {shape_scaling=}; choose 'width', 'rms' or 'none'")


def scale_by_muon(
    beta=0.95,
    *,
    nesterov: bool = True,
    ns_steps: int | None = None,
    coeffs="standard",
    compute_dtype=None,
    shape_scaling: ShapeScaling = "width",
    rms=0.2,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    mu_dtype=None,
    eps: float = 1e-8,
    gram: bool | None = None,
    shard: Shard | None = None,
    mesh: Mesh | None = None,
    shard_axes: Sequence[str] | None = None,
    matrix_axes: AxesSpec = None,
    split_qkv: SplitSpec = True,
    check_finite: bool = False,
) -> optax.GradientTransformation:
  r"""Momentum, then Newton–Schulz orthogonalization, then shape scaling, per matrix.

  .. math::
    \mu_t = \beta \mu_{t-1} + (1-\beta) g_t, \qquad
    \hat\mu_t = \begin{cases}
      \beta \dfrac{\mu_t}{1-\beta^{t+1}} + (1-\beta)\dfrac{g_t}{1-\beta^t} & \text{nesterov} \\
      \mu_t / (1-\beta^t) & \text{otherwise}
    \end{cases}, \qquad
    u_t = s(d_\text{in}, d_\text{out}) \cdot \mathrm{NS}(\hat\mu_t)

  `NS` is `newton_schulz` (≈ the polar factor `U Vᵀ` of `μ̂`), `s` is `shape_scale`. Every
  leaf must be a matrix `(..., d_in, d_out)`: leading axes (the stacked layer axis) are a
  batch, each matrix orthogonalized on its own. With `n_heads`, `w_q`/`w_k`/`w_v` are
  orthogonalized per head on their columns and `w_o` per head on its rows (block
  `(D, Dh)` / `(Dh, D)`; `s` then uses the block's shape); so are the 2-D projections of other
  people's trees named in `optim.conventions.HEAD_NAMES` (equinox `query_proj` ...
  `output_proj`, Hugging Face `q_proj` ... `o_proj`), read in their `(d_out, d_in)` layout.
  A fused q, k, v leaf (`c_attn`, `qkv`, `in_proj_weight`, ...: `optim.conventions.FUSED_QKV`)
  is three matrices `[q | k | v]` on its output side, each orthogonalized (and scaled) on its
  own; `split_qkv` overrides that.

  Args:
    beta: momentum decay `β`.
    nesterov: use the Nesterov form of `μ̂` above.
    ns_steps: Newton–Schulz iterations (default: 5, or the schedule's length).
    coeffs: Newton–Schulz coefficients: a preset of `NS_COEFFS` — `"standard"` (Jordan's, as
      optax's default), `"polar_express"` (a lower error at the same cost),
      `"polar_express_lean"` (one matrix product fewer per matrix, and on every spectrum
      measured a lower error than `"standard"`) — a triple, or a schedule.
    compute_dtype: dtype of the Newton–Schulz iteration, e.g. `jnp.bfloat16`.
    shape_scaling: `"width"`, `"rms"` or `"none"` (see `shape_scale`).
    rms: target update RMS for `shape_scaling="rms"`.
    n_heads: orthogonalize the attention projections per head (query heads `H`).
    n_kv_heads: key/value heads `K` for the per-head split of `w_k`, `w_v` (default
      `n_heads`).
    mu_dtype: dtype of the momentum; default the updates' dtype.
    eps: added to the Frobenius norm before Newton–Schulz.
    gram: run Newton–Schulz on the short side's Gram matrix (`True`), on the matrix (`False`),
      or where that takes fewer FLOPs in float32 (`None`, see `newton_schulz`): the `(D, 4D)`
      feed-forward matrices then cost 56% of the direct iteration.
    shard: the layout of each matrix during the iteration, on `mesh`: `None` (GSPMD infers
      it from the momentum's sharding), `"owner"` (the stacked layer axis split over the
      mesh, `owner_spec`: each device orthogonalizes only its own layers, no collective
      inside the iterations; a leaf without a divisible layer axis falls back to
      `"replicate"`), or `"replicate"` (every matrix gathered to every device). The
      update leaves in that layout; `jit`'s `out_shardings` or the parameters' sharding
      bring it back. The numbers are those of `shard=None` (to rounding).
    mesh: the `jax.sharding.Mesh` the parameters live on (needed with `shard`).
    shard_axes: mesh axes that own layers (`shard="owner"`); default every axis of `mesh`.
      Pass the axes the parameters are split over (`("fsdp",)` on a `data × fsdp` mesh):
      owning over `data` too halves the work but gathers the results back across the data
      replicas (on `data=2,fsdp=4`, `d=32`: 358 kB per update, more than `"replicate"`'s
      246 kB, against 184 kB for `("fsdp",)`; `experiments.benchmarks.muon_sharding`).
    matrix_axes: which axes of each leaf are its matrix (`optim.MatrixAxes`, as optax's
      `MuonDimensionNumbers`): one for every leaf, a mapping path suffix -> axes, or
      `params -> pytree of MatrixAxes | None`. Default: ours and linen/nnx `kernel` are
      `(..., d_in, d_out)`, a 2-D PyTorch/equinox `weight` is `(d_out, d_in)`, and any other
      leaf's last two axes are the matrix. The update is the same up to a transpose; the
      shape scaling reads `d_in`, `d_out` from it. A plain pair `(reduction, output)` is read
      as one `MatrixAxes`; axes out of range for a leaf raise, naming it.
    split_qkv: `True`: a 2-D leaf named in `optim.conventions.FUSED_QKV` is three equal
      parts of its output side (`H : K : K` head widths with `n_kv_heads < n_heads`);
      `False`: one matrix (optax's); a mapping path suffix -> `3`, output widths `(q, k, v)`
      or `None`, added to the names (`{"c_attn/weight": None}`). A leaf that does not split
      raises, naming it. (GPT-NeoX's per-head interleaved `query_key_value` is not named.)
    check_finite: check every incoming update (and the parameters) for NaN and inf, and raise
      naming the first such leaf (eagerly a one-line `ValueError`; under `jit` when the step
      runs). Off by default: it costs one reduction per leaf and, under `jit`, a host callback.

  Returns:
    An `optax.GradientTransformation` with state `MuonState` (with `check_finite`, the chain
    `(optax.EmptyState(), MuonState)`).

  Raises:
    ValueError: (one line) at construction for a bad argument (`beta` outside `[0, 1)`, a
      str, `ns_steps <= 0`, ...); at `init` for a foreign leaf of 3+ axes without
      `matrix_axes` or a fused leaf that does not split; at `update` for updates shaped
      unlike the momentum, naming the leaf.

  Example:
    >>> import jax.numpy as jnp, optax, optim
    >>> stack = optim.MatrixAxes(-2, -1)  # a bare (L, d_in, d_out) leaf: L matrices, say so
    >>> tx = optax.chain(optim.scale_by_muon(matrix_axes=stack), optax.scale_by_learning_rate(0.02))
    >>> params = {"w_1": jnp.ones((2, 32, 128))}
    >>> updates, state = tx.update(params, tx.init(params))
    >>> updates["w_1"].shape
    (2, 32, 128)

  References:
    Jordan et al., `Muon: An optimizer for hidden layers in neural networks`, 2024.
    Liu et al., `Muon is Scalable for LLM Training`, 2025.
  """
  _check_muon_args("optim.scale_by_muon", beta, ns_steps, n_heads, n_kv_heads,
                   nesterov=nesterov, shape_scaling=shape_scaling, rms=rms, eps=eps, gram=gram)
  coeff_table(coeffs)  # fail at construction on bad coefficients
  _check_shard(shard, mesh, shard_axes)
  matrix_axes = check_spec(matrix_axes, "optim.scale_by_muon")
  split_qkv = check_split(split_qkv, "optim.scale_by_muon")

  def init_fn(params):
    # A foreign leaf of three or more axes must have its matrix named: ask now, not at the
    # first update (and never orthogonalize a guess).
    axes = resolve_axes(params, matrix_axes, strict=True, caller="optim.scale_by_muon")
    _layouts(params, axes)  # a fused leaf that does not split raises here too
    return MuonState(
        count=jnp.zeros([], jnp.int32),
        mu=jax.tree.map(lambda p: jnp.zeros_like(p, dtype=mu_dtype or p.dtype), params),
    )

  def _layouts(tree, axes):
    """Per leaf: `None`, `(side, n)` heads, or `("fused", sizes)` of a fused q, k, v."""
    out = []
    for (path, x), ax in zip(jax.tree_util.tree_leaves_with_path(tree), axes, strict=True):
      fused = fused_sizes(path, jnp.shape(x), ax, split_qkv, n_heads, n_kv_heads,
                          "optim.scale_by_muon")
      if fused is not None:
        out.append(("fused", fused))
      elif n_heads is not None:
        out.append(head_split(path, n_heads, n_kv_heads, ndim=jnp.ndim(x)))
      else:
        out.append(None)
    return out

  def ns(G):
    with jax.named_scope(NS_SCOPE):
      return newton_schulz(G, ns_steps=ns_steps, coeffs=coeffs, compute_dtype=compute_dtype,
                           eps=eps, gram=gram)

  def orthogonalize(x, layout, axes, name):
    if x.ndim < 2:
      raise ValueError(f"optim.scale_by_muon: every leaf must be a (batch of) matrix; {name} "
                       f"has shape {x.shape}; send vectors elsewhere (optim.muon does)")
    M, restore = as_matrices(x, axes, name)  # (..., d_in, d_out); no copy for ours
    where = _iteration_sharding(M.shape, shard, mesh, shard_axes)
    pin = (lambda y: y) if where is None else (
        lambda y: jax.lax.with_sharding_constraint(y, where))
    # Pinned before and after: the iteration between the two constraints runs in one layout,
    # so GSPMD moves data only at the two reshards outside it.
    M = pin(M)
    if layout is None:
      O = pin(ns(M)) * shape_scale(*M.shape[-2:], shape_scaling, rms)
    elif layout[0] == "fused" and len(set(layout[1])) > 1:  # unequal parts (grouped kv)
      cuts = list(itertools.accumulate(layout[1]))[:-1]
      O = pin(jnp.concatenate([ns(P) * shape_scale(*P.shape[-2:], shape_scaling, rms)
                               for P in jnp.split(M, cuts, axis=-1)], axis=-1))
    else:
      side, n = ("columns", len(layout[1])) if layout[0] == "fused" else layout
      blocks = split_heads(M, n, side)
      O = pin(merge_heads(ns(blocks), side)) * shape_scale(*blocks.shape[-2:], shape_scaling,
                                                            rms)
    return restore(O.astype(x.dtype))

  def update_fn(updates, state, params=None):
    del params
    checks.same_tree(updates, state.mu, "optim.scale_by_muon")  # static: free under jit
    count = optax.safe_increment(state.count)
    mu = optax.tree.update_moment(updates, state.mu, beta, 1)
    mu_hat = optax.tree.bias_correction(mu, beta, count)
    if nesterov:
      mu_hat = optax.tree.add(
          optax.tree.scale(beta, optax.tree.bias_correction(mu, beta, count + 1)),
          optax.tree.scale(1 - beta, optax.tree.bias_correction(updates, beta, count)))
    mu_hat = optax.tree.cast_like(mu_hat, updates)
    axes = resolve_axes(mu_hat, matrix_axes, strict=True, caller="optim.scale_by_muon")
    layouts = _layouts(mu_hat, axes)
    leaves = jax.tree_util.tree_leaves_with_path(mu_hat)
    updates = jax.tree.unflatten(jax.tree.structure(mu_hat), [
        orthogonalize(x, lay, ax, repr(path_str(p)))
        for (p, x), lay, ax in zip(leaves, layouts, axes, strict=True)])
    mu = jax.tree.map(lambda m, old: m.astype(old.dtype), mu, state.mu)
    return updates, MuonState(count=count, mu=mu)

  return checks.guarded(optax.GradientTransformation(init_fn, update_fn), check_finite,
                        "optim.scale_by_muon")


def _check_muon_args(caller, beta, ns_steps, n_heads, n_kv_heads, *, nesterov=True,
                     shape_scaling="width", rms=0.2, eps=1e-8, gram=None) -> None:
  """The arguments that would otherwise fail inside the trace, or silently (one line each)."""
  checks.unit_interval(beta, "beta", caller)
  checks.at_least(ns_steps, 1, "ns_steps", caller, allow_none=True)
  checks.heads(n_heads, n_kv_heads, caller, allow_none=True)
  checks.flag(nesterov, "nesterov", caller)
  checks.choice(shape_scaling, ("width", "rms", "none"), "shape_scaling", caller)
  checks.positive(rms, "rms", caller, example="0.2")
  checks.non_negative(eps, "eps", caller, example="1e-8")
  checks.flag(gram, "gram", caller, allow_none=True)


def muon(
    learning_rate: optax.ScalarOrSchedule,
    *,
    beta=0.95,
    nesterov: bool = True,
    ns_steps: int | None = None,
    coeffs="standard",
    compute_dtype=None,
    shape_scaling: ShapeScaling = "width",
    rms=0.2,
    weight_decay=0.0,
    weight_decay_mask=None,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    mu_dtype=None,
    adam_learning_rate: optax.ScalarOrSchedule | None = None,
    adam_b1=0.9,
    adam_b2=0.999,
    adam_eps=1e-8,
    adam_nesterov: bool | None = None,
    adam_weight_decay=0.0,
    muon_roles: Iterable[str] = ("hidden",),
    label_fn: Callable | None = None,
    gram: bool | None = None,
    shard: Shard | None = None,
    mesh: Mesh | None = None,
    shard_axes: Sequence[str] | None = None,
    matrix_axes: AxesSpec = None,
    split_qkv: SplitSpec = True,
    check_finite: bool = False,
) -> optax.GradientTransformation:
  r"""Muon on the `hidden` matrices, AdamW (with its own hyper-parameters) on the rest.

  .. math::
    W \leftarrow W - \eta\,\big(u_t + \lambda W\big)

  with `u_t` from `scale_by_muon`, `η = learning_rate`, `λ = weight_decay` (decoupled, and
  multiplied by `η` as in PyTorch/optax). Roles come from `label_fn` (default
  `optim.labels`); only `muon_roles` (default `hidden`) are orthogonalized — never the
  embedding or the output matrix, unlike `optax.contrib.muon`'s default of every 2-D leaf.
  The other roles get `optax.adamw(adam_learning_rate, adam_b1, adam_b2, adam_eps,
  weight_decay=adam_weight_decay, nesterov=adam_nesterov)`, with `adam_learning_rate` Muon's
  `learning_rate` and `adam_nesterov` Muon's `nesterov` unless given (as optax's).

  Defaults follow `optax.contrib.muon`'s (`beta=0.95`, Nesterov, 5 Newton–Schulz steps of
  Jordan's coefficients, `eps=1e-8`, `shape_scaling="width"` = optax's
  `sqrt(max(1, d_out/d_in))`, no weight decay; AdamW's `b1=0.9`, `b2=0.999`, `eps=1e-8`,
  Nesterov and rate Muon's) except where a measurement says otherwise. The differences:

  =======================  =====================  ==========================================
  what                     `optax.contrib.muon`   `optim.muon`, and why
  =======================  =====================  ==========================================
  which leaves             every 2-D leaf, the    the `hidden` role (`optim.labels`): the
                           embedding and output   embedding and output on AdamW; a foreign
                           too; 3-D stacks to     leaf of 3+ axes asks for `matrix_axes`.
                           AdamW                  Validation loss 1.979 against 2.067 with
                                                  every matrix on Muon (`routing` below)
  a fused q, k, v          one `(D, 3D)` matrix   three `(D, D)` matrices (`split_qkv`):
  (`c_attn`, `qkv`, ...)                          orthogonalized whole, each third's
                                                  singular values fall anywhere in
                                                  [0.000, 0.999], not at 1 (`fused` below)
  =======================  =====================  ==========================================

  Until issue 48 AdamW had `b2=0.95`, rate 3e-4, no Nesterov: val loss 2.423 against 1.946
  for optax's values (`tiny`, 300 steps of `stdlib`, seeds 0-1; `python docs/muon_defaults.py`;
  `docs/optim.rst` has every arm, and the Gram iteration: a difference of speed, not result).

  Args:
    learning_rate: Muon's learning rate `η` (a scalar or schedule).
    beta: as in `scale_by_muon`, and so are `nesterov`, `ns_steps`, `coeffs`,
      `compute_dtype`, `shape_scaling`, `rms`, `n_heads`, `n_kv_heads`, `mu_dtype`, `gram`,
      `split_qkv` (a fused q, k, v is three matrices) and `matrix_axes`. A leaf sent to Muon
      with three or more axes, neither ours nor named by `matrix_axes` (a scanned stack, an
      `nn.Einsum` kernel, a convolution), raises: only you know which axes are its matrix.
      A key of a `matrix_axes` mapping that names no leaf
      raises, naming the nearest paths.
    shard: where each matrix is orthogonalized under a device mesh, as in `scale_by_muon`
      (`"owner"`: each device its own layers, no collective inside the Newton–Schulz
      iterations); `mesh` and `shard_axes` are as there too.
    weight_decay: decoupled weight decay `λ` of the Muon matrices.
    weight_decay_mask: optional mask (tree or callable) for that decay.
    adam_learning_rate: AdamW's learning rate (scalar or schedule); default Muon's, as optax's.
    adam_b1: AdamW's first-moment decay.
    adam_b2: AdamW's second-moment decay (0.999, as optax's).
    adam_eps: AdamW's epsilon.
    adam_nesterov: AdamW's Nesterov momentum; default (`None`) Muon's `nesterov`, as optax's.
    adam_weight_decay: AdamW's decoupled weight decay.
    muon_roles: roles sent to Muon.
    label_fn: `params -> role pytree`; default `optim.labels`, which knows our names, linen,
      nnx, equinox and Hugging Face conventions and raises (one line, naming the leaves and
      the fix) on a leaf of two or more axes it cannot place, or when no leaf goes to Muon.
      `optim.labels_by_shape` is optax's every-2-D rule. A `label_fn` of your own is trusted
      for its choices, but a role not in `optim.ROLES` or a tree that does not match the
      parameters raises. (Under `optax.inject_hyperparams`, name it in `static_args`, since
      callables are taken as schedules there.)
    check_finite: as in `scale_by_muon`, on every leaf (AdamW's too).

  Returns:
    An `optax.GradientTransformation` (an `optax.partition` of the two optimizers; with
    `check_finite`, chained after a pass-through that checks).

  Example:
    >>> import jax, optim, transformer
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> tx = optim.muon(0.02, shape_scaling="rms", adam_learning_rate=1e-3)
    >>> updates, state = tx.update(params, tx.init(params), params)
    >>> updates["blocks"]["attn"]["w_q"].shape == params["blocks"]["attn"]["w_q"].shape
    True

  References:
    Jordan et al., `Muon: An optimizer for hidden layers in neural networks`, 2024.
    Loshchilov & Hutter, `Decoupled Weight Decay Regularization`, 2019.
  """
  caller = "optim.muon"
  checks.rate(learning_rate, "learning_rate", caller)
  _check_muon_args(caller, beta, ns_steps, n_heads, n_kv_heads, nesterov=nesterov,
                   shape_scaling=shape_scaling, rms=rms, gram=gram)
  checks.decay(weight_decay, "weight_decay", caller)
  if adam_learning_rate is not None:
    checks.rate(adam_learning_rate, "adam_learning_rate", caller, example="3e-4")
  checks.unit_interval(adam_b1, "adam_b1", caller)
  checks.unit_interval(adam_b2, "adam_b2", caller)
  checks.non_negative(adam_eps, "adam_eps", caller, example="1e-8")
  checks.decay(adam_weight_decay, "adam_weight_decay", caller)
  checks.flag(adam_nesterov, "adam_nesterov", caller, allow_none=True)
  checks.function(label_fn, "label_fn", caller, what="a function params -> roles (e.g. "
                  "optim.labels_by_shape)")
  if isinstance(muon_roles, str):
    raise ValueError(f"{caller}: muon_roles={muon_roles!r} is a str; pass a tuple of roles, "
                     f"e.g. ({muon_roles!r},)")
  muon_roles = frozenset(muon_roles)
  for r in muon_roles:
    if r not in ("hidden", "embedding", "unembedding", "vector"):
      raise ValueError(f"optim.muon: unknown role {r!r} in muon_roles; choose from optim.ROLES")
  matrix_axes = check_spec(matrix_axes, "optim.muon")
  split_qkv = check_split(split_qkv, caller)
  strict = label_fn is None
  label_fn = labels if label_fn is None else label_fn
  muon_tx = optax.chain(
      scale_by_muon(beta, nesterov=nesterov, ns_steps=ns_steps, coeffs=coeffs,
                    compute_dtype=compute_dtype, shape_scaling=shape_scaling, rms=rms,
                    n_heads=n_heads, n_kv_heads=n_kv_heads, mu_dtype=mu_dtype, gram=gram,
                    shard=shard, mesh=mesh, shard_axes=shard_axes,
                    matrix_axes=matrix_axes, split_qkv=split_qkv),
      optax.add_decayed_weights(weight_decay, weight_decay_mask),
      optax.scale_by_learning_rate(learning_rate),
  )
  adam_tx = optax.adamw(learning_rate if adam_learning_rate is None else adam_learning_rate,
                        b1=adam_b1, b2=adam_b2, eps=adam_eps,
                        weight_decay=adam_weight_decay, mu_dtype=mu_dtype,
                        nesterov=nesterov if adam_nesterov is None else adam_nesterov)

  def param_labels(params):
    roles = label_fn(params)
    if not strict:
      check_roles(roles, params, "optim.muon")
    if isinstance(matrix_axes, dict):
      check_keys(matrix_axes, params, "optim.muon: matrix_axes")
    if isinstance(split_qkv, dict):
      check_keys(split_qkv, params, "optim.muon: split_qkv")
    routes = jax.tree.map(lambda r: "muon" if r in muon_roles else "adam", roles)
    chosen = [x for x, r in zip(jax.tree.leaves(params), jax.tree.leaves(routes), strict=True)
              if r == "muon"]
    if strict and not chosen:
      found = [f"{path_str(p)!r} {tuple(jnp.shape(x))}"
               for p, x in jax.tree_util.tree_leaves_with_path(params)][:6]
      raise ValueError(
          f"optim.muon: no leaf has a role in {sorted(muon_roles)}, so Muon would run AdamW on "
          f"everything; the leaves are {', '.join(found)}; pass label_fn= (e.g. "
          f"optim.labels_by_shape) or check muon_roles")
    resolve_axes(_only(params, routes, "muon"), matrix_axes, strict=True, caller="optim.muon")
    return routes

  parts = optax.partition({"muon": muon_tx, "adam": adam_tx}, param_labels)

  def update_fn(updates, state, params=None):
    if params is None:  # without params, the two parts' first moments have their shapes
      checks.same_tree(updates, _moments(state), caller)
    return parts.update(updates, state, params)

  return checks.guarded(optax.GradientTransformation(parts.init, update_fn), check_finite,
                        caller)


def _moments(state):
  """The parameters' shapes from `muon`'s state: Muon's momentum, else AdamW's first moment."""
  masked = lambda x: isinstance(x, optax.MaskedNode)  # noqa: E731
  muon_mu = state.inner_states["muon"].inner_state[0].mu
  adam_mu = state.inner_states["adam"].inner_state[0].mu
  return jax.tree.map(lambda m, a: a if masked(m) else m, muon_mu, adam_mu, is_leaf=masked)


def _only(params, routes, route: str):
  """`params` with every leaf not on `route` masked out (as `optax.partition` passes it)."""
  return jax.tree.map(lambda x, r: x if r == route else optax.MaskedNode(), params, routes)
