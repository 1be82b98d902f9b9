"""Set before the first `import jax` of any pytest run, the suite's and the doctests' alike.

8 simulated CPU devices for the sharding tests and the `experiments.train.sharding` Example, and
JAX's persistent compilation cache: many tests compile the same small programs (a tiny
model's step, its forward pass) through different `jit` wrappers, and the cache keys on the
program, so each compiles once per suite run (and once per checkout after that). The CLI
tests' subprocesses inherit it.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), ".pytest_cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
