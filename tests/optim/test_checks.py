"""Bad arguments are refused at construction, in one line raised by our code (not from inside
jax); `check_finite=True` names the leaf that holds a NaN. (`optim/checks.py`.)
"""


import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim
from tests.refusals import refused as _refused

refused = functools.partial(_refused, package=optim)  # one line, from our code


BAD = [
    (lambda: optim.scale_by_muon(ns_steps=0), "ns_steps=0"),
    (lambda: optim.muon(0.02, ns_steps=-3), "ns_steps=-3"),
    (lambda: optim.muon(0.02, ns_steps=2.5), "ns_steps=2.5"),
    (lambda: optim.scale_by_muon(beta=1.0), "beta=1.0"),
    (lambda: optim.muon(0.02, beta=-0.1), "beta=-0.1"),
    (lambda: optim.muon(0.02, adam_b2=1.5), "adam_b2=1.5"),
    (lambda: optim.muon(0.02, n_heads=0), "n_heads=0"),
    (lambda: optim.muon(0.02, muon_roles=("matrices",)), "'matrices'"),
    (lambda: optim.scale_by_condition(every=0), "every=0"),
    (lambda: optim.scale_by_condition(every=-2), "every=-2"),
    (lambda: optim.scale_by_condition(power_steps=-1), "power_steps=-1"),
    (lambda: optim.scale_by_condition(alpha=-0.5), "alpha=-0.5"),
    (lambda: optim.spectral_cap(1.0, method="power", power_steps=-1), "power_steps=-1"),
    (lambda: optim.spectral_normalize(init_power_steps=-5), "init_power_steps=-5"),
    (lambda: optim.spectral_cap(0.0), "max_sigma=0.0"),
    (lambda: optim.spectral_cap(-2), "max_sigma=-2"),
    (lambda: optim.spectral_normalize(0.0), "target=0.0"),
    (lambda: optim.spectral_cap(1.0, method="qr"), "method='qr'"),
    (lambda: optim.spectral_cap(1.0, tol=0.0), "tol=0.0"),
    (lambda: optim.orthogonal_heads(-1.0, 4), "strength=-1.0"),
    (lambda: optim.orthogonal_heads(1e-3, 0), "n_heads=0"),
    (lambda: optim.orthogonal_heads(1e-3, 4, matrix_axes=optim.MatrixAxes()), "mapping"),
    (lambda: optim.spectral_cap(1.0, check_finite="yes"), "check_finite='yes'"),
    (lambda: optim.spectral_cap(1.0, matrix_axes=[0]), "not a MatrixAxes"),
]


@pytest.mark.parametrize("build, needle", BAD, ids=[n for _, n in BAD])
def test_bad_arguments_refused_in_one_line(build, needle):
  with pytest.raises(ValueError) as e:
    build()
  refused(e, needle)


def test_out_of_range_matrix_axes_name_the_leaf():
  params = {"fc": {"kernel": jnp.ones((4, 8))}}
  with pytest.raises(ValueError) as e:
    optim.muon(0.02, matrix_axes={"fc/kernel": optim.MatrixAxes(0, 2)}).init(params)
  msg = str(e.value)
  assert "\n" not in msg and "'fc/kernel'" in msg and "(4, 8)" in msg and "[-2, 1]" in msg


def test_arrays_from_inject_hyperparams_are_left_to_the_trace():
  tx = optax.inject_hyperparams(optim.scale_by_muon)(beta=0.9)
  p = {"w": jnp.ones((4, 4))}
  u, _ = tx.update(p, tx.init(p))
  assert u["w"].shape == (4, 4)


def _nan_tree():
  params = {"fc1": {"kernel": jnp.ones((4, 8))}, "fc2": {"kernel": jnp.ones((8, 4))},
            "lm_head": {"kernel": jnp.ones((4, 5))}}
  grads = jax.tree.map(jnp.ones_like, params)
  grads["fc2"]["kernel"] = grads["fc2"]["kernel"].at[3, 1].set(jnp.nan)
  return params, grads


TRANSFORMS = {
    "muon": lambda: optim.muon(0.02, check_finite=True),
    "scale_by_muon": lambda: optim.scale_by_muon(check_finite=True),
    "spectral_cap": lambda: optim.spectral_cap(1.0, check_finite=True),
    "spectral_normalize": lambda: optim.spectral_normalize(1.0, check_finite=True),
    "scale_by_condition": lambda: optim.scale_by_condition(check_finite=True),
    "orthogonal_heads": lambda: optim.orthogonal_heads(
        1e-3, 2, check_finite=True, layout_fn=lambda p: jax.tree.map(lambda _: None, p)),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_check_finite_names_the_leaf(name):
  params, grads = _nan_tree()
  tx = TRANSFORMS[name]()
  state = tx.init(params)
  with pytest.raises(ValueError) as e:  # eager: one line, from our code
    tx.update(grads, state, params)
  refused(e, f"optim.{name}", "'fc2/kernel'", "gradient", "NaN or inf")
  # Under jit the value is known only when the step runs: jax's runtime error carries it.
  with pytest.raises(Exception, match=r"'fc2/kernel' holds NaN or inf"):
    jax.block_until_ready(jax.jit(tx.update)(grads, state, params))
  # Finite values pass, and the result is the transform's own.
  clean = jax.tree.map(jnp.ones_like, params)
  checked, _ = tx.update(clean, state, params)
  plain = {"muon": lambda: optim.muon(0.02), "scale_by_muon": optim.scale_by_muon,
           "spectral_cap": lambda: optim.spectral_cap(1.0),
           "spectral_normalize": lambda: optim.spectral_normalize(1.0),
           "scale_by_condition": optim.scale_by_condition,
           "orthogonal_heads": lambda: optim.orthogonal_heads(
               1e-3, 2, layout_fn=lambda p: jax.tree.map(lambda _: None, p))}[name]()
  want, _ = plain.update(clean, plain.init(params), params)
  for a, b in zip(jax.tree.leaves(checked), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(a, b)


def test_check_finite_names_a_parameter_too():
  params, _ = _nan_tree()
  params["fc1"]["kernel"] = params["fc1"]["kernel"].at[0, 0].set(jnp.inf)
  tx = optim.spectral_cap(1.0, check_finite=True, mask=optim.select(names=("fc2",)))
  with pytest.raises(ValueError) as e:
    tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  refused(e, "the parameter of 'fc1/kernel'")
