"""One harness, run on every transform of `optim`: convergence, dtypes, state, jit, injection,
gradient accumulation — each property its own test, so one failure hides no other.

Problems are built so that every constraint is feasible at the optimum: targets are
orthogonal matrices (σ = 1, κ = 1, mutually orthogonal heads), so capping at 1.5,
normalizing to 1, conditioning and the head penalty all leave the optimum in place.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim

STEPS = 150
SCHEDULE = optax.exponential_decay(1.0, transition_steps=1, decay_rate=0.97)


def _sgd_rest(tx, lr):
  """`tx` (then `-lr`) on hidden matrices, plain SGD elsewhere: for transforms on matrices only."""
  route = lambda params: jax.tree.map(lambda r: "tx" if r == "hidden" else "sgd",
                                     optim.labels(params))
  return optax.partition({"tx": optax.chain(tx, optax.scale_by_learning_rate(lr)),
                          "sgd": optax.sgd(lr)}, route)


# name -> (factory, numeric kwargs, static kwargs, wrap(tx, lr) -> optimizer, peak lr)
CASES = {
    "muon": (optim.muon, {"learning_rate": 0.1, "adam_learning_rate": 0.1}, {},
             lambda tx, lr: tx, None),
    "scale_by_muon": (optim.scale_by_muon, {"beta": 0.9}, {}, _sgd_rest, 0.1),
    "spectral_cap": (optim.spectral_cap, {"max_sigma": 1.5}, {},
                     lambda tx, lr: optax.chain(optax.sgd(lr), tx), 0.3),
    "spectral_normalize": (optim.spectral_normalize, {"target": 1.0}, {},
                           lambda tx, lr: optax.chain(optax.sgd(lr), tx), 0.3),
    "scale_by_condition": (optim.scale_by_condition, {"alpha": 0.5, "kappa_ref": 2.0},
                           {"every": 3}, lambda tx, lr: optax.chain(tx, optax.sgd(lr)), 0.3),
    "orthogonal_heads": (optim.orthogonal_heads, {"strength": 1e-2}, {"n_heads": 2},
                         lambda tx, lr: optax.chain(optax.sgd(lr), tx), 0.3),
}


def build(name, schedule=SCHEDULE, inject=False):
  factory, numeric, static, wrap, peak = CASES[name]
  if name == "muon":
    numeric = {k: lambda t, v=v: v * schedule(t) for k, v in numeric.items()}
  if inject:
    tx = optax.inject_hyperparams(factory, static_args=tuple(static))(**numeric, **static)
  else:
    tx = factory(**numeric, **static)
  return tx if peak is None else wrap(tx, lambda t: peak * schedule(t))


def _orthogonal(rng, shape):
  q = np.linalg.qr(rng.normal(size=shape[:-2] + (max(shape[-2:]),) * 2))[0]
  return q[..., : shape[-2], : shape[-1]]


def loss(params, data):
  r"""`½ Σ_k ‖h_k ⊙ X (W_k − T_k)‖² + ½ ‖h ⊙ (s − t)‖²`: a quadratic when `X = [I; 0]` and `h`
  varies, a matrix least-squares problem when `X` is a `(16, 8)` design with singular values in
  [0.7, 1.2] and `h = 1`."""
  p = jax.tree.map(lambda x: x.astype(jnp.float32), params)
  r_q = data["h_q"] * jnp.einsum("nd,lde->lne", data["X"], p["blocks"]["attn"]["w_q"] - data["t_q"])
  r_1 = data["h_1"] * (data["X"] @ (p["w_1"] - data["t_1"]))
  r_s = data["h_s"] * (p["scale"] - data["t_s"])
  return 0.5 * (jnp.sum(r_q**2) + jnp.sum(r_1**2) + jnp.sum(r_s**2))


@functools.cache
def problem(kind, dtype=jnp.float32):
  """`(data, params0)` of the quadratic or the least-squares problem (same shapes), drawn by
  numpy once per kind and dtype (a jax array op by op would compile each op on its own)."""
  rng = np.random.default_rng(0)
  data = {"t_q": _orthogonal(rng, (2, 8, 8)), "t_1": _orthogonal(rng, (8, 16)),
          "t_s": np.linspace(0.5, 1.5, 8)}
  if kind == "quadratic":
    data["X"] = np.concatenate([np.eye(8), np.zeros((8, 8))])
    h = lambda shape: rng.uniform(0.7, 1.4, shape)
  else:
    data["X"] = _orthogonal(rng, (16, 8)) * np.linspace(0.7, 1.2, 8)[None, :]
    h = lambda shape: np.ones(shape)
  data.update(h_q=h((2, 16, 8)), h_1=h((16, 16)), h_s=h((8,)))
  # A stacked `w_q` at its place in our tree (`blocks/attn`), so that it splits into heads and
  # its leading axis is a layer axis; a bare 2-D `w_1` is anyone's `x @ W` matrix.
  params0 = {"blocks": {"attn": {"w_q": 0.1 * rng.normal(size=(2, 8, 8))}},
             "w_1": 0.1 * rng.normal(size=(8, 16)), "scale": np.zeros(8)}
  return (jax.tree.map(lambda x: jax.device_put(x.astype(np.float32)), data),
          jax.tree.map(lambda x: jax.device_put(x.astype(dtype)), params0))


def stepper(tx):
  """A jitted `(params, state, data) -> (updates, params, state)` for `tx`."""

  @jax.jit
  def step(params, state, data):
    updates, state = tx.update(jax.grad(loss)(params, data), state, params)
    return updates, optax.apply_updates(params, updates), state

  return step


def run(tx, step, data, params, steps):
  state = jax.jit(tx.init)(params)
  for _ in range(steps):
    _, params, state = step(params, state, data)
  return params


def _signature(tree):
  return jax.tree.map(lambda x: (jnp.shape(x), jnp.asarray(x).dtype), tree)


def _close(a_tree, b_tree, rtol=1e-5, atol=1e-6):
  for a, b in zip(jax.tree.leaves(a_tree), jax.tree.leaves(b_tree), strict=True):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=rtol, atol=atol)


@functools.cache
def case(name):
  """`(tx, jitted step)` of transform `name`, shared by every property test (one compilation
  per transform and dtype)."""
  tx = build(name)
  return tx, stepper(tx)


TRANSFORMS = list(CASES)


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("kind", ["quadratic", "least_squares"])
def test_converges(name, kind):
  """A quadratic with uneven curvature and a matrix least-squares problem: loss falls 1000x."""
  tx, step = case(name)
  data, params0 = problem(kind)
  params = run(tx, step, data, params0, STEPS)
  assert float(loss(params, data)) < 1e-3 * float(loss(params0, data))


@pytest.mark.parametrize("name", TRANSFORMS)
def test_jit_matches_eager(name):
  """`tx.update` under `jax.jit` gives the eager updates and state."""
  tx, _ = case(name)
  data, params = problem("least_squares")
  grads = jax.grad(loss)(params, data)
  state = tx.init(params)
  for _ in range(2):  # the second update reads a non-trivial state
    eager, eager_state = tx.update(grads, state, params)
    jitted, jitted_state = jax.jit(tx.update)(grads, state, params)
    _close(jitted, eager)
    _close(jitted_state, eager_state)
    state = eager_state


@pytest.mark.parametrize("name", TRANSFORMS)
def test_inject_hyperparams_keeps_the_trajectory(name):
  """`optax.inject_hyperparams` of the factory: the same trajectory as the plain transform."""
  tx, step = case(name)
  data, params0 = problem("least_squares")
  injected = build(name, inject=True)
  _close(run(tx, step, data, params0, 5), run(injected, stepper(injected), data, params0, 5))


@pytest.mark.parametrize("name", TRANSFORMS)
def test_multisteps_applies_the_mean_gradient(name):
  """`optax.MultiSteps(every_k=2)`: nothing on the first micro-step, then the update of the
  mean gradient."""
  tx, _ = case(name)
  data, params0 = problem("least_squares")
  acc = optax.MultiSteps(tx, every_k_schedule=2)
  g_1, g_2 = jax.grad(loss)(params0, data), jax.grad(lambda p: 3.0 * loss(p, data))(params0)
  acc_update, acc_state = jax.jit(acc.update), acc.init(params0)
  first, acc_state = acc_update(g_1, acc_state, params0)
  second, _ = acc_update(g_2, acc_state, params0)
  expected, _ = jax.jit(tx.update)(jax.tree.map(lambda a: 2 * a, g_1), tx.init(params0), params0)
  assert all(float(jnp.max(jnp.abs(u))) == 0.0 for u in jax.tree.leaves(first))
  _close(second, expected)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_bfloat16_dtypes_are_preserved(name):
  """bfloat16 parameters: updates and parameters stay bfloat16 (and finite) for 3 steps."""
  tx, step = case(name)
  data, params = problem("quadratic", jnp.bfloat16)
  state = tx.init(params)
  signature = _signature(params)
  for _ in range(3):
    updates, params, state = step(params, state, data)
    assert _signature(updates) == signature
    assert _signature(params) == signature
    assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_state_shapes_and_dtypes_are_stable(name, dtype):
  """The optimizer state keeps its structure, shapes and dtypes from `init` through updates."""
  tx, step = case(name)
  data, params = problem("quadratic", dtype)
  state = tx.init(params)
  signature = _signature(state)
  for _ in range(3):
    _, params, state = step(params, state, data)
    assert _signature(state) == signature
