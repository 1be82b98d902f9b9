"""The shared trained models every claim measures, trained once and cached on disk.

`base_model(name, seed)` returns `(params, cfg)` of a reference model trained on the standard
library's bytes with AdamW (`experiments.train`'s optimizer, warm-up + cosine):

| name | model | steps | batch × T |
| --- | --- | --- | --- |
| `small` | d 128, L 4, H 4 (the `tiny` family: pre-LN, GELU, learned positions) | 400 | 16 × 128 |
| `quick` | the `tiny` preset (d 64, L 2, H 4) | 60 | 16 × 64 |

Both keep `max_len = 256`, so claims can read them at T = 256 (position rows beyond the
training length stay at their initial values). The first call trains (`train_many`, in
memory) and writes `runs/cache/<hash>/{params.npz, meta.json}`, the hash covering the model
config, the training recipe and the seed; the folder is written under a temporary name and
renamed into place, so a crash mid-write leaves no half-written cache. Later calls load it;
`base_models(name, seeds)` trains the missing seeds of a list together in one program.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil

import jax
import numpy as np

import transformer
from experiments import train
from experiments.train import sweep

CACHE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Recipe:
  """How a shared model is trained."""

  cfg: transformer.Config
  steps: int
  batch_size: int
  seq_len: int
  learning_rate: float = 3e-3
  warmup_steps: int = 30
  data: str = "stdlib"

  def train_config(self, seed: int) -> train.TrainConfig:
    return train.TrainConfig(steps=self.steps, batch_size=self.batch_size, seq_len=self.seq_len,
                             learning_rate=self.learning_rate, warmup_steps=self.warmup_steps,
                             optimizer="adamw", data=self.data, seed=seed)

  def key(self, seed: int) -> str:
    spec = {"version": CACHE_VERSION, "cfg": self.cfg.to_dict(), "seed": seed,
            "train": {k: v for k, v in dataclasses.asdict(self).items() if k != "cfg"}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


RECIPES = {
    "small": Recipe(transformer.preset("tiny", d_model=128, n_layers=4, n_heads=4, max_len=256),
                    steps=400, batch_size=16, seq_len=128),
    "quick": Recipe(transformer.preset("tiny"), steps=60, batch_size=16, seq_len=64,
                    warmup_steps=10),
}


def _flatten(params) -> dict[str, np.ndarray]:
  return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(params)}


def _unflatten(cfg: transformer.Config, arrays) -> dict:
  abstract = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  names = list(_flatten(jax.tree.map(lambda a: np.zeros((), a.dtype), abstract)))
  leaves = [np.asarray(arrays[n]) for n in names]
  return jax.tree.unflatten(jax.tree.structure(abstract), leaves)


def cache_dir(name: str, seed: int, root: str = "runs") -> str:
  """`root/cache/<hash>` of the shared model `name` at `seed`."""
  if name not in RECIPES:
    raise ValueError(f"base_model: name={name!r} is unknown. Fix: use one of {sorted(RECIPES)}.")
  return os.path.join(root, "cache", RECIPES[name].key(seed))


def _write(path: str, params, meta: dict) -> None:
  """Writes `params.npz` and `meta.json` under a temporary name, then renames into place."""
  tmp = f"{path}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  np.savez(os.path.join(tmp, "params.npz"), **_flatten(params))
  with open(os.path.join(tmp, "meta.json"), "w") as f:
    json.dump(meta, f, indent=1)
  if os.path.isdir(path) and not os.path.exists(os.path.join(path, "meta.json")):
    shutil.rmtree(path)  # a folder without meta.json is not a cache entry (e.g. hand-made)
  try:
    os.rename(tmp, path)  # atomic; fails if another process got there first
  except OSError:
    shutil.rmtree(tmp, ignore_errors=True)
    if not os.path.exists(os.path.join(path, "meta.json")):
      raise


def _train_and_write(name: str, seeds: tuple[int, ...], root: str) -> None:
  """Trains the missing `seeds` of `name` together (one vmapped program) and caches each."""
  recipe = RECIPES[name]
  tc = recipe.train_config(seeds[0])
  result = sweep.train_many(recipe.cfg, sweep.train_like(tc), seeds=seeds,
                               learning_rates=(recipe.learning_rate,), steps=recipe.steps,
                               data=recipe.data, batch_size=recipe.batch_size,
                               seq_len=recipe.seq_len, eval_every=recipe.steps, eval_batches=4)
  for j, seed in enumerate(seeds):
    params = jax.tree.map(lambda x, j=j: np.asarray(x[0, j]), result.params)
    meta = {"name": name, "seed": seed, "cfg": recipe.cfg.to_dict(),
            "recipe": {k: v for k, v in dataclasses.asdict(recipe).items() if k != "cfg"},
            "train_loss": float(result.loss[0, j, -1]),
            "val_loss": float(result.val_loss[0, j, -1]), "diverged": bool(result.diverged[0, j])}
    path = cache_dir(name, seed, root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write(path, params, meta)


def _cached(name: str, seed: int, root: str) -> bool:
  return os.path.exists(os.path.join(cache_dir(name, seed, root), "meta.json"))


@functools.lru_cache(maxsize=16)
def _load(name: str, seed: int, root: str):
  path = cache_dir(name, seed, root)
  if not _cached(name, seed, root):
    _train_and_write(name, (seed,), root)
  with open(os.path.join(path, "meta.json")) as f:
    meta = json.load(f)
  with np.load(os.path.join(path, "params.npz")) as arrays:
    params = _unflatten(RECIPES[name].cfg, arrays)
  return params, {**meta, "path": path}


def base_model(name: str, seed: int, *, root: str = "runs") -> tuple[dict, transformer.Config]:
  """`(params, cfg)` of the shared model `name` (`small` or `quick`) trained from `seed`.

  Args:
    name: `small` or `quick` (see the module docstring).
    seed: init and data-stream seed of the training run.
    root: the `runs` folder holding `cache/`.

  Returns:
    `(params, cfg)`; `base_model_info` gives its losses and cache folder.

  Example:
    >>> import tempfile
    >>> from experiments.models import base_model
    >>> params, cfg = base_model("quick", 0, root=tempfile.mkdtemp())  # trains: ~10 s
    >>> cfg.d_model
    64
  """
  params, _ = _load(name, seed, root)
  return params, RECIPES[name].cfg


def base_models(name: str, seeds, *, root: str = "runs") -> list[tuple[dict, transformer.Config]]:
  """`[base_model(name, s) for s in seeds]`, training the missing seeds together first.

  Seeds trained together run as one vmapped program (`train_many`); their losses agree with
  separately trained ones to float32 rounding, not bit for bit.
  """
  missing = tuple(s for s in dict.fromkeys(int(s) for s in seeds) if not _cached(name, s, root))
  if missing:
    _train_and_write(name, missing, root)
  return [base_model(name, int(s), root=root) for s in seeds]


def base_model_info(name: str, seed: int, *, root: str = "runs") -> dict:
  """The cached model's metadata: recipe, final train/validation loss, cache `path`."""
  return dict(_load(name, seed, root)[1])


