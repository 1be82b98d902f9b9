"""Claim `residual-eigenvalues`: residual blocks keep eigenvalues near 1 at 100+ layers.

    python -m experiments claim residual-eigenvalues [--quick]

**The preface's question**, clause by clause, on 128-layer pre-norm stacks (D = 8) with and
without residuals. ① "Residual connections keep eigenvalues near 1": a layer is *near 1* when
its Jacobian's eigenvalues all lie within 0.5 of 1 (max |λ(J_l) − 1| < 0.5); read over the
distribution of layers, the median layer and the fraction of layers near 1, trained and at
init (L = 128), with residuals, against the trained residual-free stack. ② "enabling 100+ layer
networks": the residual model trains ≥ 0.1 nats below the unigram entropy of the bytes and
≥ 0.1 nats below the residual-free one. The worst layer alone (v5's headline), the
residual-free model against the unigram entropy, every depth at init and the end-to-end σ_max
are extensions. Refuted by: most layers far from 1 with residuals, or near 1 without; a deep
residual model that does not train, or trains no better than the residual-free one.

* **Eigenvalues.** `J_l = ∂x_{l+1}/∂x_l` at its own input is causal, so its eigenvalues are
  those of its `T` diagonal `(D, D)` blocks (`stability.trained_point`): on the trained params
  at the first 32 bytes of the `test` split, and at init (`stability.depth_sweep`, 8 random
  tokens, depths 1, 16, 128; arms `pre`, `pre-no-residual`, `post`, and for the σ_max only
  `pre-unscaled`, no `1/√(2L)` init of `w_o`, `w_2`).
* **Training.** `deep-8` (128 layers, 113,936 params), arms `pre` and `pre-no-residual`, AdamW
  (weight decay 0.1; 10% warm-up, linear decay to 10%), batches 32 × 32 bytes, 20 tokens per
  parameter (2,226 steps); each arm's peak rate tuned on tuning seeds 110, 111 (mean val loss)
  over {1e-3 .. 0.27} in steps of 3, extended one step past a winning edge, once; control: no
  tuned rate at an edge. Reported seeds 10–14, read on the `test` split.

**Budget.** The post-norm arm is not trained, and the scale axis (`deep-16` costs ~4×) not
measured, by cost: `--sizes deep-8,deep-16` adds it. Each trained arm is kept as it finishes
(`trained_part`), so `--resume RUN` trains only what is missing. `--quick`: depths 1 and 8, an
8-layer model trained 30 steps at one rate, nothing tuned.

History: v1 read init only; v2-v4 moved to the trained regime (1, 3, then 20 tokens per
parameter); v5 widened the grid after v4's edge failure, on the same seeds, and was refuted by
its worst layer alone (max 28.8, median 0.262). v6 (registered before any run of it) reads the
whole sentence clause by clause on fresh seeds and the test split (`revisions`).
Results: `results/residual-eigenvalues/`.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

import transformer
from experiments import data, models
from experiments.lab import depth, parts, stability, tuning
from experiments.lab import optimizers as O
from experiments.train import on_budget, train_many
from experiments.verdict import Anchor, Claim, Extension, Revision, Spec, Threshold, TrainedSizes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.render.tuning import edges

SWEEP_ARMS = {**stability.ARMS,
              "pre-unscaled": dict(norm_position="pre", residual=True, init_residual_scale=False)}
TRAIN_ARMS = ("pre", "pre-no-residual")
SEEDS = (10, 11, 12, 13, 14)
TUNING_SEEDS = (110, 111)
NEAR = 0.5  # a layer is near 1 when max |λ(J_l) − 1| < NEAR
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
    split: the split the reported losses, the trained Jacobians' bytes and the unigram entropy
      are read on: `test` (v6); `heldout` (v5 and before: the held-out bytes before `test`
      was cut from them; losses then read on `val`, the nearest split `train_many` takes).
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
  split: str = "heldout"

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
                                 batch_size=8, grid=(1e-2,), extend=0, eval_batches=4,
                                 split="test")
FULL = ResidualEigenvaluesSizes(model="deep-8", steps=None, tokens_per_param=20.0,
                                jacobian_seq_len=8, depths=(1, 16, 128), train_layers=128,
                                seq_len=32, batch_size=32, grid=GRID, extend=1, eval_batches=8,
                                split="test")


def base_config(width: int, seq_len: int) -> transformer.Config:
  """The tiny byte-level model of the claim (`n_layers` is set per depth)."""
  return transformer.Config(vocab_size=data.VOCAB_SIZE, d_model=width, n_layers=1, n_heads=2,
                            max_len=seq_len, activation="gelu_tanh")


def train_arm(cfg: transformer.Config, z: ResidualEigenvaluesSizes, steps: int, seeds,
              tokens_T, log) -> tuple[dict, dict[int, dict[str, float]]]:
  """Tunes `cfg`'s rate (or not), trains it on `seeds`; per seed its loss and trained spectra."""
  make_tx = O.adamw_arm(weight_decay=0.1)
  kw = dict(data="stdlib", batch_size=z.batch_size, seq_len=z.seq_len,
            eval_batches=z.eval_batches)
  eval_split = "test" if z.split == "test" else "val"
  if len(z.grid) > 1:
    log(f"  residual-eigenvalues: tuning on {z.grid} (seeds {TUNING_SEEDS}, {steps} steps)")
    tuned = tuning.tune_on_seeds(cfg, make_tx, z.grid, seeds=TUNING_SEEDS, steps=steps,
                                 extend=z.extend, **kw)
  else:  # one rate (the quick run): nothing to tune
    tuned = tuning.untuned(z.grid[0])
  lr = tuned["learning_rate"]
  log(f"  residual-eigenvalues: rate {lr:g}; seeds {tuple(seeds)}")
  r = train_many(cfg, on_budget(make_tx, steps), seeds=tuple(seeds),
                 learning_rates=(lr,), steps=steps, eval_every=steps, eval_split=eval_split,
                 **kw)
  final = r.val_loss[0, :, -1]
  ended = tuning.ended_diverged(final, cfg.vocab_size)
  out = {}
  for i, seed in enumerate(seeds):
    params = jax.tree.map(lambda x, i=i: x[0, i], r.params)
    spectra = stability.trained_point(cfg, params, tokens_T)
    layers = depth.layer_distribution(spectra["dist_from_one"], NEAR)
    out[seed] = {"val_loss": float(final[i]) if np.isfinite(final[i]) else math.log(256),
                 "ended_diverged": float(ended[i]), "learning_rate": lr,
                 "rates_at_grid_edge": float(tuned["at_edge"]),
                 "trained_max_dist": spectra["max_dist_from_one"],
                 "trained_min_dist": spectra["min_dist_from_one"],
                 "trained_median_dist": layers["median_dist"],
                 "trained_frac_near": layers["frac_near"],
                 "trained_e2e_sigma": spectra["e2e_sigma_max"]}
  return tuned, out


