"""Claim `residual-eigenvalues`: residual blocks keep eigenvalues near 1 at 100+ layers.

    python -m experiments claim residual-eigenvalues [--quick]

**The preface's question** is the sentence itself, read on trained 128-layer models: after
training, does every layer of a pre-norm residual stack keep its Jacobian's eigenvalues near 1
(max |λ − 1| < 0.5) while the same stack without residuals does not, and does the residual
model train below the unigram entropy of the bytes while the residual-free one does not? The
same reading at init, at every depth, and the end-to-end σ_max's growth with depth are
extensions. Refuted by: eigenvalues far from 1 with residuals or near 1 without, a deep
residual model that cannot train, or a residual-free one that can.

* **Eigenvalues.** Layer `l`'s Jacobian `J_l = ∂x_{l+1}/∂x_l` at its own input is causal, so
  its eigenvalues are those of its `T` diagonal `(D, D)` blocks
  (`analysis.causal_jacobian_eigenvalues` via `stability.trained_point`): on the trained
  params at the first 32 held-out stdlib bytes, and at init (`stability.depth_sweep`, 8 random
  tokens, depths 1, 16, 128; arms `pre`, `pre-no-residual`, `post`, and for the σ_max only
  `pre-unscaled`, no `1/√(2L)` init of `w_o`, `w_2`). Also the end-to-end product's σ_max.
* **Training.** 128 layers at width D = 8 (`deep-8`, 113,936 params), arms `pre` and
  `pre-no-residual`, AdamW (weight decay 0.1; 10% warm-up, linear decay to 10%), batches
  32 × 32 bytes; each arm's peak rate tuned (`tuning.tune_on_seeds`) on tuning seed 100 over
  {1e-3, 3e-3, 1e-2, 3e-2, 9e-2, 0.27}, extended one step past a winning edge, once; control:
  no tuned rate at an edge. Reported seeds 0–4; the gap is held-out loss minus the unigram entropy.

**Budget.** 20 tokens per parameter (2,226 steps), as every registered size. The post-norm
arm is not trained, by cost. The scale axis (`deep-16` at the same ratio costs ~4× as much)
is not measured, by cost: `--sizes deep-8,deep-16` adds it.
`--quick`: depths 1 and 8, an 8-layer model trained 30 steps at one rate, nothing tuned.

v2 (before its run): the trained regime (issue 38); v1 read the eigenvalues at init only on
`deep-16` at 0.15 tokens per parameter, two rates, no edge rule. v3: 3 tokens per parameter
(v2: 1.0, by a cost estimate its 13-min run disproved). v4 (2026-12-05, before the run): 20
tokens per parameter (v3's run took 13 min, so 20 fits ~1.5 h); nothing else changed. v5
(2026-12-06, before the run): the grid reaches two steps higher, to 0.27 (v4's pre arm chose
0.09 at the top of its grid after the one extension, failing the edge control; its losses were
still falling, 2.249, 2.238, 2.221 at 1e-2, 3e-2, 9e-2 on the tuning seed); nothing else
changed.
Results: `results/residual-eigenvalues/`.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

import transformer
from experiments import data, models
from experiments.lab import optimizers as O
from experiments.lab import stability, tuning
from experiments.train.sweep import train_many
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes
from experiments.verdict.render.tuning import edges

SWEEP_ARMS = {**stability.ARMS,
              "pre-unscaled": dict(norm_position="pre", residual=True, init_residual_scale=False)}
TRAIN_ARMS = ("pre", "pre-no-residual")
TUNING_SEEDS = (100,)
GRID = (1e-3, 3e-3, 1e-2, 3e-2, 9e-2, 2.7e-1)


@dataclasses.dataclass(frozen=True)
class ResidualEigenvaluesSizes(TrainedSizes):
  """What a run of `residual-eigenvalues` reads about its size.

  Attributes:
    model: the shape (`experiments.models.SHAPES`, `deep-<D>`): its width `D` is the width of
      every model here (the Jacobians are `(D, D)` blocks), its 128 layers the trained depth.
    steps: AdamW steps per training run; None: `tokens_per_param` tokens per parameter of
      `model` (`budget_steps`), on every size alike.
    tokens_per_param: the ratio `steps=None` trains at.
    jacobian_seq_len: the random tokens `T` of the init sweep's Jacobians.
    depths: the depths `L` of the init sweep (the first and last give the ratios).
    train_layers: the depth of the trained models.
    seq_len: training and validation window length (also the trained Jacobians' `T`).
    batch_size: training windows per step.
    grid: the peak-rate grid (tuned on `TUNING_SEEDS` when it has two rates or more).
    extend: rates tuning may add beyond a winning edge of `grid`.
    eval_batches: validation batches of the final loss.
  """

  model: str
  steps: int | None
  tokens_per_param: float
  jacobian_seq_len: int
  depths: tuple[int, ...]
  train_layers: int
  seq_len: int
  batch_size: int
  grid: tuple[float, ...]
  extend: int
  eval_batches: int

  def budget_steps(self) -> int:
    """`steps`, or `⌈tokens_per_param · params(model) / (batch_size · seq_len)⌉` when None.

    Example:
      >>> from experiments.claims.residual_eigenvalues import FULL
      >>> FULL.budget_steps()  # 113,936 params, 1,024 tokens a step
      2226
    """
    if self.steps is not None:
      return self.steps
    return math.ceil(self.tokens_per_param * models.param_count(self.model)
                     / (self.batch_size * self.seq_len))


QUICK = ResidualEigenvaluesSizes(model="deep-8", steps=30, tokens_per_param=1.0,
                                 jacobian_seq_len=8, depths=(1, 8), train_layers=8, seq_len=32,
                                 batch_size=8, grid=(1e-2,), extend=0, eval_batches=4)
FULL = ResidualEigenvaluesSizes(model="deep-8", steps=None, tokens_per_param=20.0,
                                jacobian_seq_len=8, depths=(1, 16, 128), train_layers=128,
                                seq_len=32, batch_size=32, grid=GRID, extend=1, eval_batches=8)


def base_config(width: int, seq_len: int) -> transformer.Config:
  """The tiny byte-level model of the claim (`n_layers` is set per depth)."""
  return transformer.Config(vocab_size=data.VOCAB_SIZE, d_model=width, n_layers=1, n_heads=2,
                            max_len=seq_len, activation="gelu_tanh")


def sweep_metrics(rows: dict[int, dict]) -> dict[str, float]:
  """One arm's depth sweep `{L: depth_point(...)}` -> flat metrics over depths.

  `max_dist_all` / `min_dist_all`: the largest / smallest over depths of `max_l |λ(J_l) − 1|`;
  `dist_shrink`: that value at the deepest over at the shallowest depth; `e2e_growth`: the same
  ratio for the end-to-end `σ_max`; `dist_L{L}`, `e2e_sigma_L{L}` per depth.

  Example:
    >>> from experiments.claims.residual_eigenvalues import sweep_metrics
    >>> rows = {1: {"max_dist_from_one": 0.2, "e2e_sigma_max": 1.0, "stream_rms_in": 1.0,
    ...             "stream_rms_out": 2.0},
    ...         4: {"max_dist_from_one": 0.1, "e2e_sigma_max": 3.0, "stream_rms_in": 1.0,
    ...             "stream_rms_out": 1.0}}
    >>> m = sweep_metrics(rows)
    >>> m["max_dist_all"], m["dist_shrink"], m["e2e_growth"]
    (0.2, 0.5, 3.0)
  """
  depths = sorted(rows)
  dist = np.array([rows[L]["max_dist_from_one"] for L in depths], np.float64)
  e2e = np.array([rows[L]["e2e_sigma_max"] for L in depths], np.float64)
  out = {"max_dist_all": float(dist.max()), "min_dist_all": float(dist.min()),
         "dist_shrink": float(dist[-1] / dist[0]), "e2e_growth": float(e2e[-1] / e2e[0]),
         "e2e_sigma_max_all": float(e2e.max())}
  for L, d, s in zip(depths, dist, e2e, strict=True):
    out[f"dist_L{L}"] = float(d)
    out[f"e2e_sigma_L{L}"] = float(s)
    out[f"rms_ratio_L{L}"] = rows[L]["stream_rms_out"] / rows[L]["stream_rms_in"]
  return out


def train_arm(cfg: transformer.Config, z: ResidualEigenvaluesSizes, steps: int, seeds,
              tokens_T, log) -> tuple[dict, dict[int, dict[str, float]]]:
  """Tunes `cfg`'s rate (or not), trains it on `seeds`; per seed its loss and trained spectra."""
  make_tx = O.adamw_arm(weight_decay=0.1)
  kw = dict(data="stdlib", batch_size=z.batch_size, seq_len=z.seq_len,
            eval_batches=z.eval_batches)
  if len(z.grid) > 1:
    log(f"  residual-eigenvalues: tuning on {z.grid} (seeds {TUNING_SEEDS}, {steps} steps)")
    tuned = tuning.tune_on_seeds(cfg, make_tx, z.grid, seeds=TUNING_SEEDS, steps=steps,
                                 extend=z.extend, **kw)
  else:  # one rate (the quick run): nothing to tune
    tuned = tuning.untuned(z.grid[0])
  lr = tuned["learning_rate"]
  log(f"  residual-eigenvalues: rate {lr:g}; seeds {tuple(seeds)}")
  r = train_many(cfg, tuning.on_budget(make_tx, steps), seeds=tuple(seeds),
                 learning_rates=(lr,), steps=steps, eval_every=steps, **kw)
  final = r.val_loss[0, :, -1]
  ended = tuning.ended_diverged(final, cfg.vocab_size)
  out = {}
  for i, seed in enumerate(seeds):
    params = jax.tree.map(lambda x, i=i: x[0, i], r.params)
    spectra = stability.trained_point(cfg, params, tokens_T)
    out[seed] = {"val_loss": float(final[i]) if np.isfinite(final[i]) else math.log(256),
                 "ended_diverged": float(ended[i]), "learning_rate": lr,
                 "rates_at_grid_edge": float(tuned["at_edge"]),
                 "trained_max_dist": spectra["max_dist_from_one"],
                 "trained_min_dist": spectra["min_dist_from_one"],
                 "trained_median_dist": float(np.median(spectra["dist_from_one"])),
                 "trained_e2e_sigma": spectra["e2e_sigma_max"]}
  return tuned, out


def run(spec: Spec) -> dict:
  """The init sweep and the deep training for every seed; see the module docstring."""
  z = dataclasses.replace(spec.sizes, steps=spec.sizes.budget_steps())
  width, steps = models.config(z.model).d_model, z.steps
  base = base_config(width, max(z.jacobian_seq_len, z.seq_len))
  runs: dict = {arm: {} for arm in SWEEP_ARMS}
  sweeps: dict = {}
  for seed in spec.seeds:
    spec.log(f"  residual-eigenvalues: seed {seed}: init sweep over depths {z.depths}")
    sweeps[seed] = stability.depth_sweep(base, seed, depths=z.depths, arms=SWEEP_ARMS,
                                         seq_len=z.jacobian_seq_len)
    for arm, rows in sweeps[seed].items():
      runs[arm][seed] = sweep_metrics(rows)
  corpus = data.load_corpus("stdlib")
  unigram = min(data.unigram_entropy(corpus.val), data.unigram_entropy(corpus.train))
  tokens_T = np.asarray(corpus.val[:z.seq_len], np.int32)
  tuned = {}
  for arm in TRAIN_ARMS:
    cfg = base.replace(n_layers=z.train_layers, **SWEEP_ARMS[arm])
    spec.log(f"  residual-eigenvalues: training {z.train_layers} layers, arm {arm}")
    tuned[arm], trained = train_arm(cfg, z, steps, spec.seeds, tokens_T, spec.log)
    for seed, m in trained.items():
      runs[arm][seed].update(m, gap_to_unigram=m["val_loss"] - unigram)
  for arm in TRAIN_ARMS:
    for seed in spec.seeds:
      runs[arm][seed]["rates_at_grid_edge"] = edges(tuned)
  mean = lambda arm, m: float(np.mean([runs[arm][s][m] for s in spec.seeds]))
  params = models.param_count(z.model) if z.train_layers == 128 else None
  notes = [
      f"Trained: {z.train_layers} layers, D = {width}, {steps} steps of {z.batch_size} × "
      f"{z.seq_len} bytes" + (f" ({steps * z.batch_size * z.seq_len / params:.3g} tokens per "
                               f"parameter)" if params else "") + ".",
      {"tuned": tuned, "read": f"lowest final val loss after {steps} steps on seeds "
                               f"{list(TUNING_SEEDS)}"},
      f"Unigram entropy of the stdlib bytes: {unigram:.3f} nats; held-out loss, mean over "
      "seeds: " + ", ".join(f"{a} {mean(a, 'val_loss'):.3f}" for a in TRAIN_ARMS) + ".",
      "Trained models, max_l / median_l / min_l of max |λ(J_l) − 1|, mean over seeds: "
      + "; ".join(f"{a}: {mean(a, 'trained_max_dist'):.3g} / {mean(a, 'trained_median_dist'):.3g}"
                  f" / {mean(a, 'trained_min_dist'):.3g}, end-to-end σ_max "
                  f"{mean(a, 'trained_e2e_sigma'):.3g}" for a in TRAIN_ARMS) + ".",
      "At init, max_l |λ − 1| per depth, mean over seeds: " + "; ".join(
          f"{arm}: " + ", ".join(f"L{L} {mean(arm, f'dist_L{L}'):.3g}" for L in z.depths)
          for arm in SWEEP_ARMS) + ".",
      "At init, end-to-end σ_max per depth, mean over seeds: " + "; ".join(
          f"{arm}: " + ", ".join(f"L{L} {mean(arm, f'e2e_sigma_L{L}'):.3g}" for L in z.depths)
          for arm in SWEEP_ARMS) + ".",
  ]
  return {"setup": {"model_config": base.replace(n_layers=z.train_layers).to_dict(),
                    "unigram_entropy": unigram, "tuned": tuned, "steps": steps,
                    "tuning_seeds": list(TUNING_SEEDS)},
          "runs": runs, "figures": [_figure(sweeps[spec.seeds[0]])], "notes": notes,
          "effects": [("trained: held-out loss, no residual − pre", "pre-no-residual", "pre",
                       "val_loss"),
                      ("trained: max_l |λ − 1|, no residual − pre", "pre-no-residual", "pre",
                       "trained_max_dist"),
                      ("init: end-to-end σ_max growth, pre-unscaled", "pre-unscaled", None,
                       "e2e_growth")]}


def _figure(sweep: dict) -> dict:
  """`depth.png`, declared as data: each block's eigenvalues and the end-to-end Jacobian
  against depth, at initialisation (one seed)."""
  lines = lambda key: [{"x": sorted(rows), "y": [float(rows[L][key]) for L in sorted(rows)],
                        "style": "o-", "label": arm} for arm, rows in sweep.items()]
  log = {"xscale": "log", "yscale": "log", "xlabel": "layers L"}
  return {"name": "depth.png", "size": [10, 3.6], "panels": [
      {**log, "ylabel": "max_l |λ(J_l) − 1|", "title": "eigenvalues of each block's Jacobian",
       "lines": lines("max_dist_from_one"), "legend": 7},
      {**log, "ylabel": "σ_max(J_{L−1}⋯J_0)", "title": "end-to-end Jacobian",
       "lines": lines("e2e_sigma_max")}]}


CLAIM = Claim(
    id="residual-eigenvalues",
    topic="eigenvalues",
    kind="existing",
    preface="Residual connections keep eigenvalues near 1, enabling 100+ layer networks",
    hypothesis=(
        "After training (128 layers, D = 8, 20 tokens per parameter, each arm at its rate tuned "
        "on a tuning seed under the edge rule), every layer of the pre-norm residual model has "
        "max |λ(J_l) − 1| < 0.5 and every layer of the residual-free one has ≥ 0.5; the "
        "residual model ends below the unigram entropy of the bytes and the residual-free one "
        "does not, in every seed."),
    refuted_if=(
        "In every seed: a trained residual layer has max |λ − 1| ≥ 1, or a trained "
        "residual-free layer has < 0.5, or the residual model stays above the unigram "
        "entropy, or the residual-free one goes below it (every control holding)."),
    thresholds=(
        Threshold("trained pre-norm + residual: max |λ − 1| over its 128 layers", arm="pre",
                  metric="trained_max_dist", stat="range", supports="< 0.5", refutes=">= 1"),
        Threshold("trained, no residual: smallest over layers of max |λ − 1|",
                  arm="pre-no-residual", metric="trained_min_dist", stat="range",
                  supports=">= 0.5", refutes="< 0.5"),
        Threshold("trained pre-norm + residual: held-out loss − unigram entropy", arm="pre",
                  metric="gap_to_unigram", stat="range", supports="< 0", refutes=">= 0",
                  unit="nats"),
        Threshold("trained, no residual: held-out loss − unigram entropy", arm="pre-no-residual",
                  metric="gap_to_unigram", stat="range", supports=">= 0", refutes="< 0",
                  unit="nats"),
        Threshold("no tuned rate sits at an edge of its grid (both arms tuned as hard)",
                  arm="pre", metric="rates_at_grid_edge", stat="range", supports="== 0",
                  control=True, unit="arms"),
    ),
    extensions=(
        Extension("already at init, at every depth",
                  "At init (8 random tokens), does every layer of the pre-norm residual stack "
                  "have max |λ − 1| < 0.5 at every depth L ≤ 128, and the residual-free stack "
                  "≥ 0.5 at every depth (v1's reading)?",
                  (Threshold("init, pre-norm + residual: max |λ − 1| over layers and depths",
                             arm="pre", metric="max_dist_all", stat="range", supports="< 0.5",
                             refutes=">= 1"),
                   Threshold("init, no residual: smallest over depths of max |λ − 1|",
                             arm="pre-no-residual", metric="min_dist_all", stat="range",
                             supports=">= 0.5", refutes="< 0.5"))),
        Extension("eigenvalues are not the whole story",
                  "At init, do the layers' eigenvalues approach 1 as depth grows (deepest / "
                  "shallowest max |λ − 1| < 1), while the end-to-end Jacobian's σ_max at least "
                  "doubles from 1 to 128 layers (eigenvalues near 1 do not bound a non-normal "
                  "product)?",
                  (Threshold("pre-norm + residual: max |λ − 1| at deepest / at L = 1", arm="pre",
                             metric="dist_shrink", stat="range", supports="< 1",
                             refutes=">= 1"),
                   Threshold("pre-norm + residual: end-to-end σ_max growth, deepest / L = 1",
                             arm="pre", metric="e2e_growth", supports=">= 2", refutes="< 2"))),
    ),
    tuning_seeds=TUNING_SEEDS,
    anchors=(
        Anchor("deepest transformer trained with residual re-zero init", "120 layers",
               "Bachlechner et al. 2020, ReZero is All You Need"),
        Anchor("self-attention without skip connections", "rank collapses doubly exponentially "
               "with depth", "Dong, Cordonnier & Loukas 2021, Attention is Not All You Need"),
    ),
    bits_metric=("pre", "val_loss"),
    version=5,
    revisions=("v2: the trained regime (issue 38): the eigenvalues read on the trained "
               "128-layer models (v1: at init only), deep-8 trained at 1 token per parameter "
               "(v1: deep-16, 0.15; 20 is unaffordable on CPU), a 4-rate grid with the edge "
               "rule and its control (v1: 2 rates), post-norm untrained and no scale axis, by "
               "cost; the init reading kept as an extension",
               "v3: 3 tokens per parameter (v2: 1.0; its whole run took 13 min, less than its "
               "budget assumed), nothing else changed",
               "v4: 20 tokens per parameter (v3: 3.0; its run took 13 min), nothing else "
               "changed",
               "v5: the rate grid reaches 0.27, {1e-3 .. 0.27} in steps of 3 (v4: up to 3e-2; "
               "its pre arm's tuned 0.09 sat at the top of its once-extended grid, so the edge "
               "control failed), nothing else changed"),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
