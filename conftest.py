"""Set before the first `import jax` of any pytest run, the suite's and the doctests' alike.

8 simulated CPU devices for the sharding tests and the `experiments.sharding` Example.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
