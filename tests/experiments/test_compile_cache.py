"""`use_compile_cache`: the CLI's compiled programs persist, and a user's own setting wins."""

import subprocess
import sys

from experiments import compile_cache


def _cache_dir_seen_by_jax(env: dict) -> str:
  code = ("from experiments.compile_cache import use_compile_cache; use_compile_cache(); "
          "import jax; print(jax.config.jax_compilation_cache_dir)")
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        check=True).stdout.strip()


def test_default_folder_reaches_jax_and_a_users_setting_wins(tmp_path, monkeypatch):
  import os
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env["HOME"] = str(tmp_path)
  assert _cache_dir_seen_by_jax(env) == str(
      tmp_path / ".cache" / "matrices-in-transformers" / "jax")
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "mine")
  assert _cache_dir_seen_by_jax(env) == str(tmp_path / "mine")
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  assert compile_cache.use_compile_cache(str(tmp_path / "x")) == str(tmp_path / "x")
