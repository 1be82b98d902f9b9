"""The shared models' recipes and the claims' shapes: configs and cards, nothing trained.

`RECIPES` names each shared model's config and how it is trained (`Recipe`: steps, batch,
length, peak rate; its `key` is the cache's hash); `SHAPES` are configs a claim trains from
scratch. `config(name)` and `model_card(name)` read both alike; `model_at_length` is the model
a claim reads at a context length. The table of sizes is `experiments.models`' docstring.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math

import jax

import transformer
from experiments import train

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


def _trained_recipe(cfg: transformer.Config, batch_size: int = 16, seq_len: int = 128) -> Recipe:
  """`cfg` trained on `TOKENS_PER_PARAM` tokens per parameter, in steps of `batch_size ×
  seq_len` tokens (16 × 128; the long-context model 2 × 1024, the same 2,048 a step).

  The peak rate falls with width, `3e-3 · 64 / d` (1.2e-2 at d 16, 6e-3 at d 32, 3e-3 at
  d 64), the 1/width rule of maximal-update parametrisations, chosen on tuning seed 99 (never
  a reported seed) from AdamW sweeps at 16 × 128 (not tuned again at T = 1024): held-out bits
  per byte at d 16 were 4.17, 3.78, 3.70, 3.65 at 3e-3, 1e-2, 3e-2, 1e-1 (145 steps: the
  smallest model wants a larger rate than any rule across sizes gives it); at d 32 3.466,
  3.466, 3.482 at 3e-3, 1e-2, 3e-2; at d 64 2.95, 2.48, 2.65 at 1e-3, 3e-3, 1e-2.
  """
  steps = math.ceil(TOKENS_PER_PARAM * _param_count(cfg) / (batch_size * seq_len))
  return Recipe(cfg, steps=steps, batch_size=batch_size, seq_len=seq_len,
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
    # The context axis's model under the trained regime: llama-mini-20's shape, trained at
    # T = 1024 (RoPE, so its parameters are llama-mini-20's).
    "llama-mini-long-20": _trained_recipe(_llama(64, 2, max_len=1024), batch_size=2,
                                          seq_len=1024),
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


# The context axis's model at the regime (`model_at_length` for a claim registered on it).
LONG_TRAINED = "llama-mini-long-20"


STORED = frozenset(TRAINED["gpt"] + TRAINED["llama"] + (LONG_TRAINED,))  # float16, committed


# Shapes that a claim trains from scratch at its registered size and that are no shared model:
# nothing here trains them, but `config` and `model_card` read them like a recipe's shape, so
# the claim's scale axis can start from the model its registered results were measured on.
SHAPES = {
    # `layernorm-condition`'s model (`experiments.lab.stability._tiny` at T = 32): `micro`'s
    # width and depth with 2 heads and 32 learned positions.
    "nano": transformer.Config(vocab_size=256, d_model=32, n_layers=2, n_heads=2, max_len=32,
                               activation="gelu_tanh"),
    # `residual-eigenvalues`' 128-layer models (`residual_eigenvalues.base_config` at T = 32),
    # at four widths: 114k (v2's model), 424k, 1.6M and 3.6M parameters.
    **{f"deep-{d}": transformer.Config(vocab_size=256, d_model=d, n_layers=128, n_heads=2,
                                       max_len=32, activation="gelu_tanh")
       for d in (8, 16, 32, 48)},
}


def model_at_length(claim_id: str, model: str, T: int, *, quick_model: str = "quick") -> str:
  """The base model a claim's run at context length `T` reads (its `at_length`).

  At quick sizes (`model == quick_model`) the quick model is kept: a smoke test of the code
  path. A claim registered under the trained regime (`model` in `TRAINED`) reads the regime's
  long-context model (`LONG_TRAINED`: llama-mini-20's shape trained at T = 1024, 20 tokens per
  parameter); any other the Llama family's long-context model (`LONG["llama"]`, trained at
  T = 1024 on 0.95 tokens per parameter). Every `T` is a length the model was trained on.

  Raises:
    ValueError: `T` is outside `[16, the model's training length]`, naming the claim and the
      fix.

  Example:
    >>> from experiments import models
    >>> models.model_at_length("causal-mask", "small", 1024)
    'llama-small-long'
    >>> models.model_at_length("kv-compression", "mini-20", 256)
    'llama-mini-long-20'
  """
  quick = model == quick_model
  regime = model in TRAINED["gpt"] + TRAINED["llama"]
  name = quick_model if quick else LONG_TRAINED if regime else LONG["llama"]
  trained = RECIPES[name].seq_len
  if not (isinstance(T, int) and not isinstance(T, bool) and 16 <= T <= trained):
    fix = (f"pass --lengths within [16, {trained}] with --quick (quick sizes are a smoke "
           f"test), or run the full sizes on `{LONG['llama']}`" if quick
           else f"use lengths within [16, {trained}]")
    raise ValueError(f"{claim_id}: context length T={T!r} must lie in [16, {trained}]: shorter "
                     f"windows leave too little to measure, and `{name}` was trained at "
                     f"T = {trained} (it is not read on positions it never trained). Fix: {fix}.")
  return name


def recipe_of(name: str) -> Recipe:
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
