"""Jacobians of layers, sub-layers and the residual stream: dense, matrix-free, across depth.

For `f: x (T, d_in) -> y (T, d_out)` (e.g. `transformer.block_fn(cfg)` with the layer's
parameters bound) the Jacobian is reshaped token-major to `J: (T·d_out, T·d_in)`, so the
block `J[i·d_out:(i+1)·d_out, j·d_in:(j+1)·d_in] = ∂y_i/∂x_j`. A causal model has
`∂y_i/∂x_j = 0` for `j > i`: `J` is block lower-triangular.

Dense Jacobians (`jacobian`) are for small `T·d`; they refuse when the estimate exceeds a
memory budget. The matrix-free functions never form `J`: `jax.linearize` gives `v ↦ J v`,
`jax.linear_transpose` of it gives `u ↦ Jᵀ u`, and `transformer.linalg.lanczos` turns those
into top singular values (Golub–Kahan–Lanczos) and dominant eigenvalues (Arnoldi).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from analysis.inputs import check_function, check_int, check_krylov, check_range
from transformer import Config, Transformer, block_fn
from transformer.linalg.lanczos import DEFAULT_TOL, EigResult, SVDResult, arnoldi_eig, lanczos_svd
from transformer.model import param_tree

DEFAULT_MAX_BYTES = 2**30


def jacobian_bytes(f: Callable, x: jax.Array) -> int:
  """Bytes of the dense Jacobian `J: (y.size, x.size)` of `f` at `x` (from shapes only)."""
  check_function(f, x, "analysis.jacobian_bytes")
  y = jax.eval_shape(f, x)
  return math.prod(y.shape) * math.prod(x.shape) * jnp.dtype(y.dtype).itemsize


def jacobian(f: Callable, x: jax.Array, *, max_bytes: int = DEFAULT_MAX_BYTES) -> jax.Array:
  """Dense Jacobian of `f` at `x` by forward mode, as a matrix `(y.size, x.size)`.

  For `x (T, d_in)`, `y (T, d_out)` this is `(T·d_out, T·d_in)` with token-major blocks
  `∂y_i/∂x_j`. Forward mode (`jax.jacfwd`) pushes `x.size` tangents; it is the natural choice
  for square layer Jacobians and agrees with `jax.jacrev`.

  Args:
    f: a function of one array.
    x: the point.
    max_bytes: refuse (before computing) when `J` alone would exceed this many bytes.

  Returns:
    `J (y.size, x.size)`.

  Raises:
    MemoryError: with the size estimate, when `J` does not fit `max_bytes`.

  Example:
    >>> import functools, jax, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=1, max_len=8)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> f = functools.partial(transformer.block_fn(cfg), transformer.layer(params, 0))
    >>> jacobian(f, jax.random.normal(jax.random.key(1), (8, 32))).shape  # (T·d, T·d)
    (256, 256)
  """
  check_int(max_bytes, 1, "max_bytes", "analysis.jacobian")
  check_function(f, x, "analysis.jacobian")
  need = jacobian_bytes(f, x)
  if need > max_bytes:
    raise MemoryError(f"jacobian: the dense Jacobian needs {need / 2**20:,.1f} MiB "
                      f"({need:,} bytes) but max_bytes={max_bytes:,}. Fix: use "
                      "jacobian_top_singular_values / jacobian_top_eigenvalues (matrix-free), "
                      "a shorter sequence, or a larger max_bytes.")
  J = jax.jit(jax.jacfwd(f))(x)
  y_size = math.prod(J.shape[: J.ndim - x.ndim])
  return J.reshape(y_size, x.size)


def _operators(f: Callable, x: jax.Array):
  """`(v ↦ J v, u ↦ Jᵀ u)` on flat vectors, sharing one linearization of `f` at `x`."""
  y, f_jvp = jax.linearize(f, x)
  f_vjp = jax.linear_transpose(f_jvp, x)

  def matvec(v):
    return f_jvp(v.reshape(x.shape).astype(x.dtype)).reshape(-1)

  def rmatvec(u):
    return f_vjp(u.reshape(y.shape).astype(y.dtype))[0].reshape(-1)

  return matvec, rmatvec


def _start(x: jax.Array, key: jax.Array | None) -> jax.Array:
  key = jax.random.key(0) if key is None else key
  return jax.random.normal(key, (x.size,), x.dtype)


def jacobian_top_singular_values(f: Callable, x: jax.Array, k: int = 8, *,
                                 tol: float = DEFAULT_TOL, krylov_dim: int | None = None,
                                 key: jax.Array | None = None) -> SVDResult:
  """Top-`k` singular values of `∂f/∂x` at `x`, matrix-free (Lanczos on `JᵀJ`), converged.

  The Krylov space grows until every value's bound is at most `tol · σ_1` (see
  `transformer.linalg.lanczos_svd`) or reaches `krylov_dim`; `.converged` says which.
  Each Krylov vector costs one JVP and one VJP of `f`; memory is `O(krylov_dim · x.size)`
  plus one linearization of `f`. Works under `jax.jit` and `jax.vmap` (stacked layers).

  Args:
    f: a function of one array.
    x: the point.
    k: how many singular values.
    tol: required accuracy, relative to the largest value: `|σ − θ_i| ≤ bounds[i] ≤ tol·θ_1`.
    krylov_dim: cap on the Krylov dimension (default
      `transformer.linalg.default_krylov_dim(k)`, clipped to the Jacobian's size).
    key: PRNG key of the random start vector (default `jax.random.key(0)`).

  Returns:
    `transformer.linalg.SVDResult`: `.values (k,)`, singular vectors as flat rows
    (`.right (k, x.size)`, `.left (k, y.size)`), `.bounds (k,)`, `.converged (k,)` and the
    `.krylov_dim` used.

  Example:
    >>> import functools, jax, numpy as np, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=1, max_len=8)
    >>> layer_params = transformer.layer(transformer.init(cfg, jax.random.key(0)), 0)
    >>> x_TD = jax.random.normal(jax.random.key(1), (8, 32))
    >>> top = jax.jit(lambda p, x: jacobian_top_singular_values(
    ...     functools.partial(transformer.block_fn(cfg), p), x, 4))(layer_params, x_TD)
    >>> bool(top.converged.all())
    True
    >>> f = functools.partial(transformer.block_fn(cfg), layer_params)
    >>> s = np.linalg.svd(np.asarray(jacobian(f, x_TD), np.float64), compute_uv=False)[:4]
    >>> bool(np.all(np.abs(np.asarray(top.values) - s) <= 1e-4 * s[0]))
    True
  """
  check_krylov(k, tol, krylov_dim, "analysis.jacobian_top_singular_values")
  check_function(f, x, "analysis.jacobian_top_singular_values")
  matvec, rmatvec = _operators(f, x)
  return lanczos_svd(matvec, rmatvec, _start(x, key), k, krylov_dim=krylov_dim, tol=tol)


def jacobian_top_eigenvalues(f: Callable, x: jax.Array, k: int = 8, *, tol: float = DEFAULT_TOL,
                             krylov_dim: int | None = None, key: jax.Array | None = None,
                             shift: float = 0.0) -> EigResult:
  """Dominant eigenvalues of the square Jacobian `∂f/∂x − shift·I`, matrix-free (Arnoldi).

  With `shift=1` the largest modulus is `max_i |λ_i(J) − 1|`: how far the layer's eigenvalues
  stray from 1, the residual-connection picture. The Krylov space grows until every value's
  backward error is at most `tol · |θ_1|` (see `transformer.linalg.arnoldi_eig`) or reaches
  `krylov_dim`.

  Args:
    f: a function with `f(x).size == x.size`.
    x: the point.
    k: how many eigenvalues.
    tol: required backward error, relative to the largest modulus.
    krylov_dim: cap on the Krylov dimension (default
      `transformer.linalg.default_krylov_dim(k)`, clipped to `x.size`).
    key: PRNG key of the random start vector (default `jax.random.key(0)`).
    shift: subtract `shift·I` from `J`.

  Returns:
    `transformer.linalg.EigResult`: complex `.values (k,)` of `J − shift·I` by decreasing
    modulus, their `.bounds` (backward errors), `.converged` and `.krylov_dim`.

  Example:
    >>> import functools, jax, numpy as np, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=1, max_len=8)
    >>> f = functools.partial(transformer.block_fn(cfg),
    ...                       transformer.layer(transformer.init(cfg, jax.random.key(0)), 0))
    >>> x_TD = jax.random.normal(jax.random.key(1), (8, 32))
    >>> top = jacobian_top_eigenvalues(f, x_TD, 1)
    >>> lam = np.linalg.eigvals(np.asarray(jacobian(f, x_TD), np.float64))
    >>> bool(top.converged[0]), bool(np.isclose(abs(complex(top.values[0])), np.abs(lam).max(),
    ...                                         rtol=1e-3))
    (True, True)
  """
  check_krylov(k, tol, krylov_dim, "analysis.jacobian_top_eigenvalues")
  check_range(shift, "shift", "analysis.jacobian_top_eigenvalues", example="1.0")
  check_function(f, x, "analysis.jacobian_top_eigenvalues")
  matvec, _ = _operators(f, x)
  return arnoldi_eig(lambda v: matvec(v) - shift * v, _start(x, key), k, krylov_dim=krylov_dim,
                     tol=tol)


def token_dependency(f: Callable, x: jax.Array) -> jax.Array:
  """`D[i, j] = ‖∂y_i/∂x_j‖_F` for `f: x (T, d_in) -> y (T, d_out)`.

  Computed one input token at a time (`lax.map` over `j`, `d_in` JVPs each), so memory stays
  `O(T · d_out · d_in)` instead of the full `(T·d)²` Jacobian; the values are exact.

  Returns:
    `(T_out, T_in)` block norms.

  Example:
    >>> import functools, jax, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=1, max_len=8)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> f = functools.partial(transformer.block_fn(cfg), transformer.layer(params, 0))
    >>> D_TS = token_dependency(f, jax.random.normal(jax.random.key(1), (8, 32)))
    >>> bool(is_block_lower_triangular(D_TS))  # a causal layer
    True
  """
  check_function(f, x, "analysis.token_dependency")
  T, d_in = x.shape
  eye = jnp.eye(d_in, dtype=x.dtype)
  _, f_jvp = jax.linearize(f, x)

  def column(j):  # ‖∂y_i/∂x_j‖ for all i: push the d_in unit tangents of token j
    tangents = jnp.zeros((d_in, T, d_in), x.dtype).at[:, j, :].set(eye)
    dy = jax.vmap(f_jvp)(tangents)  # (d_in, T, d_out)
    return jnp.sqrt(jnp.sum(jnp.square(dy.astype(jnp.float32)), axis=(0, 2)))

  return jax.lax.map(column, jnp.arange(T)).T


def is_block_lower_triangular(M: jax.Array, block: tuple[int, int] = (1, 1), *,
                              rtol: float = 0.0) -> jax.Array:
  """Whether `M` is (block) lower-triangular: every block above the diagonal is ~zero.

  Args:
    M: `(..., T·b_out, T·b_in)`, e.g. a dense Jacobian with `block=(d_out, d_in)`, or a
      `token_dependency` matrix with the default `block=(1, 1)`.
    block: the block shape `(b_out, b_in)`.
    rtol: tolerance relative to `max |M|`; `0` demands exact zeros (a causal mask gives exact
      zeros, not small numbers).

  Returns:
    `(...,)` boolean.
  """
  return causal_leak(M, block) <= rtol


def causal_leak(M: jax.Array, block: tuple[int, int] = (1, 1)) -> jax.Array:
  """`max_{j>i} ‖M_ij‖_F / max |M|`: the relative size of the largest block above the diagonal.

  Zero for a causal layer; of order one for bidirectional attention.
  """
  b_out, b_in = block
  T = M.shape[-2] // b_out
  if M.shape[-2] != T * b_out or M.shape[-1] != T * b_in:
    raise ValueError(f"causal_leak: {M.shape=} is not a {T}x{T} grid of {block} blocks.")
  blocks = M.reshape(M.shape[:-2] + (T, b_out, T, b_in))
  norms_TS = jnp.sqrt(jnp.sum(jnp.square(blocks), axis=(-3, -1)))
  upper = jnp.broadcast_to(jnp.triu(jnp.ones((T, T), bool), 1), norms_TS.shape)
  leak = jnp.max(jnp.where(upper, norms_TS, 0), axis=(-2, -1))
  scale = jnp.max(jnp.abs(M), axis=(-2, -1))
  return leak / jnp.where(scale == 0, 1, scale)


def stack_fn(cfg: Config, part: str = "block") -> Callable:
  """`g(blocks_params, x) -> x_L`: all `L` stacked layers applied in turn (the residual stream).

  `blocks_params` is `params["blocks"]` (leading layer axis); `x (T, d)` is the stream entering
  layer 0 (after the embeddings).
  """
  f = block_fn(cfg, part)

  def g(blocks, x):
    return jax.lax.scan(lambda h, p: (f(p, h), None), x, blocks)[0]

  return g


def stream_input(params, cfg: Config, tokens: jax.Array) -> jax.Array:
  """The residual stream entering layer 0 (after the embeddings), read from the model's sown
  `resid_pre`: `(T, D)` for tokens `(T,)`, `(B, T, D)` for `(B, T)`."""
  tokens_BT = tokens if tokens.ndim == 2 else tokens[None]
  _, state = Transformer(cfg).apply({"params": param_tree(params)}, tokens_BT,
                                    mutable=["intermediates"])
  x_BTD = state["intermediates"]["blocks"]["resid_pre"][0][0]
  return x_BTD if tokens.ndim == 2 else x_BTD[0]


def layer_inputs(cfg: Config, blocks, x: jax.Array) -> jax.Array:
  """`(L, T, d)`: the residual stream entering each layer, starting from `x (T, d)`."""
  f = block_fn(cfg)
  return jax.lax.scan(lambda h, p: (f(p, h), h), x, blocks)[1]


def depth_profile(cfg: Config, blocks, x: jax.Array, k: int = 8, *, tol: float = DEFAULT_TOL,
                  krylov_dim: int | None = None,
                  key: jax.Array | None = None) -> dict[str, jax.Array]:
  """Per-layer and end-to-end Jacobian spectra along the residual stream, matrix-free.

  Layer `l` has input `x_l` and Jacobian `J_l`; the end-to-end Jacobian is the product
  `J = J_{L-1} ⋯ J_0`, never formed: its JVP is the composition of the layers' JVPs. For
  gradient flow, `σ(J)` far from 1 means exploding or vanishing gradients. Every value comes
  with its bound and a converged flag (`jacobian_top_singular_values`,
  `jacobian_top_eigenvalues`).

  Args:
    cfg: model config.
    blocks: `params["blocks"]` (leading layer axis `L`).
    x: `(T, d)` stream entering layer 0.
    k: how many singular values.
    tol: required accuracy relative to each spectrum's largest value.
    krylov_dim: cap on the Krylov dimension of every solve.
    key: PRNG key of the start vectors (default `jax.random.key(0)`).

  Returns:
    `layer_sv (L, k)` top singular values of each `J_l`; `spectral_radius (L,)` `max |λ(J_l)|`;
    `dist_from_one (L,)` `max |λ(J_l) − 1|` (Arnoldi on `J_l − I`); `end_to_end_sv (k,)` top
    singular values of `J`. Each has a `*_bound` of the same shape (see `SVDResult.bounds`,
    `EigResult.bounds`) and a boolean `*_converged`. Layers are batched with `jax.vmap`.

  Example:
    >>> import functools, jax, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=2, max_len=8)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> x_TD = jax.random.normal(jax.random.key(1), (8, 32))
    >>> prof = jax.jit(functools.partial(depth_profile, cfg, k=4))(params["blocks"], x_TD)
    >>> prof["layer_sv"].shape, bool(prof["layer_sv_converged"].all())
    ((2, 4), True)
  """
  check_krylov(k, tol, krylov_dim, "analysis.depth_profile")
  f = block_fn(cfg)
  xs_LTD = layer_inputs(cfg, blocks, x)
  kw = {"tol": tol, "krylov_dim": krylov_dim, "key": key}

  def per_layer(p, x_l):
    g = lambda z: f(p, z)
    sv = jacobian_top_singular_values(g, x_l, k, **kw)
    rho = jacobian_top_eigenvalues(g, x_l, 1, **kw)
    dist = jacobian_top_eigenvalues(g, x_l, 1, shift=1.0, **kw)
    return {"layer_sv": sv.values, "layer_sv_bound": sv.bounds,
            "layer_sv_converged": sv.converged,
            "spectral_radius": jnp.abs(rho.values[0]), "spectral_radius_bound": rho.bounds[0],
            "spectral_radius_converged": rho.converged[0],
            "dist_from_one": jnp.abs(dist.values[0]), "dist_from_one_bound": dist.bounds[0],
            "dist_from_one_converged": dist.converged[0]}

  out = jax.vmap(per_layer)(blocks, xs_LTD)
  g = stack_fn(cfg)
  e2e = jacobian_top_singular_values(lambda z: g(blocks, z), x, k, **kw)
  return {**out, "end_to_end_sv": e2e.values, "end_to_end_sv_bound": e2e.bounds,
          "end_to_end_sv_converged": e2e.converged}


def model_jacobian_top_singular_values(params, cfg: Config, inputs: jax.Array, k: int = 8, *,
                                       tol: float = DEFAULT_TOL, krylov_dim: int | None = None,
                                       key: jax.Array | None = None) -> SVDResult:
  r"""Top-`k` singular values of the whole model's Jacobian, embeddings to final residual.

  The map is the stack of all `L` blocks, from the residual stream after the embeddings `x_0`
  to the stream before the final norm `x_L` (`stack_fn`):

  .. math:: J = \frac{\partial x_L}{\partial x_0} = J_{L-1} \cdots J_0, \qquad
     J_l = \frac{\partial x_{l+1}}{\partial x_l},

  a `(T·D, T·D)` matrix (token-major, block lower-triangular for a causal model) that is never
  formed: one `jax.linearize` of the stack gives `v ↦ J v` and its transpose `u ↦ Jᵀ u`, and
  Golub–Kahan–Lanczos grows until every value's bound is at most `tol · σ_1`
  (`jacobian_top_singular_values`). Each Krylov vector costs one JVP and one VJP through all
  layers; memory is the Krylov basis (`≈ 2·krylov_dim·T·D` numbers) plus one linearization.

  Args:
    params: the model's parameters (bare or as `{"params": ...}`).
    cfg: its config.
    inputs: tokens `(T,)` / `(B, T)` (integers; embedded by the model, including learned
      positions), or the stream itself `(T, D)` / `(B, T, D)` (floats). A leading batch axis
      gives one result per sequence (`jax.vmap`).
    k: how many singular values.
    tol: required accuracy relative to the largest value: `|σ − θ_i| ≤ bounds[i] ≤ tol·θ_1`.
    krylov_dim: cap on the Krylov dimension (default
      `transformer.linalg.default_krylov_dim(k)`).
    key: PRNG key of the random start vector (default `jax.random.key(0)`).

  Returns:
    `transformer.linalg.SVDResult` (with a leading `B` axis for batched inputs): `.values`,
    flat singular vectors `.right`/`.left (k, T·D)`, `.bounds`, `.converged`, `.krylov_dim`.

  Example:
    >>> import jax, numpy as np, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_layers=2, max_len=8)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens_T = jax.random.randint(jax.random.key(1), (8,), 0, cfg.vocab_size)
    >>> top = jax.jit(model_jacobian_top_singular_values, static_argnums=(1, 3))(
    ...     params, cfg, tokens_T, 4)
    >>> bool(top.converged.all())
    True
    >>> x_TD = stream_input(params, cfg, tokens_T)
    >>> g = lambda z: stack_fn(cfg)(params["blocks"], z)
    >>> s = np.linalg.svd(np.asarray(jacobian(g, x_TD), np.float64), compute_uv=False)[:4]
    >>> bool(np.all(np.abs(np.asarray(top.values) - s) <= 1e-4 * s[0]))
    True
  """
  check_krylov(k, tol, krylov_dim, "analysis.model_jacobian_top_singular_values")
  params = param_tree(params)
  if jnp.issubdtype(inputs.dtype, jnp.integer):
    if inputs.ndim not in (1, 2):
      raise ValueError(f"model_jacobian_top_singular_values: tokens must be (T,) or (B, T), got "
                       f"{inputs.shape=}.")
    x = stream_input(params, cfg, inputs)
  else:
    if inputs.ndim not in (2, 3) or inputs.shape[-1] != cfg.d_model:
      raise ValueError(f"model_jacobian_top_singular_values: a stream must be (T, D) or "
                       f"(B, T, D) with D = d_model = {cfg.d_model}, got {inputs.shape=}. "
                       "Fix: pass integer tokens, or the stream after the embeddings.")
    x = inputs.astype(jnp.float32)
  g = stack_fn(cfg)
  blocks = params["blocks"]

  def one(x_TD):
    return jacobian_top_singular_values(lambda z: g(blocks, z), x_TD, k, tol=tol,
                                        krylov_dim=krylov_dim, key=key)

  return jax.vmap(one)(x) if x.ndim == 3 else one(x)
