"""Power-law fits against known power laws, a float64 loop reference, and WeightWatcher."""

import importlib.metadata

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import powerlaw, spectra


def _power_law(alpha, n, xmin=1.0, seed=0):
  """`n` samples of the density `∝ x^{-alpha}` on `[xmin, ∞)` (inverse CDF)."""
  u = np.random.default_rng(seed).uniform(size=n)
  return xmin * (1 - u) ** (-1 / (alpha - 1))


def _clauset_loop(x):
  """Clauset–Shalizi–Newman, written out: every candidate xmin, MLE α, KS distance."""
  x = np.sort(x[x > 0])
  best = None
  for i in range(len(x) - 1):
    tail = x[i:]
    n = len(tail)
    spread = np.sum(np.log(tail / x[i]))
    if spread <= 0:
      continue
    alpha = 1 + n / spread
    D = np.max(np.abs(1 - (tail / x[i]) ** (1 - alpha) - np.arange(n) / n))
    if best is None or D < best[2]:
      best = (alpha, x[i], D, n)
  return best


@pytest.mark.parametrize("alpha", [2.5, 3.5])
def test_clauset_recovers_a_known_exponent_and_threshold(alpha):
  # 10⁴ power-law values above xmin = 1, under a body of 3,000 values below it.
  body = np.random.default_rng(1).uniform(0.2, 1.0, 3000)
  x = np.concatenate([_power_law(alpha, 10_000), body])
  fit = jax.jit(powerlaw.power_law_fit)(jnp.asarray(x, jnp.float32))
  np.testing.assert_allclose(fit["alpha"], alpha, rtol=0.02)
  assert 0.95 <= float(fit["xmin"]) <= 1.3
  assert abs(float(fit["alpha"]) - alpha) < 3 * float(fit["sigma"])


def test_clauset_equals_the_float64_loop_on_batches():
  rng = np.random.default_rng(2)
  x = rng.standard_t(3, size=(2, 3, 300)) ** 2  # squared Student-t: a power-law tail
  with jax.enable_x64(True):
    fit = jax.jit(powerlaw.power_law_fit)(jnp.asarray(x))
    for idx in np.ndindex(2, 3):
      alpha, xmin, D, n = _clauset_loop(x[idx])
      np.testing.assert_allclose(fit["alpha"][idx], alpha, rtol=1e-10)
      np.testing.assert_allclose(fit["xmin"][idx], xmin, rtol=1e-12)
      np.testing.assert_allclose(fit["ks_distance"][idx], D, rtol=1e-9)
      assert int(fit["n_tail"][idx]) == n


def test_hill_method_and_spectrum_fields():
  lam = _power_law(3.0, 1000, seed=3)
  hill = powerlaw.power_law_fit(jnp.asarray(lam), "hill")
  np.testing.assert_allclose(hill["alpha"], spectra.power_law_alpha(jnp.asarray(lam)), rtol=1e-6)
  np.testing.assert_allclose(hill["xmin"], np.sort(lam)[500], rtol=1e-6)
  # Non-positive values are left out; fewer than two positive values give NaN.
  signed = np.where(np.arange(1000) % 2 == 0, lam, -lam)
  fit = powerlaw.power_law_fit(jnp.asarray(np.stack([signed, np.eye(1000)[7]]), jnp.float32))
  np.testing.assert_allclose(fit["alpha"][0], _clauset_loop(signed)[0], rtol=1e-4)
  assert np.isnan(float(fit["alpha"][1])) and int(fit["n_tail"][1]) == 0
  W = jnp.asarray(np.random.default_rng(4).standard_t(3, size=(2, 64, 48)), jnp.float32)
  spec = jax.jit(lambda W: spectra.spectrum(W, matrix_axes=(-2, -1)))(W)
  s2 = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False) ** 2
  for l in range(2):
    np.testing.assert_allclose(spec["alpha_clauset"][l], _clauset_loop(s2[l])[0], rtol=1e-4)
  with pytest.raises(ValueError, match="method="):
    powerlaw.power_law_fit(jnp.asarray(lam), "ols")


# Heavy-tailed random matrices (Student-t entries), as the ESDs of trained layers.
WW_SHAPES = [(256, 128), (128, 256), (192, 192), (320, 96), (96, 160), (256, 64), (128, 128),
             (200, 150)]
WW_DOFS = [2.5, 3.0, 3.5, 4.0, 5.0, 2.5, 3.0, 6.0]


def test_alpha_clauset_agrees_with_weightwatcher(record_property):
  ww = pytest.importorskip("weightwatcher")
  torch = pytest.importorskip("torch")
  versions = {name: importlib.metadata.version(name)
              for name in ("weightwatcher", "torch", "powerlaw", "jax")}
  for name, version in versions.items():
    record_property(f"{name}_version", version)
  rng = np.random.default_rng(0)
  mats = [rng.standard_t(dof, size=s) / np.sqrt(s[0]) for s, dof in zip(WW_SHAPES, WW_DOFS,
                                                                         strict=True)]
  layers = []
  for W in mats:  # torch.nn.Linear keeps W as (d_out, d_in): the transpose, same spectrum
    lin = torch.nn.Linear(*W.shape, bias=False)
    with torch.no_grad():
      lin.weight.copy_(torch.tensor(W.T, dtype=torch.float32))
    layers.append(lin)
  details = ww.WeightWatcher(model=torch.nn.Sequential(*layers)).analyze()
  theirs = details["alpha"].to_numpy()
  ours = np.array([float(spectra.spectrum(jnp.asarray(W, jnp.float32))["alpha_clauset"])
                   for W in mats])
  rel = np.abs(ours / theirs - 1)
  record_property("max_relative_difference", float(rel.max()))
  assert rel.max() < 0.01, (versions, ours, theirs)
