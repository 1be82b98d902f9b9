"""The shared models trained: once, cached on disk, or read from the committed store.

The first call trains (`train_many`, in memory) and writes `runs/cache/<hash>/{params.npz,
meta.json}`, the hash covering the model config, the training recipe and the seed; the folder
is written under a temporary name and renamed into place, so a crash mid-write leaves no
half-written cache. The models of the trained regime (`STORED`) are committed in float16 under
`results/models/` (`experiments.model_store`) and read from there first. `base_models(name,
seeds)` trains the missing seeds of a list together in one program.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import sys

import jax
import numpy as np

import transformer
from experiments import console, model_store
from experiments.models.inputs import windows
from experiments.models.recipes import FAMILIES, LONG, RECIPES, STORED, model_card, recipe_of
from experiments.train import sweep


def _flatten(params) -> dict[str, np.ndarray]:
  return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(params)}


def _unflatten(cfg: transformer.Config, arrays) -> dict:
  abstract = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  names = list(_flatten(jax.tree.map(lambda a: np.zeros((), a.dtype), abstract)))
  leaves = [np.asarray(arrays[n], np.float32) if np.asarray(arrays[n]).dtype == np.float16
            else np.asarray(arrays[n]) for n in names]
  return jax.tree.unflatten(jax.tree.structure(abstract), leaves)


def cache_dir(name: str, seed: int, root: str = "runs") -> str:
  """`root/cache/<hash>` of the shared model `name` at `seed`."""
  return os.path.join(root, "cache", recipe_of(name).key(seed))


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


def _train_and_write(name: str, seeds: tuple[int, ...], root: str, progress=None) -> None:
  """Trains the missing `seeds` of `name` together (one vmapped program) and caches each.

  With `progress` (a `console.progress` bar) the run is evaluated every tenth of its steps to
  move the bar; the training itself is the same, and `train_loss` stays the mean over all steps.
  Without, it makes its own on stderr, after a line naming the model and why it trains: a
  missing base model takes minutes (about 7 for five `mini-20` seeds on 2 cores), and a
  silent wait reads as a hang.
  """
  recipe = recipe_of(name)
  if progress is None:
    which = f"{name} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    print(f"[models] {which}: not committed nor cached in {os.path.join(root, 'cache')}; "
          f"training it now ({recipe.steps} steps of {recipe.batch_size} x {recipe.seq_len} "
          "tokens)", file=sys.stderr, flush=True)
    with console.progress(recipe.steps, desc=f"[models] training {which}", unit="step") as bar:
      return _train_and_write(name, seeds, root, bar)
  tc = recipe.train_config(seeds[0])
  every = max(1, recipe.steps // 10) if progress is not None else recipe.steps
  done = [0]

  def tick(step, params, intermediates):
    del params, intermediates
    progress.update(step - done[0])
    done[0] = step

  result = sweep.train_many(recipe.cfg, sweep.train_like(tc), seeds=seeds,
                            learning_rates=(recipe.learning_rate,), steps=recipe.steps,
                            data=recipe.data, batch_size=recipe.batch_size,
                            seq_len=recipe.seq_len, eval_every=every, eval_batches=4,
                            callback=tick if progress is not None else None)
  chunk_steps = np.diff(result.steps, prepend=0)
  train_loss = (result.loss[0] * chunk_steps).sum(-1) / recipe.steps
  for j, seed in enumerate(seeds):
    params = jax.tree.map(lambda x, j=j: np.asarray(x[0, j]), result.params)
    meta = {"name": name, "seed": seed, "cfg": recipe.cfg.to_dict(),
            "recipe": {k: v for k, v in dataclasses.asdict(recipe).items() if k != "cfg"},
            **model_card(name), "train_loss": float(train_loss[j]),
            "val_loss": float(result.val_loss[0, j, -1]), "diverged": bool(result.diverged[0, j])}
    path = cache_dir(name, seed, root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if name in STORED:
      arrays = model_store.rounded(_flatten(params))
      heldout = heldout_loss(_unflatten(recipe.cfg, arrays), recipe.cfg)
      model_store.save(path, arrays, {**meta, "key": recipe.key(seed), "heldout": heldout})
    else:
      _write(path, params, meta)


def _cached(name: str, seed: int, root: str) -> bool:
  return os.path.exists(os.path.join(cache_dir(name, seed, root), "meta.json"))


def _cached_metas(name: str, root: str) -> dict[int, dict]:
  """`{seed: meta.json}` of the cache entries of `name` under its current recipe."""
  folder = os.path.join(root, "cache")
  out = {}
  for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
    path = os.path.join(folder, entry, "meta.json")
    if ".tmp-" in entry or not os.path.exists(path):
      continue
    with open(path) as f:
      meta = json.load(f)
    if meta.get("name") == name and entry == recipe_of(name).key(meta["seed"]):
      out[int(meta["seed"])] = meta
  return dict(sorted(out.items()))


def cached_seeds(name: str, root: str = "runs") -> list[int]:
  """The seeds of `name` whose model is in `root/cache` under the current recipe, sorted."""
  return list(_cached_metas(name, root))


def summary(root: str = "runs") -> list[dict]:
  """One row per recipe (families, then long-context, then the rest): its `model_card` with
  `cached_seeds` and the mean held-out `bits_per_byte` of those seeds (None if none).

  Reads only `meta.json` files: nothing is trained or loaded.
  """
  order = [*FAMILIES["gpt"], *FAMILIES["llama"], *LONG.values()]
  rows = []
  for name in [*order, *(n for n in RECIPES if n not in order)]:
    metas = _cached_metas(name, root)
    for seed in range(64) if name in STORED else ():
      if committed(name, seed):
        metas[seed] = model_store.read_meta(model_store.folder(name, seed))
    metas = dict(sorted(metas.items()))
    bpb = [m["heldout"]["bits_per_byte"] if "heldout" in m else m["val_loss"] / math.log(2)
           for m in metas.values()]
    rows.append({**model_card(name), "cached_seeds": list(metas),
                 "bits_per_byte": float(np.mean(bpb)) if bpb else None})
  return rows


def committed(name: str, seed: int) -> str | None:
  """The folder of the committed model `name` at `seed` (`model_store`), or None.

  Raises:
    ValueError: the committed model was trained under another recipe than the current one.
  """
  path = model_store.folder(name, seed)
  if name not in STORED or not os.path.exists(os.path.join(path, "meta.json")):
    return None
  key = model_store.read_meta(path).get("key")
  if key != recipe_of(name).key(seed):
    raise ValueError(f"{path} was trained under recipe key {key}; `{name}`'s recipe is now "
                     f"{recipe_of(name).key(seed)}. Fix: retrain it (`python -m experiments models "
                     f"--train {name} --seeds {seed}`) and store it with `--commit {name}`.")
  return path


def heldout_loss(params, cfg: transformer.Config, *, batches: int = 8, batch_size: int = 16,
                 seq_len: int = 128) -> dict:
  """Held-out loss of `params` on fixed validation windows: `{"loss", "bits_per_byte", "tokens"}`.

  The same `batches × batch_size` windows of the stdlib held-out files (`heldout`: the `val`
  and `test` files together, the validation split the committed models were measured on; seed
  0, steps `0 … batches − 1`) for every model and seed, so the numbers compare across sizes.
  """
  from experiments.train import step

  model = transformer.Transformer(cfg)
  fn = jax.jit(lambda p, t: step.loss_fn(p, model, t, jax.numpy.ones(t[:, 1:].shape)))
  losses = [float(fn(params, windows(0, seq_len, batch_size, "heldout", step=k)))
            for k in range(batches)]
  loss = float(np.mean(losses))
  return {"loss": loss, "bits_per_byte": loss / math.log(2),
          "tokens": batches * batch_size * seq_len}


def heldout_bits(name: str, seeds) -> float | None:
  """Mean held-out bits per byte of the committed models `name` at `seeds`, or None when any
  of them is not committed (nothing is trained or loaded)."""
  if name not in STORED:
    return None
  metas = [model_store.read_meta(model_store.folder(name, s)) if committed(name, s) else None
           for s in seeds]
  if not metas or any(m is None for m in metas):
    return None
  return float(np.mean([m["heldout"]["bits_per_byte"] for m in metas]))


def commit(name: str, seeds, root: str = "runs") -> list[str]:
  """Copies the cached models `name` at `seeds` into the committed store; returns the folders."""
  if name not in STORED:
    raise ValueError(f"commit: {name!r} is not in the trained regime {sorted(STORED)}; only "
                     "those are committed.")
  out = []
  for seed in seeds:
    arrays, meta = model_store.load(cache_dir(name, seed, root))
    out.append(model_store.folder(name, seed))
    model_store.save(out[-1], arrays, {k: v for k, v in meta.items()
                                       if k not in ("sha256", "dtype")})
  return out


def verify() -> list[dict]:
  """`model_store.verify` of the committed models against the current recipes."""
  return model_store.verify(lambda n, s: RECIPES[n].key(s) if n in RECIPES else None)


@functools.lru_cache(maxsize=16)
def _load(name: str, seed: int, root: str):
  stored_at = committed(name, seed)
  if stored_at is not None:
    arrays, meta = model_store.load(stored_at)
    return _unflatten(RECIPES[name].cfg, arrays), {**meta, "path": stored_at}
  path = cache_dir(name, seed, root)
  if not _cached(name, seed, root):
    _train_and_write(name, (seed,), root)
  with open(os.path.join(path, "meta.json")) as f:
    meta = json.load(f)
  with np.load(os.path.join(path, "params.npz")) as arrays:
    params = _unflatten(RECIPES[name].cfg, arrays)
  return params, {**meta, "path": path}


def base_model(name: str, seed: int, *, root: str = "runs") -> tuple[dict, transformer.Config]:
  """`(params, cfg)` of the shared model `name` trained from `seed`.

  Args:
    name: a key of `RECIPES` (see the module docstring).
    seed: init and data-stream seed of the training run.
    root: the `runs` folder holding `cache/`.

  Returns:
    `(params, cfg)`; `base_model_info` gives its recipe, losses and cache folder.

  Example:
    >>> import tempfile
    >>> from experiments.models import base_model
    >>> params, cfg = base_model("quick", 0, root=tempfile.mkdtemp())  # trains: ~10 s
    >>> cfg.d_model
    64
  """
  params, _ = _load(name, seed, root)
  return params, RECIPES[name].cfg


def base_models(name: str, seeds, *, root: str = "runs",
                progress=None) -> list[tuple[dict, transformer.Config]]:
  """`[base_model(name, s) for s in seeds]`, training the missing seeds together first.

  Seeds trained together run as one vmapped program (`train_many`); their losses agree with
  separately trained ones to float32 rounding, not bit for bit. `progress`: a
  `console.progress(RECIPES[name].steps)` bar that the training moves.
  """
  missing = tuple(s for s in dict.fromkeys(int(s) for s in seeds)
                  if not _cached(name, s, root) and committed(name, s) is None)
  if missing:
    _train_and_write(name, missing, root, progress)
  return [base_model(name, int(s), root=root) for s in seeds]


def base_model_info(name: str, seed: int, *, root: str = "runs") -> dict:
  """The recipe and results of the shared model `name` at `seed` (trains it if not cached).

  Args:
    name: a key of `RECIPES`.
    seed: the training seed.
    root: the `runs` folder holding `cache/`.

  Returns:
    `model_card(name)` (shape, family, `params`, `tokens_seen`, `tokens_per_param`, ...) with
    `seed`, `cfg`, `recipe`, `train_loss` (mean over the run), `val_loss` (final, nats per
    token on 4 held-out batches), `bits_per_byte` (`val_loss / ln 2`: the models read bytes),
    `diverged` and the cache `path`. Cache entries written before the card existed get it
    from the recipe, which their folder's hash fixes.

  Example:
    >>> import tempfile
    >>> from experiments.models import base_model_info
    >>> info = base_model_info("quick", 0, root=tempfile.mkdtemp())  # trains: ~10 s
    >>> info["params"], info["tokens_seen"], info["bits_per_byte"] > 0
    (132864, 61440, True)
  """
  meta = dict(_load(name, seed, root)[1])
  bpb = meta["val_loss"] / math.log(2) if RECIPES[name].cfg.vocab_size == 256 else None
  if "heldout" in meta:  # the trained regime: the stored (float16) model's own held-out loss
    bpb = meta["heldout"]["bits_per_byte"]
  return {**model_card(name), **meta, "bits_per_byte": bpb}
