"""Claim `residual-eigenvalues`: residual blocks keep eigenvalues near 1 at 100+ layers.

    python -m experiments claim residual-eigenvalues [--quick]

**The preface's question** is the sentence itself, in two measured parts: do residual
connections keep each layer's Jacobian eigenvalues near 1 at depth (against the same stack
without residuals), and do they enable 100+ layer networks (a 128-layer model trains below
the unigram entropy, the residual-free one does not)? That the end-to-end σ_max grows with
depth is an extension with its own verdict (the preface never said it). What would have
refuted the headline: eigenvalues far from 1 with residuals, or near 1 without them, or a deep
residual model that cannot train.

Two measurements, both at the default init (`init_residual_scale`: `w_o`, `w_2` divided by
`√(2L)`):

* **Eigenvalues at depth.** For every depth and layer `l`, the Jacobian `J_l = ∂x_{l+1}/∂x_l`
  of the block at its own input (8 random tokens) is causal, so its eigenvalues are those of
  its `T` diagonal `(D, D)` blocks (`analysis.causal_jacobian_eigenvalues`, via
  `experiments.lab.stability.depth_point`). Reported: `max_l max |λ(J_l) − 1|` and, apart, the
  largest singular value of the end-to-end product (dense SVD): eigenvalues near 1 say nothing
  about the norm of a non-normal product. Arms: pre-norm with residuals (`pre`), pre-norm with
  each block *replacing* the stream (`pre-no-residual`), post-norm (`post`), and, for the
  singular values only, pre-norm without the `1/√(2L)` scaling (`pre-unscaled`).
* **Training at depth.** 128-layer models of the three main arms, AdamW, each arm at the rate
  of {3e-3, 1e-2} best on tuning seed 100 (250 steps, stdlib); the validation loss is compared
  with the unigram entropy of the bytes.

**Protocol** (v1). Seeds 0–4; depths L ∈ {1, 4, 16, 64, 128} at width D = 16 (`deep-16`), then
128-layer training. Scale axis: the same protocol at D = 32 and 48 (`deep-32`, `deep-48`,
424k–3.6M parameters); the verdict is read at `deep-16`. `--quick`: depths 1 and 8 and a short
8-layer training at one rate, 1e-2, nothing tuned.

Not yet on the trained regime (issue 38): the eigenvalues are read at init, and the training
half sees 250 steps (well under 1 token per parameter) with a two-rate grid and no edge rule;
the next registration trains the deep models at 20 tokens per parameter under the edge rule.
Results: `results/residual-eigenvalues/`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import optax

import transformer
from experiments import data, models
from experiments.lab import stability
from experiments.train import sweep
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold

SWEEP_ARMS = {**stability.ARMS,
              "pre-unscaled": dict(norm_position="pre", residual=True, init_residual_scale=False)}
TRAIN_ARMS = ("pre", "pre-no-residual", "post")


@dataclasses.dataclass(frozen=True)
class ResidualEigenvaluesSizes(Sizes):
  """What a run of `residual-eigenvalues` reads about its size.

  Attributes:
    model: the shape (`experiments.models.SHAPES`, `deep-<D>`): its width `D` is the width of
      every model here (the Jacobians are `(D, D)` blocks), its 128 layers the full run's
      trained depth; the scale axis replaces it.
    jacobian_seq_len: the tokens `T` of the random stream each Jacobian is taken at.
    depths: the depths `L` of the eigenvalue sweep (the first and last give the ratios).
    train_layers: the depth of the trained models.
    train_steps: AdamW steps per training run (10% of them warm-up).
    train_seq_len: training and validation window length.
    batch_size: training windows per step.
    learning_rates: the peak-rate grid (best rate per arm and seed kept).
    eval_batches: validation batches of the final loss.
  """

  model: str
  jacobian_seq_len: int
  depths: tuple[int, ...]
  train_layers: int
  train_steps: int
  train_seq_len: int
  batch_size: int
  learning_rates: tuple[float, ...]
  eval_batches: int


QUICK = ResidualEigenvaluesSizes(model="deep-16", jacobian_seq_len=8, depths=(1, 8),
                                 train_layers=8, train_steps=100, train_seq_len=32, batch_size=8,
                                 learning_rates=(1e-2,), eval_batches=8)
FULL = ResidualEigenvaluesSizes(model="deep-16", jacobian_seq_len=8, depths=(1, 4, 16, 64, 128),
                                train_layers=128, train_steps=250, train_seq_len=32,
                                batch_size=8, learning_rates=(3e-3, 1e-2), eval_batches=8)


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


def make_adamw(steps: int, warmup_steps: int):
  """`make_tx(learning_rate)`: AdamW, linear warm-up then cosine to 10%, no clipping."""
  unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps, steps, 0.1)

  def make_tx(learning_rate):
    return optax.adamw(lambda c: learning_rate * unit(c), b1=0.9, b2=0.95, weight_decay=0.1)

  return make_tx


def train_depth(cfg: transformer.Config, seeds, learning_rates, *, steps: int, batch_size: int,
                seq_len: int, eval_batches: int) -> dict[int, dict[str, float]]:
  """Trains `cfg` at every rate and seed; per seed, the best rate's final validation loss."""
  r = sweep.train_many(cfg, make_adamw(steps, max(1, steps // 10)), seeds=seeds,
                          learning_rates=learning_rates, steps=steps, data="stdlib",
                          batch_size=batch_size, seq_len=seq_len, eval_every=steps,
                          eval_batches=eval_batches)
  final_by_rate_seed = np.where(r.diverged, np.inf, r.val_loss[:, :, -1])
  final_by_rate_seed = np.where(np.isfinite(final_by_rate_seed), final_by_rate_seed, np.inf)
  out = {}
  for j, seed in enumerate(r.seeds):
    i = int(np.argmin(final_by_rate_seed[:, j]))
    best = final_by_rate_seed[i, j]
    out[seed] = {"val_loss": float(best) if math.isfinite(best) else math.log(cfg.vocab_size),
                 "best_lr": r.learning_rates[i], "n_diverged": float(r.diverged[:, j].sum())}
    for k, lr in enumerate(r.learning_rates):
      out[seed][f"val_loss_lr{lr:g}"] = float(final_by_rate_seed[k, j])
  return out


def run(spec: Spec) -> dict:
  """The depth sweep and the deep training for every seed; see the module docstring."""
  z = spec.sizes
  seq_len, depths, learning_rates = z.jacobian_seq_len, z.depths, z.learning_rates
  width = models.config(z.model).d_model
  train_layers, steps, train_seq, batch = (z.train_layers, z.train_steps, z.train_seq_len,
                                           z.batch_size)
  base = base_config(width, max(seq_len, train_seq))
  runs: dict = {arm: {} for arm in SWEEP_ARMS}
  sweeps: dict = {}
  for seed in spec.seeds:
    spec.log(f"  residual-eigenvalues: seed {seed}: depth sweep {depths}")
    sweep = stability.depth_sweep(base, seed, depths=depths, arms=SWEEP_ARMS, seq_len=seq_len)
    sweeps[seed] = sweep
    for arm, rows in sweep.items():
      runs[arm][seed] = sweep_metrics(rows)
  corpus = data.load_corpus("stdlib")
  unigram = min(data.unigram_entropy(corpus.val), data.unigram_entropy(corpus.train))
  tuned_rates = {}
  for arm in TRAIN_ARMS:
    cfg = base.replace(n_layers=train_layers, **SWEEP_ARMS[arm])
    if len(learning_rates) == 1:  # one rate (the quick run): nothing to tune
      spec.log(f"  residual-eigenvalues: training {train_layers} layers, arm {arm}")
      tuned_rates[arm] = learning_rates[0]
    else:
      spec.log(f"  residual-eigenvalues: training {train_layers} layers, arm {arm}: rate tuned "
               f"on seed {TUNING_SEEDS[0]}")
      tuning = train_depth(cfg, TUNING_SEEDS, learning_rates, steps=steps, batch_size=batch,
                           seq_len=train_seq, eval_batches=z.eval_batches)
      tuned_rates[arm] = tuning[TUNING_SEEDS[0]]["best_lr"]
    trained = train_depth(cfg, spec.seeds, (tuned_rates[arm],), steps=steps, batch_size=batch,
                          seq_len=train_seq, eval_batches=z.eval_batches)
    for seed, m in trained.items():
      runs[arm][seed].update(m)
      runs[arm][seed]["gap_to_unigram"] = m["val_loss"] - unigram
  figure = _figure(sweeps[spec.seeds[0]], spec.run_dir)
  mean = lambda arm, m: float(np.mean([runs[arm][s][m] for s in spec.seeds]))
  deepest = max(depths)
  notes = [
      f"- Deepest model analysed: {deepest} layers (eigenvalues of every layer's Jacobian and "
      f"the dense end-to-end Jacobian of the {deepest}-layer stack, T = {seq_len}, D = {width});"
      f" deepest trained: {train_layers} layers.",
      "- max_l |λ − 1| per depth, mean over seeds: " + "; ".join(
          f"{arm}: " + ", ".join(f"L{L} {mean(arm, f'dist_L{L}'):.3g}" for L in depths)
          for arm in SWEEP_ARMS) + ".",
      "- End-to-end σ_max per depth, mean over seeds: " + "; ".join(
          f"{arm}: " + ", ".join(f"L{L} {mean(arm, f'e2e_sigma_L{L}'):.3g}" for L in depths)
          for arm in SWEEP_ARMS) + ".",
      f"- Unigram entropy of the stdlib bytes: {unigram:.3f} nats; validation loss after "
      f"{steps} steps at {train_layers} layers (each arm at its rate tuned on seed "
      f"{TUNING_SEEDS[0]} over {learning_rates}: {tuned_rates}), mean over seeds: "
      + ", ".join(f"{arm} {mean(arm, 'val_loss'):.3f}" for arm in TRAIN_ARMS) + ".",
      "- Eigenvalues are not singular values: `pre-unscaled` (no 1/√(2L) init of w_o, w_2) is "
      "the arm in which the end-to-end σ_max can grow with depth; it is reported, not part "
      "of the verdict.",
  ]
  return {"setup": {"model_config": base.to_dict(), "unigram_entropy": unigram,
                    "tuned_rates": tuned_rates},
          "runs": runs, "figures": [figure], "notes": notes,
          "effects": [("end-to-end σ_max growth, pre-unscaled", "pre-unscaled", None,
                       "e2e_growth"),
                      ("post-norm: validation loss − unigram entropy", "post", None,
                       "gap_to_unigram"),
                      ("post-norm: max |λ − 1| over depths", "post", None, "max_dist_all")]}


def _figure(sweep: dict, run_dir: str) -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
  for arm, rows in sweep.items():
    depths = sorted(rows)
    ax1.plot(depths, [rows[L]["max_dist_from_one"] for L in depths], "o-", label=arm)
    ax2.plot(depths, [rows[L]["e2e_sigma_max"] for L in depths], "o-", label=arm)
  ax1.set(xscale="log", yscale="log", xlabel="layers L", ylabel="max_l |λ(J_l) − 1|",
          title="eigenvalues of each block's Jacobian")
  ax2.set(xscale="log", yscale="log", xlabel="layers L", ylabel="σ_max(J_{L−1}⋯J_0)",
          title="end-to-end Jacobian")
  ax1.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(f"{run_dir}/depth.png", dpi=110)
  plt.close(fig)
  return "depth.png"


TUNING_SEEDS = (100,)

CLAIM = Claim(
    id="residual-eigenvalues",
    topic="eigenvalues",
    kind="existing",
    preface="Residual connections keep eigenvalues near 1, enabling 100+ layer networks",
    hypothesis=(
        "At init (default 1/√(2L) branch scaling, D = 16), every layer of a pre-norm residual "
        "stack has max |λ(J_l) − 1| < 0.5 at every depth L ≤ 128, and without residuals it is "
        "≥ 0.5 at every depth; a 128-layer pre-norm residual model trains below the unigram "
        "entropy of the data in 250 steps and the residual-free one does not, in every seed "
        "(each arm at its rate tuned on a tuning seed; post-norm reported as a third arm)."),
    refuted_if=(
        "Any of, in every seed: pre-norm residual max |λ − 1| ≥ 1 at some depth; the "
        "residual-free stack has max |λ − 1| < 0.5 at some depth; the residual 128-layer model "
        "stays above the unigram entropy, or the residual-free one goes below it."),
    thresholds=(
        Threshold("pre-norm + residual: max |λ − 1| over all layers and depths", arm="pre",
                  metric="max_dist_all", stat="range", supports="< 0.5", refutes=">= 1"),
        Threshold("no residual: smallest over depths of max |λ − 1|", arm="pre-no-residual",
                  metric="min_dist_all", stat="range", supports=">= 0.5", refutes="< 0.5"),
        Threshold("deep pre-norm + residual: validation loss − unigram entropy", arm="pre",
                  metric="gap_to_unigram", stat="range", supports="< 0", refutes=">= 0",
                  unit="nats"),
        Threshold("deep, no residual: validation loss − unigram entropy", arm="pre-no-residual",
                  metric="gap_to_unigram", stat="range", supports=">= 0", refutes="< 0",
                  unit="nats"),
    ),
    extensions=(
        Extension("eigenvalues are not the whole story",
                  "Do the layers' eigenvalues approach 1 as depth grows (deepest / shallowest "
                  "max |λ − 1| < 1), while the end-to-end Jacobian's σ_max at least doubles from "
                  "1 to 128 layers (eigenvalues near 1 do not bound a non-normal product)?",
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
    # `deep-16`, the registered size (`FULL.model`), is added first by the runner: the axis is
    # D = 16, 32, 48 at 128 layers (424k to 3.6M parameters, 8.6×).
    scale_models=("deep-32", "deep-48"),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
