"""Tail probabilities the verdict's tests need, in float64 and without scipy.

`betainc` (the regularized incomplete beta function) gives Student's t tail (`t_sf`, the
p-value of a t-interval's test, `multiplicity`) and the binomial tail (`binom_sf`, the sign
test of a range over seeds and the exact Clopper–Pearson interval of a fraction of seeds,
`censoring`). scipy is what the tests check these against, so it is not what computes them.
"""

from __future__ import annotations

import math

_TINY = 1e-300


def betainc(a: float, b: float, x: float) -> float:
  """The regularized incomplete beta function `I_x(a, b)`, by its continued fraction.

  .. math:: I_x(a, b) = \\frac{x^a (1-x)^b}{a\\,B(a, b)} \\cfrac{1}{1 + \\cfrac{d_1}{1 +
     \\cfrac{d_2}{1 + \\cdots}}}, \\quad d_{2m+1} = -\\frac{(a+m)(a+b+m)x}{(a+2m)(a+2m+1)},
     \\quad d_{2m} = \\frac{m(b-m)x}{(a+2m-1)(a+2m)}

  evaluated by the modified Lentz method where it converges fast (`x < (a+1)/(a+b+2)`), and as
  `1 − I_{1−x}(b, a)` elsewhere (Numerical Recipes §6.4), so a small tail is computed
  directly, never as a difference of numbers near 1.

  Args:
    a, b: the shape parameters, both > 0.
    x: the point, in `[0, 1]`.

  Returns:
    `I_x(a, b)`, to about 1e-14 relative.

  Example:
    >>> from experiments.verdict.arithmetic.distributions import betainc
    >>> round(betainc(2.0, 3.0, 0.4), 6)  # 1 − (1−x)^4 − 4x(1−x)^3 at x = 0.4
    0.5248
  """
  if not (a > 0 and b > 0):
    raise ValueError(f"betainc: {a=} and {b=} must both be > 0.")
  if not 0.0 <= x <= 1.0:
    raise ValueError(f"betainc: {x=} must lie in [0, 1].")
  if x == 0.0 or x == 1.0:
    return x
  if x > (a + 1.0) / (a + b + 2.0):
    return 1.0 - betainc(b, a, 1.0 - x)
  front = math.exp(a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a)
                   - math.lgamma(b)) / a
  f, c, d = 1.0, 1.0, 0.0
  for i in range(1000):
    m = i // 2
    if i == 0:
      num = 1.0
    elif i % 2 == 0:
      num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
    else:
      num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
    d = 1.0 + num * d
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    c = 1.0 + num / c
    c = c if abs(c) > _TINY else _TINY
    f *= c * d
    if abs(1.0 - c * d) < 1e-15:
      return front * (f - 1.0)
  raise ArithmeticError(f"betainc({a}, {b}, {x}): the continued fraction did not converge.")


def t_sf(t: float, dof: float) -> float:
  """`P(T > t)` for Student's t with `dof` degrees of freedom (the one-sided p-value).

  .. math:: P(T > t) = \\tfrac12 I_{\\nu/(\\nu + t^2)}(\\nu/2, 1/2) \\quad (t \\ge 0)

  and `1 − P(T > −t)` below 0.

  Example:
    >>> from experiments.verdict.arithmetic.distributions import t_sf
    >>> round(t_sf(2.776445, 4), 6), t_sf(0.0, 4), t_sf(float("inf"), 4)
    (0.025, 0.5, 0.0)
  """
  if not dof > 0:
    raise ValueError(f"t_sf: {dof=} must be > 0.")
  if math.isnan(t):
    return math.nan
  if math.isinf(t):
    return 0.0 if t > 0 else 1.0
  tail = 0.5 * betainc(dof / 2.0, 0.5, dof / (dof + t * t))
  return tail if t >= 0 else 1.0 - tail


def binom_sf(k: int, n: int, p: float) -> float:
  """`P(X ≥ k)` for `X ~ Binomial(n, p)`: `I_p(k, n − k + 1)`, 1 for `k ≤ 0`, 0 for `k > n`.

  Example:
    >>> from experiments.verdict.arithmetic.distributions import binom_sf
    >>> binom_sf(5, 5, 0.5), binom_sf(4, 5, 0.5), binom_sf(0, 5, 0.5)
    (0.03125, 0.1875, 1.0)
  """
  if n < 0 or not 0.0 <= p <= 1.0:
    raise ValueError(f"binom_sf: {n=} must be >= 0 and {p=} in [0, 1].")
  if k <= 0:
    return 1.0
  if k > n:
    return 0.0
  if p in (0.0, 1.0):
    return p
  if p == 0.5 and n <= 60:  # exact: a sum of dyadic rationals (the sign test)
    return math.fsum(math.comb(n, i) for i in range(k, n + 1)) / 2.0**n
  return betainc(float(k), float(n - k + 1), p)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
  """The exact (Clopper–Pearson) interval of a binomial proportion: `k` successes in `n`.

  .. math:: P(X \\ge k \\mid p_{lo}) = \\frac{\\alpha}{2}, \\qquad
     P(X \\le k \\mid p_{hi}) = \\frac{\\alpha}{2}, \\qquad \\alpha = 1 - \\text{level}

  (`p_lo = 0` when `k = 0`, `p_hi = 1` when `k = n`), each solved by bisection on the
  binomial tail. It covers the proportion with probability at least `level` whatever it is.

  Args:
    k: successes (e.g. seeds that reached the target), `0 ≤ k ≤ n`.
    n: trials (seeds), at least 1.
    level: the coverage, e.g. 0.95.

  Returns:
    `(lo, hi)`.

  Example:
    >>> from experiments.verdict.arithmetic.distributions import clopper_pearson
    >>> lo, hi = clopper_pearson(2, 5)
    >>> round(lo, 4), round(hi, 4)
    (0.0527, 0.8534)
  """
  if n < 1 or not 0 <= k <= n:
    raise ValueError(f"clopper_pearson: need 0 <= k <= n and n >= 1; got {k=}, {n=}.")
  if not 0.0 < level < 1.0:
    raise ValueError(f"clopper_pearson: {level=} must lie in (0, 1).")
  half = (1.0 - level) / 2.0

  def solve(f, target: float) -> float:  # f increasing in p on [0, 1]
    lo, hi = 0.0, 1.0
    for _ in range(200):
      mid = 0.5 * (lo + hi)
      if f(mid) < target:
        lo = mid
      else:
        hi = mid
      if hi - lo < 1e-16:
        break
    return 0.5 * (lo + hi)

  p_lo = 0.0 if k == 0 else solve(lambda p: binom_sf(k, n, p), half)
  p_hi = 1.0 if k == n else solve(lambda p: -(1.0 - binom_sf(k + 1, n, p)), -half)
  return p_lo, p_hi
