"""The shared trained models every claim measures, trained once and cached on disk.

`base_model(name, seed)` returns `(params, cfg)` of a reference model trained on the standard
library's bytes with AdamW (`experiments.train`'s optimizer, warm-up + cosine, peak rate 3e-3,
30 warm-up steps). Two families of four sizes (`FAMILIES`), spanning 45× in parameters, and
one long-context model per family (`LONG`); every one of them sees the 819,200 training tokens
of `small` (400 steps of 2,048 tokens), so tokens per parameter falls as the size grows:

| name | family | d, L, H, K | params | steps × B × T | tokens / param | s / step | 1 seed |
| --- | --- | --- | --- | --- | --- | --- | --- |
| `micro` | gpt | 32, 2, 4, 4 | 41,856 | 400 × 16 × 128 | 19.6 | — | — |
| `mini` | gpt | 64, 2, 4, 4 | 132,864 | 400 × 16 × 128 | 6.17 | 0.12 | 1 min |
| `small` | gpt | 128, 4, 4, 4 | 858,880 | 400 × 16 × 128 | 0.95 | 1.0 | 7 min |
| `base` | gpt | 192, 4, 4, 4 | 1,878,144 | 400 × 16 × 128 | 0.44 | 2.0 | 13 min |
| `llama-micro` | llama | 32, 2, 4, 2 | 41,120 | 400 × 16 × 128 | 19.9 | — | — |
| `llama-mini` | llama | 64, 2, 4, 2 | 131,392 | 400 × 16 × 128 | 6.23 | 0.24 | 2 min |
| `llama-small` | llama | 128, 4, 4, 2 | 853,120 | 400 × 16 × 128 | 0.96 | 1.5 | 10 min |
| `llama-base` | llama | 192, 4, 4, 2 | 1,869,504 | 400 × 16 × 128 | 0.44 | 1.7 | 11 min |
| `small-long` | gpt | 128, 4, 4, 4 | 1,088,256 | 400 × 2 × 1024 | 0.75 | 2.2 | 15 min |
| `llama-small-long` | llama | 128, 4, 4, 2 | 853,120 | 400 × 2 × 1024 | 0.96 | 2.4 | 16 min |
| `quick` | gpt | 64, 2, 4, 4 | 132,864 | 60 × 16 × 64 | 0.46 | | 10 s |

d = `d_model`, L layers, H query heads, K key/value heads. GPT is the `tiny` preset's family
(learned positions, pre-LayerNorm, tanh-GELU, biases, tied output); Llama the `llama-tiny`
preset's (RoPE, pre-RMSNorm, SwiGLU with `d_ff = 3 d`, GQA with K = H / 2, no biases, untied
output), shaped to match GPT's parameter count within 2% at each size. Seconds per step are
the median of 20 jitted steps of one seed after compilation, measured under `nice` at load
average 5–6 on the 2 shared cores (repeats varied by up to 2×: `small` took 0.60 s at load
4.6; its six cached seeds took ≈ 2,600 s in all). Seeds trained together (`base_models`) cost
about as much as one after another, so the models beside `small` at seeds 0–4 take ≈ 6 h;
that is why a claim's full run on CPU scales over `CPU_SCALE` (`micro`, `mini`, `small`: 20×
in parameters) and leaves `base` to `claim ID --sizes ...` on an accelerator.

All keep `max_len = 256` except the long models (`max_len = 2048`, trained at T = 1024), so
every model can be read at twice its training length. Learned position rows beyond the
training length stay at their initial values (`small` at 128–255, `small-long` at
1024–2047); RoPE has no position parameters, so `llama-small-long` at T = 2048 is the same
model on rotations it never saw. `model_card(name)` gives the recipe without training,
`base_model_info(name, seed)` adds the held-out loss and bits per byte, and
`python -m experiments models [--train NAME ...]` lists and pre-trains them. `SHAPES` are
configs only, never trained here: the shapes some claims train from scratch (`nano`, d 32,
L 2, H 2, 34,688 params: `layernorm-condition`'s model; `deep-16`, `deep-32`, `deep-48`:
`residual-eigenvalues`' 128-layer models at three widths, 424k–3.6M params);
`config(name)` and `model_card(name)` read them as they read a recipe's shape.

The first call trains (`train_many`, in memory) and writes `runs/cache/<hash>/{params.npz,
meta.json}`, the hash covering the model config, the training recipe and the seed; the folder
is written under a temporary name and renamed into place, so a crash mid-write leaves no
half-written cache. Later calls load it; `base_models(name, seeds)` trains the missing seeds
of a list together in one program.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil

import jax
import numpy as np

import transformer
from experiments import model_store, train
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


@functools.lru_cache(maxsize=64)
def _param_count(cfg: transformer.Config) -> int:
  abstract = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(abstract))


def _gpt(d: int, n_layers: int, max_len: int = 256) -> transformer.Config:
  """The `tiny` preset's family at width `d`: learned positions, LayerNorm, GELU, 4 heads."""
  return transformer.preset("tiny", d_model=d, n_layers=n_layers, n_heads=4, max_len=max_len)


