"""Strict JAX for the whole suite, 8 simulated CPU devices for the sharding tests, and
`random_params` for tests that need some parameters of a model but not its initializer."""

import os

# Must precede the first `import jax` of the process (pytest imports conftest first).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import transformer  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


def random_params(cfg, seed: int = 0):
  """Parameters with the tree, shapes and dtypes of `transformer.init(cfg, key)`, drawn by numpy.

  The tree comes from `jax.eval_shape` (traced, never compiled) and the distribution is the
  initializer's: norm scales 1, biases 0, every other leaf N(0, init_std²), `w_o` and `w_2`
  divided by sqrt(2 L) under `Config.init_residual_scale`. For a test of a property that holds
  for any parameters: compiling the initializer of each config (a threefry draw per leaf)
  costs more than the rest of such a test.

  Example: `params = random_params(transformer.preset("tiny"))`.
  """
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  rng = np.random.default_rng(seed)

  def draw(path, leaf):
    name = path[-1].key
    if name == "scale":
      x = np.ones(leaf.shape)
    elif name == "bias" or name.startswith("b_"):
      x = np.zeros(leaf.shape)
    else:
      residual = cfg.init_residual_scale and name in ("w_o", "w_2")
      x = rng.normal(0.0, cfg.init_std / (2 * cfg.n_layers) ** 0.5 if residual else cfg.init_std,
                     leaf.shape)
    return jax.device_put(x.astype(leaf.dtype))  # `jnp.asarray` would compile a copy per shape

  return jax.tree_util.tree_map_with_path(draw, shapes)