def windows(seed: int, seq_len: int, n: int, split: str, step: int = 10_000) -> np.ndarray:
  """`(n, seq_len + 1)` windows of the stdlib `split`, pure in `(seed, step)`.

  Step 10 000 lies beyond every shared model's training steps, so calibration windows of the
  training split are not the batches the model was trained on.
  """
  from experiments import data

  return data.text_source("stdlib", seq_len).batch(seed, step, n, split).tokens


def val_tokens(seq_len: int, batch_size: int, seed: int) -> np.ndarray:
  """`(B, seq_len)` token ids: validation windows of the stdlib corpus (pure in `seed`)."""
  from experiments import data

  return data.text_source("stdlib", seq_len).batch(seed, 0, batch_size, "val").tokens[:, :-1]


@functools.lru_cache(maxsize=8)
def _sown_forward(cfg: transformer.Config):
  return jax.jit(lambda p, t: transformer.Transformer(cfg).apply({"params": p}, t,
                                                                 mutable=["intermediates"]))


def intermediates(params, cfg: transformer.Config, tokens_BT) -> dict:
  """The sown intermediates of one forward pass (`blocks/attn/{q, k, scores, weights}`, ...)."""
  _, state = _sown_forward(cfg)(params, tokens_BT)
  return jax.tree.map(lambda x: x[0] if isinstance(x, tuple) else x, state["intermediates"],
                      is_leaf=lambda x: isinstance(x, tuple))
