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
L 2, H 2, 34,688 params: `layernorm-condition`'s model; `deep-8`, `deep-16`, `deep-32`,
`deep-48`: `residual-eigenvalues`' 128-layer models at four widths, 114k–3.6M params);
`config(name)` and `model_card(name)` read them as they read a recipe's shape.

The trained regime (`TRAINED`, both families at d 16, 32, 64) trains every size on
`TOKENS_PER_PARAM` = 20 tokens per parameter in steps of 16 × 128 tokens; its long-context
model `LONG_TRAINED` (`llama-mini-long-20`) is `llama-mini-20`'s shape trained the same way in
steps of 2 × 1024, the model a regime claim's context axis reads (`model_at_length`). These
(`STORED`) are committed in float16 under `results/models/`.

The package, one concern a module:

| module | concern |
| --- | --- |
| `recipes` | the recipes and shapes (`RECIPES`, `SHAPES`, the families), configs and cards |
| `trained` | training, the cache under `runs/cache/`, the committed store, loading, held-out loss |
| `inputs` | the stdlib windows the claims read, and one forward pass's sown intermediates |

Every public name is importable from `experiments.models` itself.
"""

from experiments.models.inputs import (
  intermediates,
  val_tokens,
  windows,
)
from experiments.models.recipes import (
  CPU_SCALE,
  FAMILIES,
  LONG,
  LONG_TRAINED,
  RECIPES,
  SHAPES,
  STORED,
  TOKENS_PER_PARAM,
  TRAINED,
  Recipe,
  config,
  family,
  model_at_length,
  model_card,
  param_count,
)
from experiments.models.trained import (
  base_model,
  base_model_info,
  base_models,
  cache_dir,
  cached_seeds,
  commit,
  committed,
  heldout_bits,
  heldout_loss,
  summary,
  verify,
)

__all__ = ["CPU_SCALE", "FAMILIES", "LONG", "LONG_TRAINED", "RECIPES", "Recipe", "SHAPES", "STORED",
           "TOKENS_PER_PARAM", "TRAINED", "base_model", "base_model_info", "base_models",
           "cache_dir", "cached_seeds", "commit", "committed", "config", "family", "heldout_bits",
           "heldout_loss", "intermediates", "model_at_length", "model_card", "param_count",
           "summary", "val_tokens", "verify", "windows"]
