"""Strict JAX for the whole suite, and 8 simulated CPU devices for the sharding tests."""

import os

# Must precede the first `import jax` of the process (pytest imports conftest first).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
