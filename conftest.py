"""Set before the first `import jax` of any pytest run, the suite's and the doctests' alike.

8 simulated CPU devices for the sharding tests and the `experiments.train.sharding` Example, and
JAX's persistent compilation cache: many tests compile the same small programs (a tiny
model's step, its forward pass) through different `jit` wrappers, and the cache keys on the
program, so each compiles once per suite run (and once per checkout after that). The CLI
tests' subprocesses inherit it.

`JAX_DISABLE_MOST_OPTIMIZATIONS`: the suite's programs are tiny and run a handful of steps, so
XLA's optimizing passes cost more than they save. From an empty cache on 2 cores the six
slowest tests took 0.67x the time with them off (268 s -> 179 s, all passing). Numerics stay
float32 (fewer fusions can move a last bit); experiments and benchmarks, run outside pytest,
keep every optimization.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), ".pytest_cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