def _llama(d: int, n_layers: int, max_len: int = 256) -> transformer.Config:
  """The `llama-tiny` preset's family at width `d`: RoPE, RMSNorm, SwiGLU, 4 query heads on 2.

  `d_ff = 3 d` gives SwiGLU's three matrices the parameters that GPT's two `4 d` ones and its
  full-size `w_k`, `w_v` have (`3 d² + 9 d² = 4 d² + 8 d²` per block), and the untied output
  matrix `(d, 256)` matches GPT's `(256, d)` position matrix at `max_len = 256`.
  """
  return transformer.preset("llama-tiny", d_model=d, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                            d_ff=3 * d, max_len=max_len)


def _family_recipe(cfg: transformer.Config) -> Recipe:
  return Recipe(cfg, steps=400, batch_size=16, seq_len=128)


def _long_recipe(cfg: transformer.Config) -> Recipe:
  return Recipe(cfg, steps=400, batch_size=2, seq_len=1024)


# The trained regime: every size sees the same number of tokens per parameter (Hoffmann et
# al. 2022's compute-optimal ratio), so size is no longer confounded with training.
TOKENS_PER_PARAM = 20


def _trained_recipe(cfg: transformer.Config) -> Recipe:
  """`cfg` trained on `TOKENS_PER_PARAM` tokens per parameter, in steps of 16 × 128 tokens.

  The peak rate falls with width, `3e-3 · 64 / d` (1.2e-2 at d 16, 6e-3 at d 32, 3e-3 at
  d 64), the 1/width rule of maximal-update parametrisations, chosen on tuning seed 99 (never
  a reported seed) from AdamW sweeps at this recipe: held-out bits per byte at d 16 were 4.17,
  3.78, 3.70, 3.65 at 3e-3, 1e-2, 3e-2, 1e-1 (145 steps: the smallest model wants a larger
  rate than any rule across sizes gives it); at d 32 3.466, 3.466, 3.482 at 3e-3, 1e-2, 3e-2;
  at d 64 2.95, 2.48, 2.65 at 1e-3, 3e-3, 1e-2.
  """
  steps = math.ceil(TOKENS_PER_PARAM * _param_count(cfg) / (16 * 128))
  return Recipe(cfg, steps=steps, batch_size=16, seq_len=128,
                learning_rate=3e-3 * 64 / cfg.d_model)