def _read_bytes(z: ResidualEigenvaluesSizes) -> tuple[float, np.ndarray]:
  """The unigram entropy the loss is compared with, and the `seq_len` bytes the trained
  Jacobians are read at: both from the split the verdict reads (`test`; `heldout` before v6)."""
  corpus = data.load_corpus("stdlib")
  read = getattr(corpus, z.split)
  unigram = min(data.unigram_entropy(read), data.unigram_entropy(corpus.train))
  return unigram, np.asarray(read[:z.seq_len], np.int32)


def trained_part(arm: str, z: ResidualEigenvaluesSizes, seeds, run_dir: str,
                 log=print) -> tuple[dict, dict[int, dict[str, float]]]:
  """`train_arm` for `arm` (one of `TRAIN_ARMS`) at sizes `z` (`steps` set), kept as the part
  `run_dir/parts/<arm>.json` (`lab.parts.kept`: reused on `--resume` or when another process
  trained it into the same folder); returns `(tuned, {seed: metrics})`."""
  if arm not in TRAIN_ARMS:
    raise ValueError(f"arm {arm!r} is not trained here. Fix: one of {TRAIN_ARMS}.")
  def compute():
    base = base_config(models.config(z.model).d_model, max(z.jacobian_seq_len, z.seq_len))
    cfg = base.replace(n_layers=z.train_layers, **SWEEP_ARMS[arm])
    log(f"  residual-eigenvalues: training {z.train_layers} layers, arm {arm}")
    tuned, trained = train_arm(cfg, z, z.steps, seeds, _read_bytes(z)[1], log)
    return {"tuned": tuned, "trained": trained}
  key = {"claim": "residual-eigenvalues", "arm": arm, "seeds": list(seeds),
         "tuning_seeds": list(TUNING_SEEDS), "sizes": z.to_dict()}
  got = parts.kept(run_dir, arm, key, compute, log)
  return got["tuned"], {int(s): m for s, m in got["trained"].items()}


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
      runs[arm][seed] = depth.sweep_metrics(rows, NEAR)
  unigram, _ = _read_bytes(z)
  tuned = {}
  for arm in TRAIN_ARMS:
    tuned[arm], trained = trained_part(arm, z, spec.seeds, spec.run_dir, spec.log)
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
      {"tuned": tuned, "read": f"lowest final val loss after {steps} steps, mean over tuning "
                               f"seeds {list(TUNING_SEEDS)}"},
      f"Unigram entropy of the stdlib bytes: {unigram:.3f} nats; {z.split} loss, mean over "
      "seeds: " + ", ".join(f"{a} {mean(a, 'val_loss'):.3f}" for a in TRAIN_ARMS) + ".",
      f"Trained models, fraction of layers near 1 (max |λ(J_l) − 1| < {NEAR}), mean over "
      "seeds: " + "; ".join(f"{a} {mean(a, 'trained_frac_near'):.3g}" for a in TRAIN_ARMS)
      + f"; at init (L = {z.depths[-1]}): " + "; ".join(
          f"{a} {mean(a, 'init_frac_near'):.3g}" for a in SWEEP_ARMS) + ".",
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
  return {"split": z.split,
          "setup": {"model_config": base.replace(n_layers=z.train_layers).to_dict(),
                    "unigram_entropy": unigram, "tuned": tuned, "steps": steps,
                    "tuning_seeds": list(TUNING_SEEDS)},
          "runs": runs, "figures": [_figure(sweeps[spec.seeds[0]])], "notes": notes,
          "effects": [("trained: held-out loss, no residual − pre", "pre-no-residual", "pre",
                       "val_loss"),
                      ("trained: max_l |λ − 1|, no residual − pre", "pre-no-residual", "pre",
                       "trained_max_dist"),
                      ("trained: fraction of layers near 1, pre − no residual", "pre",
                       "pre-no-residual", "trained_frac_near"),
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


_WORST = Threshold("trained pre-norm + residual: max |λ − 1| over its 128 layers", arm="pre",
                   metric="trained_max_dist", stat="range", supports="< 0.5", refutes=">= 1")
_LOSS_GAP = Threshold.beyond("trained: held-out loss, no residual − pre-norm + residual",
                             "pre-no-residual", "val_loss", baseline="pre", margin=0.1,
                             unit="nats")
_BELOW_UNIGRAM = Threshold.beyond("trained pre-norm + residual: held-out loss − unigram entropy",
                                  "pre", "gap_to_unigram", direction="<", margin=0.1,
                                  unit="nats")
_NEAR = (
    Threshold("trained pre-norm + residual: median over layers of max |λ − 1|", arm="pre",
              metric="trained_median_dist", supports="< 0.5", refutes=">= 0.5"),
    Threshold("trained pre-norm + residual: fraction of layers near 1", arm="pre",
              metric="trained_frac_near", supports=">= 0.9", refutes="< 0.5",
              unit="fraction of layers"),
    Threshold("init (L = 128) pre-norm + residual: median over layers of max |λ − 1|",
              arm="pre", metric="init_median_dist", supports="< 0.5", refutes=">= 0.5"),
    Threshold("init (L = 128) pre-norm + residual: fraction of layers near 1", arm="pre",
              metric="init_frac_near", supports=">= 0.9", refutes="< 0.5",
              unit="fraction of layers"),
    Threshold("trained, no residual: fraction of layers near 1", arm="pre-no-residual",
              metric="trained_frac_near", supports="<= 0.1", refutes="> 0.5",
              unit="fraction of layers"),
)
CLAUSES = (
    Clause("Residual connections keep eigenvalues near 1", tuple(th.name for th in _NEAR)),
    Clause("enabling 100+ layer networks", (_BELOW_UNIGRAM.name, _LOSS_GAP.name)),
)

CLAIM = Claim(
    id="residual-eigenvalues",
    topic="eigenvalues",
    kind="existing",
    preface="Residual connections keep eigenvalues near 1, enabling 100+ layer networks",
    hypothesis=(
        "128 layers, D = 8, 20 tokens per parameter, each arm at its rate tuned on two tuning "
        "seeds under the edge rule, read on the test split, 95% t-intervals over 5 seeds: ① with "
        "residuals the median layer has max |λ(J_l) − 1| < 0.5 and ≥ 90% of the layers are near "
        "1 (< 0.5), trained and at init (L = 128), while ≤ 10% of the trained residual-free "
        "layers are; ② the residual model ends more than 0.1 nats below the unigram entropy of "
        "the bytes and more than 0.1 nats below the residual-free model."),
    refuted_if=(
        "① with residuals the median layer is ≥ 0.5 from 1 or fewer than half the layers are "
        "near 1 (trained or at init), or more than half the residual-free layers are near 1; "
        "② the residual model is not 0.1 nats below the unigram entropy, or not 0.1 nats below "
        "the residual-free model (whole interval; the edge control holding)."),
    thresholds=(
        *_NEAR, _BELOW_UNIGRAM, _LOSS_GAP,
        Threshold("no tuned rate sits at an edge of its grid (both arms tuned as hard)",
                  arm="pre", metric="rates_at_grid_edge", stat="range", supports="== 0",
                  control=True, unit="arms"),
    ),
    clauses=CLAUSES,
    extensions=(
        Extension("every layer (v5's headline)",
                  "After training, is every one of the 128 residual layers near 1 (max |λ − 1| "
                  "< 0.5), and every residual-free layer not (v2-v5's reading, decided by the "
                  "worst layer)?",
                  (_WORST,
                   Threshold("trained, no residual: smallest over layers of max |λ − 1|",
                             arm="pre-no-residual", metric="trained_min_dist", stat="range",
                             supports=">= 0.5", refutes="< 0.5"))),
        Extension("without residuals, no better than unigram",
                  "Does the 128-layer residual-free model end at or above the unigram "
                  "entropy of the bytes in every seed (v2-v5's threshold)?",
                  (Threshold("trained, no residual: held-out loss − unigram entropy",
                             arm="pre-no-residual", metric="gap_to_unigram", stat="range",
                             supports=">= 0", refutes="< 0", unit="nats"),)),
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
    seeds=SEEDS,
    tuning_seeds=TUNING_SEEDS,
    anchors=(
        Anchor("deepest transformer trained with residual re-zero init", "120 layers",
               "Bachlechner et al. 2020, ReZero is All You Need"),
        Anchor("self-attention without skip connections", "rank collapses doubly exponentially "
               "with depth", "Dong, Cordonnier & Loukas 2021, Attention is Not All You Need"),
    ),
    bits_metric=("pre", "val_loss"),
    key=_NEAR[1].name,
    version=6,
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
               "control failed), nothing else changed",
               Revision(6, "protocol",
                        "Confirmatory (issue 47 items 2, 3, 5), registered before any run of v6: "
                        "the sentence read clause by clause. ① 'keep eigenvalues near 1' over the "
                        "distribution of layers (median layer and fraction of layers within 0.5 "
                        "of 1, trained and at init, 95% t-intervals; the residual-free contrast "
                        "as the fraction of its trained layers near 1), not the worst layer "
                        "alone (v5 was refuted by max 28.8 against a median of 0.262; the worst "
                        "layer is now the extension 'every layer'); ② 'enabling 100+ layer "
                        "networks' by the residual model's loss ≥ 0.1 nats below the unigram "
                        "entropy and ≥ 0.1 nats below the residual-free model's (v5: every seed "
                        "below / above the unigram entropy; the residual-free one moves to an "
                        "extension). Fresh seeds 10-14 and tuning seeds 110, 111 (v1-v5: 0-4 and "
                        "100; v5 widened its grid after v4's edge failure on the same seeds), "
                        "rates chosen on the mean of two tuning seeds, losses, trained "
                        "Jacobians' bytes and the unigram entropy read on the test split "
                        "(v5: the held-out bytes). Same model, budget, grid and edge rule.")),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
