"""Stability: causal Jacobian eigenvalues, a certified attention-logit bound, effective κ.

Three measurements behind the preface's eigenvalue and condition-number topics.

* A causal layer `f: x (T, D) -> y (T, D)` has a block lower-triangular Jacobian (`∂y_t/∂x_s = 0`
  for `s > t`), so its `T·D` eigenvalues are exactly those of the `T` diagonal blocks
  `∂y_t/∂x_t (D, D)`: `T` small eigenproblems instead of one `(T·D)²` one. Eigenvalues are not
  singular values: a non-normal Jacobian can have every eigenvalue at 1 and a large norm.
* `logit_bound`: what the spectral norms of `W_Q`, `W_K`, their biases and the norm gains imply
  for `|q·k|/√Dh`, checked against the measured scores by `max_logit`.
* `effective_condition`: `σ_max / σ_min` over the non-zero spectrum of a batch of inputs
  (LayerNorm's output is singular along the all-ones direction by construction).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from analysis.inputs import check_int, check_range
from analysis.jacobians import jacobian_top_singular_values
from analysis.spectra import default_rank_tol, factored_singular_values
from transformer import Config
from transformer.linalg import serial
from transformer.model import param_tree
from transformer.names import split_heads

# ------------------------------------------------------------------ causal Jacobian spectra


def causal_jacobian_blocks(f: Callable, x: jax.Array) -> jax.Array:
  """The diagonal blocks `∂y_t/∂x_t` of the Jacobian of a token-wise causal `f` at `x`.

  One linearization of `f`; then for each position `t` (`lax.map`), the `D_in` unit tangents
  placed at `t` are pushed through the JVP and row `t` of the result is kept. Memory stays
  `O(T·D_in·D_out)`; the dense `(T·D)²` Jacobian is never formed.

  Args:
    f: `x (T, D_in) -> y (T, D_out)`.
    x: `(T, D_in)`, the point.

  Returns:
    `J_TOI (T, D_out, D_in)`: `J_TOI[t] = ∂y_t/∂x_t` (row-vector layout: `dy_t = J_TOI[t] dx_tᵀ`
    in column form, i.e. the same orientation as the token-major dense Jacobian's blocks).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from analysis.stability import causal_jacobian_blocks
    >>> f = lambda x: jnp.cumsum(x, axis=0) * 2.0   # causal: y_t = 2 Σ_{s≤t} x_s
    >>> causal_jacobian_blocks(f, jnp.ones((3, 2)))[1]
    Array([[2., 0.],
           [0., 2.]], dtype=float32)
  """
  if x.ndim != 2:
    raise ValueError(f"causal_jacobian_blocks: x must be (T, D), got {x.shape=}. Fix: vmap over "
                     "leading batch axes.")
  y = jax.eval_shape(f, x)
  if y.ndim != 2 or y.shape[0] != x.shape[0]:
    raise ValueError(f"causal_jacobian_blocks: f must map (T, D_in) to (T, D_out), got {x.shape}"
                     f" -> {y.shape}.")
  T, d_in = x.shape
  _, f_jvp = jax.linearize(f, x)
  eye_II = jnp.eye(d_in, dtype=x.dtype)

  def block(t):
    tangents_ITI = jnp.zeros((d_in, T, d_in), x.dtype).at[:, t, :].set(eye_II)
    dy_ITO = jax.vmap(f_jvp)(tangents_ITI)
    return dy_ITO[:, t, :].T

  return jax.lax.map(block, jnp.arange(T))


def causal_jacobian_eigenvalues(f: Callable, x: jax.Array) -> jax.Array:
  """All `T·D` eigenvalues of the Jacobian of a causal `f: (T, D) -> (T, D)` at `x`.

  .. math::
    J = \\begin{pmatrix} J_{00} & & \\\\ J_{10} & J_{11} & \\\\ \\vdots & & \\ddots \\end{pmatrix}
    \\;\\Rightarrow\\; \\det(J - \\lambda I) = \\prod_t \\det(J_{tt} - \\lambda I),

  so `λ(J)` is the union over `t` of `λ(J_tt)`, with `J_tt = ∂y_t/∂x_t`. Exact for a causal
  `f` (it is the caller's promise; `analysis.causal_leak` checks it). A residual block is
  `I + ∂branch`, so its eigenvalues sit near 1 when the branch is small.

  Args:
    f: a causal map `x (T, D) -> y (T, D)`, e.g. `functools.partial(block_fn(cfg), layer_params)`.
    x: `(T, D)`.

  Returns:
    Complex `(T, D)`: row `t` holds the eigenvalues of `J_tt` (in no particular order).
    `jnp.linalg.eig` runs on CPU (jit included); on accelerators XLA falls back as JAX allows.

  Example:
    >>> import jax.numpy as jnp
    >>> from analysis.stability import causal_jacobian_eigenvalues
    >>> f = lambda x: x + 0.5 * jnp.roll(x, 1, axis=0).at[0].set(0)  # y_t = x_t + x_{t-1}/2
    >>> jnp.abs(causal_jacobian_eigenvalues(f, jnp.ones((4, 3))) - 1).max()
    Array(0., dtype=float32)
  """
  J_TDD = causal_jacobian_blocks(f, x)
  if J_TDD.shape[-1] != J_TDD.shape[-2]:
    raise ValueError(f"causal_jacobian_eigenvalues: f must map (T, D) to (T, D) for eigenvalues,"
                     f" got blocks {J_TDD.shape[1:]}. Fix: use causal_jacobian_spectra's "
                     "singular values instead.")
  return serial.eigvals(J_TDD)


def causal_jacobian_spectra(f: Callable, x: jax.Array, *,
                            full_max_size: int = 4096) -> dict[str, jax.Array]:
  """Eigenvalues and singular values of a causal layer's Jacobian, reported separately.

  Eigenvalues of `J` come from its diagonal blocks (`causal_jacobian_eigenvalues`). Singular
  values do not: `σ(J)` depends on the off-diagonal blocks too, and `σ_max(J) ≥ max_t σ_max(J_tt)
  ≥ max |λ|`, with equality only when `J` is normal. So three numbers are reported:
  `dist_from_one = max |λ − 1|`, `block_sigma_max = max_t σ_max(J_tt)` and `sigma_max = σ_max(J)`.

  Args:
    f: a causal map `x (T, D) -> y (T, D)`.
    x: `(T, D)`.
    full_max_size: `σ_max(J)` is computed from the dense Jacobian (`jax.jacfwd` and an SVD) when
      `T·D` is at most this, otherwise matrix-free by `analysis.jacobian_top_singular_values`.

  Returns:
    `eigenvalues (T, D)` complex; `block_singular_values (T, D)` descending per block;
    `dist_from_one`, `spectral_radius`, `block_sigma_max`, `sigma_max` scalars.

  Example:
    >>> import jax.numpy as jnp
    >>> from analysis.stability import causal_jacobian_spectra
    >>> f = lambda x: x + 3.0 * jnp.roll(x, 1, axis=0).at[0].set(0)  # non-normal: λ = 1, σ ≈ 4
    >>> out = causal_jacobian_spectra(f, jnp.ones((64, 2)))
    >>> float(out["dist_from_one"]), round(float(out["sigma_max"]), 2)
    (0.0, 4.0)
  """
  check_int(full_max_size, 0, "full_max_size", "analysis.causal_jacobian_spectra")
  J_TDD = causal_jacobian_blocks(f, x)
  lam_TD = serial.eigvals(J_TDD)
  s_TD = serial.svd(J_TDD, compute_uv=False)
  if x.size <= full_max_size:
    J = jax.jacfwd(f)(x).reshape(x.size, x.size)
    sigma_max = serial.svd(J, compute_uv=False)[0]
  else:
    sigma_max = jacobian_top_singular_values(f, x, 1).values[0]
  return {"eigenvalues": lam_TD, "block_singular_values": s_TD,
          "dist_from_one": jnp.max(jnp.abs(lam_TD - 1)),
          "spectral_radius": jnp.max(jnp.abs(lam_TD)),
          "block_sigma_max": jnp.max(s_TD[:, 0]), "sigma_max": sigma_max}


# ----------------------------------------------------------------------- attention logits


def _norm_output_bound(norm_params, cfg: Config) -> jax.Array:
  """`(L,)` bound on `‖norm(x)‖` for every `x`: `√D·max|scale| + ‖bias‖`.

  LayerNorm and RMSNorm first map `x` to `z` with `‖z‖² = D·m/(m + eps) < D` (`m` the mean
  square after centring), then `y = z ⊙ scale (+ bias)`, so `‖y‖ ≤ ‖z‖·max|scale| + ‖bias‖`.
  """
  scale_LD = norm_params["scale"].astype(jnp.float32)
  bound_L = math.sqrt(cfg.d_model) * jnp.max(jnp.abs(scale_LD), -1)
  if "bias" in norm_params:
    bound_L = bound_L + jnp.linalg.norm(norm_params["bias"].astype(jnp.float32), axis=-1)
  return bound_L


def attention_input_bound(params, cfg: Config) -> jax.Array:
  """`(L,)` certified bound on the norm of every row that enters layer `l`'s `W_Q`, `W_K`.

  Pre-norm: the row is `norm_1(x)`, bounded by `√D·max|scale_1| + ‖bias_1‖` whatever `x` is.
  Post-norm: layer 0 reads the embeddings (`max_v ‖E_v‖ + max_p ‖P_p‖`) and layer `l > 0` reads
  the previous layer's `norm_2` output. Without a norm (`norm="none"`, pre-norm) the residual
  stream is unbounded a priori and the bound is `inf`.

  Args:
    params: model parameters (bare or `{"params": ...}`).
    cfg: model config.

  Returns:
    `(L,)` float32.
  """
  p = param_tree(params)
  blocks = p["blocks"]
  if cfg.norm == "none":
    return jnp.full((cfg.n_layers,), jnp.inf, jnp.float32)
  if cfg.norm_position == "pre":
    return _norm_output_bound(blocks["norm_1"], cfg)
  embed = jnp.max(jnp.linalg.norm(p["embed"]["embedding"].astype(jnp.float32), axis=-1))
  if "pos_embed" in p:
    embed = embed + jnp.max(jnp.linalg.norm(p["pos_embed"]["embedding"].astype(jnp.float32),
                                            axis=-1))
  previous_L = _norm_output_bound(blocks["norm_2"], cfg)
  return jnp.concatenate([embed[None], previous_L[:-1]])


def logit_bound(params, cfg: Config) -> jax.Array:
  """Certified bound on every attention logit `|q_i·k_j| / √Dh`, per layer and head.

  With `r` the bound on the rows entering the projections (`attention_input_bound`),
  `q = x̂ W_Q^h + b_Q^h` and `k = x̂ W_K^h + b_K^h`:

  .. math::
    |q_i k_j^\\top| \\le r^2\\,\\sigma_\\max(W_Q^h W_K^{h\\top})
      + r\\,\\|W_Q^h b_K^{h\\top}\\| + r\\,\\|W_K^h b_Q^{h\\top}\\| + |b_Q^h b_K^{h\\top}|.

  With RoPE, `q_i` and `k_j` are rotated by different (orthogonal) matrices, so `W_Q^h W_K^hᵀ`
  no longer describes the product; the norms survive rotation and the bound becomes
  `(r σ_max(W_Q^h) + ‖b_Q^h‖)(r σ_max(W_K^h) + ‖b_K^h‖)`. Either way the result is divided by
  `√Dh`, the scale of the softmax scores (`scores` sown by the model, compare with `max_logit`).
  Grouped-query heads share their key head. `σ_max(W_Q^h W_K^hᵀ)` comes from the `Dh × Dh`
  core (`analysis.factored_singular_values`). Computed in float32; exact up to rounding.

  Args:
    params: model parameters (bare or `{"params": ...}`).
    cfg: model config (softmax-style scores `q·k/√Dh`).

  Returns:
    `(L, H)` float32; `inf` where the input is unbounded (`norm="none"`).

  Example:
    >>> import jax, transformer
    >>> from analysis.stability import logit_bound, max_logit
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, cfg.vocab_size)
    >>> _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
    ...                                               mutable=["intermediates"])
    >>> scores = state["intermediates"]["blocks"]["attn"]["scores"][0]   # (L, B, H, T, S)
    >>> bool((max_logit(scores) <= logit_bound(params, cfg)).all())
    True
  """
  attn = param_tree(params)["blocks"]["attn"]
  H, K, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
  w_q = split_heads(attn["w_q"].astype(jnp.float32), H, "columns")  # (L, H, D, Dh)
  w_k = attn["w_k"] if "w_k" in attn else attn["w_q"]  # `Config.qk_tied`: K = X W_Q
  w_k = jnp.repeat(split_heads(w_k.astype(jnp.float32), K, "columns"), cfg.kv_groups, axis=1)
  L = w_q.shape[0]
  zeros = jnp.zeros((L, H, dh), jnp.float32)
  b_q = attn["b_q"].astype(jnp.float32).reshape(L, H, dh) if "b_q" in attn else zeros
  b_k = attn.get("b_k", attn.get("b_q")) if cfg.qk_tied else attn.get("b_k")
  b_k = (jnp.repeat(b_k.astype(jnp.float32).reshape(L, K, dh), cfg.kv_groups, axis=1)
         if b_k is not None else zeros)
  r = attention_input_bound(params, cfg)[:, None]
  bq_norm = jnp.linalg.norm(b_q, axis=-1)
  bk_norm = jnp.linalg.norm(b_k, axis=-1)
  if cfg.positions == "rope":
    sq = serial.svd(w_q, compute_uv=False)[..., 0]
    sk = serial.svd(w_k, compute_uv=False)[..., 0]
    bound = (r * sq + bq_norm) * (r * sk + bk_norm)
  else:
    s_qk = factored_singular_values(w_q, w_k)[..., 0]
    cross_q = jnp.linalg.norm(jnp.einsum("lhde,lhe->lhd", w_q, b_k), axis=-1)
    cross_k = jnp.linalg.norm(jnp.einsum("lhde,lhe->lhd", w_k, b_q), axis=-1)
    bound = r * r * s_qk + r * (cross_q + cross_k) + jnp.abs(jnp.sum(b_q * b_k, -1))
  # An unbounded input (r = inf) times a zero bias term must stay inf, not become nan.
  return jnp.where(jnp.isinf(r), jnp.inf, bound * dh**-0.5)


def max_logit(scores: jax.Array) -> jax.Array:
  """`max |score|` over the allowed (unmasked) entries, per head: `(..., B, H, T, S) -> (..., H)`.

  Masked entries hold `finfo(float32).min` (see `transformer.attention.masked_scores`) and are
  skipped.

  Example:
    >>> import jax.numpy as jnp
    >>> from analysis.stability import max_logit
    >>> s = jnp.array([[[[1.0, jnp.finfo(jnp.float32).min], [-3.0, 2.0]]]])  # (B, H, T, S)
    >>> max_logit(s)
    Array([3.], dtype=float32)
  """
  if scores.ndim < 4:
    raise ValueError(f"max_logit: scores must be (..., B, H, T, S), got {scores.shape=}.")
  masked = scores == jnp.finfo(scores.dtype).min
  return jnp.max(jnp.where(masked, 0, jnp.abs(scores)), axis=(-4, -2, -1))


# ------------------------------------------------------------------------- conditioning


def effective_condition(X: jax.Array, *, rtol: float | None = None,
                        center: bool = False) -> dict[str, jax.Array]:
  """Condition number of `X` over its non-zero spectrum, and how many values were dropped.

  .. math::
    \\kappa_\\text{eff}(X) = \\sigma_1 / \\sigma_k, \\qquad
    k = \\#\\{i : \\sigma_i > \\text{rtol}\\cdot\\sigma_1\\}.

  For `X (N, D)` the rows of a projection's input (tokens × features), `κ_eff(X)²` is the
  condition number of `XᵀX` restricted to the span of the data, the curvature ratio of a
  least-squares fit of that projection. LayerNorm's output (with zero bias) satisfies
  `X·1 = 0` exactly, one exact zero that would make the plain `κ` infinite; it is dropped
  and counted in `n_dropped`. A learned LayerNorm bias `b` lifts that zero: the rows become
  `z_i ⊙ scale + b`, whose singular value along `1/scale` is of the size of `‖b‖√N` and, while
  `b` is small, inflates `κ_eff` without describing the features. When the projection has a
  bias of its own the intercept absorbs the mean row, and the relevant matrix is the centred
  one (`center=True`: `X − mean_rows(X)`), which removes `b` exactly. RMSNorm has no zero.

  Args:
    X: `(..., N, D)`; leading axes are a batch (e.g. layers).
    rtol: singular values `≤ rtol·σ_1` are treated as zero; default `max(N, D)·eps` of `X`'s
      dtype (as `numpy.linalg.matrix_rank`).
    center: subtract the mean over the `N` rows first (the covariance's conditioning).

  Returns:
    `kappa_eff (...,)`, `n_dropped (...,)` int32, `sigma_max (...,)`, `sigma_min (...,)` (the
    smallest kept value). An all-zero `X` gives `kappa_eff = nan`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from analysis.stability import effective_condition
    >>> x = jax.random.normal(jax.random.key(0), (256, 8))
    >>> z = x - x.mean(-1, keepdims=True)                 # centred rows: z·1 = 0
    >>> int(effective_condition(z)["n_dropped"]), int(effective_condition(x)["n_dropped"])
    (1, 0)
  """
  check_range(rtol, "rtol", "analysis.effective_condition", low=0, high=1, low_open=True,
              allow_none=True, example="1e-6")
  if X.ndim < 2:
    raise ValueError(f"effective_condition: X must be (..., N, D), got {X.shape=}.")
  if center:
    X = X - jnp.mean(X, axis=-2, keepdims=True)
  s = serial.svd(X, compute_uv=False)
  tol = (default_rank_tol(s, X.shape) if rtol is None else rtol * s[..., 0])[..., None]
  kept = s > tol
  sigma_min = jnp.min(jnp.where(kept, s, jnp.inf), -1)
  sigma_max = s[..., 0]
  kappa = jnp.where(jnp.any(kept, -1), sigma_max / sigma_min, jnp.nan)
  n_dropped = jnp.sum(~kept, -1).astype(jnp.int32)
  return {"kappa_eff": kappa, "n_dropped": n_dropped, "sigma_max": sigma_max,
          "sigma_min": jnp.where(jnp.any(kept, -1), sigma_min, 0.0)}