RECIPES = {
    # `small` and `quick` are spelled out: their fields are the cache key of committed results.
    "small": Recipe(transformer.preset("tiny", d_model=128, n_layers=4, n_heads=4, max_len=256),
                    steps=400, batch_size=16, seq_len=128),
    "quick": Recipe(transformer.preset("tiny"), steps=60, batch_size=16, seq_len=64,
                    warmup_steps=10),
    "micro": _family_recipe(_gpt(32, 2)),
    "mini": _family_recipe(_gpt(64, 2)),
    "base": _family_recipe(_gpt(192, 4)),
    "llama-micro": _family_recipe(_llama(32, 2)),
    "llama-mini": _family_recipe(_llama(64, 2)),
    "llama-small": _family_recipe(_llama(128, 4)),
    "llama-base": _family_recipe(_llama(192, 4)),
    "small-long": _long_recipe(_gpt(128, 4, max_len=2048)),
    "llama-small-long": _long_recipe(_llama(128, 4, max_len=2048)),
    # The trained regime (`TOKENS_PER_PARAM`): the suffix is the ratio each size is trained at.
    "pico-20": _trained_recipe(_gpt(16, 2)),
    "micro-20": _trained_recipe(_gpt(32, 2)),
    "mini-20": _trained_recipe(_gpt(64, 2)),
    "llama-pico-20": _trained_recipe(_llama(16, 2)),
    "llama-micro-20": _trained_recipe(_llama(32, 2)),
    "llama-mini-20": _trained_recipe(_llama(64, 2)),
}
FAMILIES = {"gpt": ("micro", "mini", "small", "base"),
            "llama": ("llama-micro", "llama-mini", "llama-small", "llama-base")}
# The three sizes a claim's full run measures on 2 CPU cores (20× in parameters); `base` is
# there for `claim ID --sizes ...` on an accelerator (≈ 16× small's cost per step on CPU).
CPU_SCALE = {"gpt": ("micro", "mini", "small"),
             "llama": ("llama-micro", "llama-mini", "llama-small")}
LONG = {"gpt": "small-long", "llama": "llama-small-long"}
# The sizes trained at `TOKENS_PER_PARAM` (16× in parameters per family), the scale axis of a
# claim registered under the trained regime; `small` (0.95 tokens per parameter) is
# shown beside them as under-trained and left out of every fit.
TRAINED = {"gpt": ("pico-20", "micro-20", "mini-20"),
           "llama": ("llama-pico-20", "llama-micro-20", "llama-mini-20")}
STORED = frozenset(TRAINED["gpt"] + TRAINED["llama"])  # committed in float16 (`model_store`)
# Shapes that a claim trains from scratch at its registered size and that are no shared model:
# nothing here trains them, but `config` and `model_card` read them like a recipe's shape, so
# the claim's scale axis can start from the model its registered results were measured on.
SHAPES = {
    # `layernorm-condition`'s model (`experiments.lab.stability._tiny` at T = 32): `micro`'s
    # width and depth with 2 heads and 32 learned positions.
    "nano": transformer.Config(vocab_size=256, d_model=32, n_layers=2, n_heads=2, max_len=32,
                               activation="gelu_tanh"),
    # `residual-eigenvalues`' 128-layer models (`residual_eigenvalues.base_config` at T = 32),
    # at three widths: 424k, 1.6M and 3.6M parameters (8.6×).
    **{f"deep-{d}": transformer.Config(vocab_size=256, d_model=d, n_layers=128, n_heads=2,
                                       max_len=32, activation="gelu_tanh") for d in (16, 32, 48)},
}


def model_at_length(claim_id: str, model: str, T: int, *, quick_model: str = "quick") -> str:
  """The base model a claim's run at context length `T` reads (its `at_length`).

  At quick sizes (`model == quick_model`) the quick model is kept: a smoke test of the code
  path. Otherwise the Llama family's long-context model (`LONG["llama"]`, RoPE, trained at
  T = 1024), so every `T` is a length the model was trained on.

  Raises:
    ValueError: `T` is outside `[16, the model's training length]`, naming the claim and the
      fix.

  Example:
    >>> from experiments import models
    >>> models.model_at_length("causal-mask", "small", 1024)
    'llama-small-long'
  """
  quick = model == quick_model
  name = quick_model if quick else LONG["llama"]
  trained = RECIPES[name].seq_len
  if not (isinstance(T, int) and not isinstance(T, bool) and 16 <= T <= trained):
    fix = (f"pass --lengths within [16, {trained}] with --quick (quick sizes are a smoke "
           f"test), or run the full sizes on `{LONG['llama']}`" if quick
           else f"use lengths within [16, {trained}]")
    raise ValueError(f"{claim_id}: context length T={T!r} must lie in [16, {trained}]: shorter "
                     f"windows leave too little to measure, and `{name}` was trained at "
                     f"T = {trained} (it is not read on positions it never trained). Fix: {fix}.")
  return name


