"""JAX's persistent compilation cache for every command and benchmark of `experiments`.

A claim trains many arms, rates and seeds through `experiments.train.sweep.train_many`, which
builds its jitted functions anew on each call; the programs are the same whenever the shapes
are (the rate is a traced value, the seed an input), and the persistent cache keys on the
program, so each compiles once per machine and is loaded after that (3–9 s saved per call on
2 CPU cores). The cache holds compiled programs only: a hit runs the very program a miss
would have compiled, so no number changes.
"""

from __future__ import annotations

import os

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "matrices-in-transformers", "jax")


def use_compile_cache(path: str | None = None) -> str:
  """Points JAX's persistent compilation cache at `path` unless the environment already does.

  Call it before the first `import jax` (the CLI does): it sets `JAX_COMPILATION_CACHE_DIR`
  with `os.environ.setdefault`, so a user's own setting wins. Programs that compile in under
  a second are not cached (JAX's default threshold).

  Args:
    path: the folder; default `~/.cache/matrices-in-transformers/jax`.

  Returns:
    The folder in effect.

  Example:
    >>> import os
    >>> from experiments.compile_cache import use_compile_cache
    >>> use_compile_cache() == os.environ["JAX_COMPILATION_CACHE_DIR"]
    True
  """
  return os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", path or DEFAULT_DIR)
