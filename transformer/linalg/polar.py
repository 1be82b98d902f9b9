"""Newton–Schulz iteration toward the polar factor of a batch of matrices.

Two ways to run the same iteration, chosen per shape by `newton_schulz`:

- *direct*: `X ← a X + (b A + c A²) X` with `A = X Xᵀ` on the `(m, n)` matrix itself
  (`m ≤ n`; a tall matrix is multiplied from the right); per step `2m²n + 2m³ + 2m²n` FLOPs.
- *Gram*: every iterate is `X_k = Q_k X_0` with `Q_k` a polynomial in the `m × m` Gram
  `A_0 = X_0 X_0ᵀ`, so the iteration runs on `m × m` matrices (`Q`, `R = X Xᵀ`) and touches the
  long side only twice: `A_0` and the final `Q_k X_0`. Per step `8m³` FLOPs instead of
  `4m²n + 2m³`: for the `(D, 4D)` feed-forward matrices, five steps cost 56% of the direct
  iteration.

Coefficient schedules (`NS_COEFFS`) map every singular value `σ ↦ p(σ) = a σ + b σ³ + c σ⁵` per
step; `polar_express_coeffs` computes greedy minimax schedules (Amsel et al., 2025) in float64
by a Remez exchange instead of reading them from a table, including ones with a cubic step
(`c = 0`), which the iteration runs with one matrix product fewer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def _minimax_odd(lower: float, upper: float, degree: int,
                 iters: int = 100) -> tuple[np.ndarray, float]:
  """The odd polynomial `p` of `degree` minimizing `max |1 − p(x)|` on `[lower, upper]` (Remez).

  With `d = (degree + 1) / 2` coefficients on `{x, x³, …, x^degree}`, the best approximation
  equioscillates at `d + 1` points: `lower`, the `d − 1` interior critical points of `p`, and
  `upper`. Each exchange solves `1 − p(x_j) = (−1)^j E` on the current points, then moves the
  interior points to the positive roots of `p'`, a polynomial in `x²`.
  """
  d = (degree + 1) // 2
  x = lower + (upper - lower) * (1 - np.cos(np.pi * np.arange(d + 1) / d)) / 2
  powers = 2 * np.arange(d) + 1
  for _ in range(iters):
    system = np.concatenate([x[:, None] ** powers, (-1.0) ** np.arange(d + 1)[:, None]], axis=1)
    *coeffs, err = np.linalg.solve(system, np.ones(d + 1))
    y = np.roots((powers * np.asarray(coeffs))[::-1])  # p'(x) as a polynomial in y = x²
    y = np.sort(y.real[(np.abs(y.imag) <= 1e-12 * np.abs(y.real)) & (y.real > 0)])
    inner = np.sqrt(y)
    inner = inner[(inner > lower) & (inner < upper)]
    if inner.size != d - 1:
      raise ValueError(f"polar_express_coeffs: no minimax polynomial of degree {degree} on "
                       f"[{lower}, {upper}]; use a larger lower bound")
    new = np.concatenate([[lower], inner, [upper]])
    if np.allclose(new, x, rtol=1e-15, atol=0):
      break
    x = new
  return np.asarray(coeffs), abs(err)


@functools.lru_cache(maxsize=32)
def polar_express_coeffs(ns_steps: int = 5, lower: float = 1e-3, safety: float = 0.01, *,
                         degrees: tuple[int, ...] | None = None,
                         ) -> tuple[tuple[float, float, float], ...]:
  r"""Per-step coefficients of the greedy minimax ("Polar Express") schedule.

  .. math::
    p_i = \arg\min_{p \text{ odd, degree } n_i} \max_{x \in [\ell_i, (1+\delta) u_i]}
    |1 - p(x)|, \qquad [\ell_{i+1}, u_{i+1}] = [1 - E_i, 1 + E_i], \qquad
    [\ell_0, u_0] = [\ell, 1]

  with `E_i` the minimax error of step `i`, `ℓ = lower`, `δ = safety` and `n_i = degrees[i]`
  (5, a quintic, unless given; 3 is a cubic, `c = 0`, which saves `newton_schulz` one matrix
  product). Every singular value of the normalized input in `[lower, 1]` ends within
  `E_{k-1}` of 1 after `ns_steps = k` steps; with `δ = 0` that is the smallest worst-case error
  any composition of `k` such polynomials reaches (Amsel et al., Thm. 4.1). The margin `δ`
  keeps a step tame on singular values that rounding pushed slightly past its interval: a
  quintic grows like `x⁵` outside it, and without the margin bfloat16 rounding can cascade
  into overflow. Computed in float64 by a Remez exchange, not read from a table.

  Args:
    ns_steps: number of steps `k` (rows of the schedule).
    lower: `ℓ`, the smallest singular value (relative to the Frobenius norm) to be sent to 1.
    safety: `δ`, the relative margin above each step's interval that it is designed for.
    degrees: per step, 5 (quintic) or 3 (cubic); default all 5.

  Returns:
    A tuple of `ns_steps` triples `(a, b, c)`, usable as `coeffs` of `newton_schulz`.

  Example:
    >>> import numpy as np
    >>> from transformer.linalg.polar import polar_express_coeffs
    >>> x = np.geomspace(1e-3, 1, 1000)
    >>> for a, b, c in polar_express_coeffs(5, 1e-3, safety=0.0):
    ...   x = a * x + b * x**3 + c * x**5
    >>> bool(np.abs(x - 1).max() < 0.114)
    True

  References:
    Amsel, Persson, Musco, Gower, `The Polar Express: Optimal Matrix Sign Methods and Their
    Application to the Muon Algorithm`, 2025.
  """
  if ns_steps < 1:
    raise ValueError(f"polar_express_coeffs: {ns_steps=} must be >= 1")
  if not 0 < lower < 1:
    raise ValueError(f"polar_express_coeffs: {lower=} must lie in (0, 1)")
  if not 0 <= safety < 1:
    raise ValueError(f"polar_express_coeffs: {safety=} must lie in [0, 1)")
  degrees = (5,) * ns_steps if degrees is None else tuple(degrees)
  if len(degrees) != ns_steps or not set(degrees) <= {3, 5}:
    raise ValueError(f"polar_express_coeffs: {degrees=} must hold ns_steps={ns_steps} entries, "
                     "each 3 or 5")
  lo, hi, rows = lower, 1.0, []
  for degree in degrees:
    coeffs, err = _minimax_odd(lo, (1 + safety) * hi, degree)
    rows.append(tuple(float(v) for v in coeffs) + (0.0,) * (3 - len(coeffs)))
    lo, hi = 1 - err, 1 + err
  return tuple(rows)


NS_COEFFS = {
    # Jordan's coefficients, tuned for the steepest slope at 0: after 5 iterations every
    # singular value in [1e-2, 1] lands in about [0.68, 1.13], not at 1.
    "standard": (3.4445, -4.7750, 2.0315),
    # The classical quintic (15x − 10x³ + 3x⁵)/8: f(1) = 1 with f'(1) = f''(1) = 0, so it
    # converges to U Vᵀ itself — slower at the start (slope 15/8 at 0), exact in the end.
    "classic": (15 / 8, -10 / 8, 3 / 8),
    # A per-iteration schedule (Ahn et al., Dion): 5 iterations into about [0.98, 1.03].
    "dion": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
    # Greedy minimax schedule for [1e-3, 1] with a 1% margin (`polar_express_coeffs`): 5
    # iterations send every singular value in [1e-3, 1] into [0.875, 1.125], and the slope at 0
    # is ~1020 (standard: 3.4445⁵ ≈ 485), so smaller singular values get closer to 1 too.
    "polar_express": polar_express_coeffs(5, 1e-3),
    # The same construction for [2e-3, 1] with a cubic fourth step: into [0.91, 1.09], slope
    # ~560 at 0, and one matrix product fewer per matrix than the quintic schedules (14 vs 15
    # `(m, m, n)` products for a square matrix; 24 vs 25 for `(D, 4D)` on its Gram).
    "polar_express_lean": polar_express_coeffs(5, 2e-3, degrees=(5, 5, 5, 3, 5)),
}


def _coeff_rows(coeffs) -> tuple[np.ndarray | jax.Array, np.ndarray]:
  """The `(n, 3)` coefficients and, per row, whether the step is cubic (`c = 0`).

  Concrete coefficients come back as float64 numpy, so the cubic rows are known while tracing
  and skip a product; traced ones (e.g. under `optax.inject_hyperparams`) as they are, with no
  row taken for cubic.
  """
  if isinstance(coeffs, str):
    if coeffs not in NS_COEFFS:
      raise ValueError(f"newton_schulz: unknown coeffs {coeffs!r}; choose one of {list(NS_COEFFS)}")
    coeffs = NS_COEFFS[coeffs]
  try:
    rows = np.asarray(coeffs, dtype=np.float64)
  except jax.errors.TracerArrayConversionError:
    rows = jnp.asarray(coeffs, dtype=jnp.float32)
  if rows.ndim == 1:
    rows = rows[None]
  if rows.ndim != 2 or rows.shape[-1] != 3:
    raise ValueError(f"newton_schulz: coeffs must be (3,) or (n, 3), got {rows.shape=}")
  cubic = rows[:, 2] == 0 if isinstance(rows, np.ndarray) else np.zeros(len(rows), bool)
  return rows, cubic


def coeff_table(coeffs) -> jax.Array:
  """The coefficients as a `(n, 3)` float32 table: one row per iteration (a triple is one row).

  Args:
    coeffs: a preset name of `NS_COEFFS`, a triple `(a, b, c)`, or a `(n, 3)` schedule.

  Returns:
    `(n, 3)` array; iteration `i` of `newton_schulz` uses row `min(i, n - 1)`.
  """
  return jnp.asarray(_coeff_rows(coeffs)[0], dtype=jnp.float32)


def _prenormalize(G: jax.Array, eps: float) -> jax.Array:
  """`G / (‖G‖_F + eps)` per matrix, after dividing by `max |G|` so huge inputs cannot overflow."""
  peak = jnp.max(jnp.abs(G), axis=(-2, -1), keepdims=True)
  G = G / jnp.where(peak == 0, 1, peak)
  return G / (jnp.sqrt(jnp.sum(G * G, axis=(-2, -1), keepdims=True)) + eps)


def gram_is_cheaper(m: int, n: int, ns_steps: int) -> bool:
  r"""Whether the Gram iteration takes fewer FLOPs than the direct one for an `(m, n)` matrix.

  With `s = min(m, n)`, `r = max(m, n) / s` and `k = ns_steps`, in units of `2s³` FLOPs
  (quintic steps; a cubic step saves one unit in both):

  .. math::
    \text{direct: } k(2r + 1), \qquad \text{Gram: } 2r + 4k - 3

  (the Gram iteration forms `A_0` and `Q_k X_0` once, and per step `R²`, `Q ← S Q` and
  `R ← S (S R)`, less the first `Q` product and the last `R` update). Gram wins when
  `r > 3/2` and `k ≥ 2`.

  Example:
    >>> from transformer.linalg.polar import gram_is_cheaper
    >>> gram_is_cheaper(768, 3072, 5), gram_is_cheaper(768, 768, 5)
    (True, False)
  """
  s = min(m, n)
  r = max(m, n) / s
  return ns_steps >= 2 and ns_steps * (2 * r + 1) > 2 * r + 4 * ns_steps - 3


def _gram_of(X: jax.Array, tall: bool) -> jax.Array:
  """`Xᵀ X` if `tall` else `X Xᵀ`, the short side's Gram, written as one contraction.

  (Spelled as an einsum, not `X @ swapaxes(X)`: XLA:CPU then contracts in place instead of
  materializing the transpose; for one `(768, 3072)` matrix that halved the direct iteration's
  time.)
  """
  return jnp.einsum("...ji,...jk->...ik" if tall else "...ij,...kj->...ik", X, X)


def _poly(A: jax.Array, row, cubic: bool) -> jax.Array:
  """`b A + c A²` (without the product when the step is cubic, `c = 0`)."""
  _, b, c = row
  return b * A if cubic else b * A + c * (A @ A)


def _direct(X: jax.Array, table: jax.Array, cubic: np.ndarray, ns_steps, tall: bool) -> jax.Array:
  """The iteration on `X` itself; a tall `X` is multiplied from the right."""

  def step(X, row, cubic=False):
    # `row` is float32 or wider: the sums run there, the products in `X.dtype`.
    B = _poly(_gram_of(X, tall), row, cubic).astype(X.dtype)
    return (row[0] * X + (X @ B if tall else B @ X)).astype(X.dtype)

  if not isinstance(ns_steps, int):  # traced: one loop body for every row
    return jax.lax.fori_loop(
        0, ns_steps, lambda i, X: step(X, table[jnp.minimum(i, table.shape[0] - 1)]), X)
  for i in range(ns_steps):
    j = min(i, len(cubic) - 1)
    X = step(X, table[j], cubic=cubic[j])
  return X


def _gram(X: jax.Array, table: jax.Array, cubic: np.ndarray, ns_steps: int,
          tall: bool) -> jax.Array:
  r"""The same iteration on the short side's Gram: `X_k = Q_k X_0` (`X_0 Q_k` if `tall`).

  .. math::
    R_0 = A_0, \quad S_i = a_i I + b_i R_i + c_i R_i^2, \quad
    Q_{i+1} = S_i Q_i, \quad R_{i+1} = S_i (S_i R_i) = X_{i+1} X_{i+1}^\top

  All of `A_0, R_i, S_i, Q_i` are polynomials in `A_0`, so they commute and the order of the
  products does not matter in exact arithmetic.
  """
  if ns_steps == 0:
    return X
  R = _gram_of(X, tall)
  eye = jnp.broadcast_to(jnp.eye(R.shape[-1], dtype=R.dtype), R.shape)
  Q = None
  for i in range(ns_steps):
    j = min(i, len(cubic) - 1)
    S = (table[j, 0] * eye + _poly(R, table[j], cubic=cubic[j])).astype(R.dtype)
    Q = S if Q is None else S @ Q
    if i < ns_steps - 1:
      R = S @ (S @ R)
  return X @ Q if tall else Q @ X


def newton_schulz(
    G: jax.Array,
    *,
    ns_steps: int | jax.Array | None = None,
    coeffs="standard",
    compute_dtype=None,
    eps: float = 1e-8,
    gram: bool | None = None,
    float32_steps: int = 0,
) -> jax.Array:
  r"""Approximate the polar factor `U Vᵀ` of `G = U Σ Vᵀ` by a quintic Newton–Schulz iteration.

  .. math::
    X_0 = G / \|G\|_F, \qquad
    X_{i+1} = a_i X_i + b_i (X_i X_i^\top) X_i + c_i (X_i X_i^\top)^2 X_i

  Each step maps every singular value by `p(σ) = a σ + b σ³ + c σ⁵` and keeps the singular
  vectors, so `X_k = U p_k(…p_1(Σ/‖G‖_F)) Vᵀ`. The Frobenius pre-normalisation puts all
  `σ ≤ 1`. Tall matrices are iterated on their short side (`X ← a X + X (b A + c A²)` with
  `A = Xᵀ X`, the same map since `p(Xᵀ) = p(X)ᵀ`), so the Gram is `min(m, n)` square; when
  that is cheaper (`gram_is_cheaper`: aspect ratio above 3/2) the whole iteration runs on
  that Gram (`X_k = Q_k X_0`, see the module doc).

  Args:
    G: `(..., m, n)`; leading axes are a batch (e.g. the stacked layer axis).
    ns_steps: Newton–Schulz iterations; default 5 for a single triple, the schedule's length
      for a schedule. May be a traced integer (then the loop is not unrolled and the direct
      iteration is used).
    coeffs: a preset of `NS_COEFFS` (`"standard"`, `"classic"`, `"dion"`, `"polar_express"`,
      `"polar_express_lean"`), a triple `(a, b, c)`, or a per-iteration `(n, 3)` schedule
      (iterations past `n` reuse the last row; a row with `c = 0` is a cubic step and skips a
      matrix product).
    compute_dtype: dtype of the iteration (e.g. `jnp.bfloat16`); default `G.dtype`. The
      pre-normalisation is always done in at least float32; the result has `G.dtype`.
    eps: added to `‖G‖_F`, so a zero matrix maps to zero.
    gram: `True` iterates on the Gram, `False` on `X`; `None` (default) picks the Gram when
      `gram_is_cheaper` and the compute dtype has float32's precision or more. (`Q_k` grows
      like the slope of the schedule at 0, ~485 for `"standard"`, and amplifies rounding by as
      much: about 1e-3 relative error in float32 on rank-deficient inputs, too much in
      bfloat16.)
    float32_steps: the first iterations whose products run in float32 when `compute_dtype`
      is less precise (bfloat16, float16); the rest run in `compute_dtype`. Rounding in the
      early steps is what the later ones amplify. Measured with the Polar Express schedule
      on κ = 10 spectra (`tests/optim/test_orthogonalized.py`): `σ_min` 0.814 with all five
      steps in bfloat16, 0.850 with two in float32, 0.870 with three, against float32's band
      bottom 0.875 (0.867 with one bfloat16 ulp); the top stays within the band plus one ulp
      throughout.

  Returns:
    `(..., m, n)` array of `G.dtype`: finite for zero, rank-deficient and huge inputs.

  Example:
    >>> import jax, numpy as np
    >>> G = jax.random.normal(jax.random.key(0), (4, 32, 64))  # 4 stacked layers
    >>> O = newton_schulz(G, ns_steps=5)
    >>> s = np.linalg.svd(np.asarray(O, np.float64), compute_uv=False)
    >>> bool(0.68 <= s.min() and s.max() <= 1.135)  # every σ of every O[l] in the band
    True

  References:
    Jordan et al., `Muon: An optimizer for hidden layers in neural networks`, 2024.
    Higham, `Functions of Matrices: Theory and Computation`, 2008 (§8, Newton–Schulz).
  """
  if G.ndim < 2:
    raise ValueError(f"newton_schulz: G must be a matrix or a batch of them, got {G.ndim=}")
  rows, cubic = _coeff_rows(coeffs)
  if ns_steps is None:
    ns_steps = 5 if len(rows) == 1 else len(rows)
  dtype = jnp.dtype(compute_dtype or G.dtype)
  static = isinstance(ns_steps, int)
  if gram is None:
    gram = (static and gram_is_cheaper(*G.shape[-2:], ns_steps)
            and jnp.finfo(dtype).eps <= jnp.finfo(jnp.float32).eps)
  if gram and not static:
    raise ValueError("newton_schulz: gram=True needs a Python int ns_steps (the Gram loop is "
                     "unrolled); pass gram=None or an int")
  low_precision = jnp.finfo(dtype).eps > jnp.finfo(jnp.float32).eps
  if float32_steps and (not static or gram):
    raise ValueError("newton_schulz: float32_steps needs a Python int ns_steps and the direct "
                     "iteration (gram=False); pass float32_steps=0 otherwise")
  tall = G.shape[-2] > G.shape[-1]
  X = _prenormalize(G.astype(jnp.promote_types(G.dtype, jnp.float32)), eps).astype(dtype)
  # The coefficients stay in float32 even when the products run in bfloat16: rounded to
  # bfloat16's 8 bits, the Polar Express schedule (a ≈ 8.39, b ≈ -24.37, c ≈ 17.73 in its
  # first step, which cancel) is a different polynomial, and its singular values leave the float32
  # band (measured: σ_min 0.77 instead of 0.875 after five steps).
  table = jnp.asarray(rows, jnp.promote_types(dtype, jnp.float32))
  if float32_steps and low_precision:
    wide = jnp.promote_types(dtype, jnp.float32)
    first = min(float32_steps, ns_steps)
    X = _direct(X.astype(wide), table, cubic, first, tall).astype(dtype)
    rest = ns_steps - first
    # The remaining steps continue the schedule from row `first`.
    X = _direct(X, table[first:] if first < table.shape[0] else table[-1:],
                cubic[first:] if first < len(cubic) else cubic[-1:], rest, tall)
    return X.astype(G.dtype)
  X = (_gram(X, table, cubic, ns_steps, tall) if gram
       else _direct(X, table, cubic, ns_steps, tall))
  return X.astype(G.dtype)