def _recipe(name: str) -> Recipe:
  if name not in RECIPES:
    raise ValueError(f"base_model: name={name!r} is unknown. Fix: use one of {sorted(RECIPES)}.")
  return RECIPES[name]


def config(name: str) -> transformer.Config:
  """The model config of `name`: a shared model's (`RECIPES`) or a claim's own shape (`SHAPES`).

  Example:
    >>> from experiments import models
    >>> models.config("nano").n_heads, models.config("mini") == models.RECIPES["mini"].cfg
    (2, True)
  """
  if name in SHAPES:
    return SHAPES[name]
  if name not in RECIPES:
    raise ValueError(f"config: name={name!r} is unknown. Fix: use a shared model "
                     f"{sorted(RECIPES)} or a claim's shape {sorted(SHAPES)}.")
  return RECIPES[name].cfg


def family(cfg: transformer.Config) -> str:
  """`llama` for a RoPE model, else `gpt` (learned positions)."""
  return "llama" if cfg.positions == "rope" else "gpt"


def param_count(name: str) -> int:
  """Parameters of the shared model (or shape) `name`, from its initialised shapes (no compute).

  Example:
    >>> from experiments.models import param_count
    >>> param_count("small")
    858880
  """
  return _param_count(config(name))


def model_card(name: str) -> dict:
  """The recipe of the shared model `name`: shape, parameters and tokens seen; no training.

  `tokens_seen = steps × batch_size × seq_len` and `tokens_per_param = tokens_seen / params`.
  A claim's shape (`SHAPES`) has no recipe: its training fields are None.

  Args:
    name: a key of `RECIPES` or `SHAPES`.

  Returns:
    `{"name", "family", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_ff",
    "positions", "norm", "activation", "max_len", "params", "steps", "batch_size", "seq_len",
    "tokens_seen", "tokens_per_param"}`.

  Example:
    >>> from experiments.models import model_card
    >>> card = model_card("llama-small-long")
    >>> card["family"], card["seq_len"], card["max_len"], card["n_kv_heads"]
    ('llama', 1024, 2048, 2)
    >>> model_card("nano")["params"], model_card("nano")["steps"]
    (34688, None)
  """
  cfg = config(name)
  params = param_count(name)
  shape = {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_head",
                                        "d_ff", "positions", "norm", "activation", "max_len")}
  card = {"name": name, "family": family(cfg), **shape, "params": params}
  if name in SHAPES:
    return {**card, **dict.fromkeys(("steps", "batch_size", "seq_len", "tokens_seen",
                                     "tokens_per_param"))}
  recipe = RECIPES[name]
  tokens = recipe.steps * recipe.batch_size * recipe.seq_len
  return {**card, "steps": recipe.steps, "batch_size": recipe.batch_size,
          "seq_len": recipe.seq_len, "tokens_seen": tokens, "tokens_per_param": tokens / params}


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
  return os.path.join(root, "cache", _recipe(name).key(seed))


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
  """
  recipe = _recipe(name)
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
    if meta.get("name") == name and entry == _recipe(name).key(meta["seed"]):
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
  if key != _recipe(name).key(seed):
    raise ValueError(f"{path} was trained under recipe key {key}; `{name}`'s recipe is now "
                     f"{_recipe(name).key(seed)}. Fix: retrain it (`python -m experiments models "
                     f"--train {name} --seeds {seed}`) and store it with `--commit {name}`.")
  return path


def heldout_loss(params, cfg: transformer.Config, *, batches: int = 8, batch_size: int = 16,
                 seq_len: int = 128) -> dict:
  """Held-out loss of `params` on fixed validation windows: `{"loss", "bits_per_byte", "tokens"}`.

  The same `batches × batch_size` windows of the stdlib validation split (seed 0, steps
  `0 … batches − 1`) for every model and seed, so the numbers compare across sizes.
  """
  from experiments.train import step

  model = transformer.Transformer(cfg)
  fn = jax.jit(lambda p, t: step.loss_fn(p, model, t, jax.numpy.ones(t[:, 1:].shape)))
  losses = [float(fn(params, windows(0, seq_len, batch_size, "val", step=k)))
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
