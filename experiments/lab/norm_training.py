"""Training with and without a norm, read for conditioning: rates, divergence, `κ_eff` over time.

The training side of the `layernorm-condition` claim: one optimizer (`make_tx_factory`: AdamW,
cosine decay, no warm-up, no clipping, so nothing but the norm keeps a run stable), what counts
as a run that ended diverged (`ended_diverged`, `end_loss`), the tuned and stress rates
(`tune_arm` on the tuning seeds, with the edge rule, through `tune_fixed`, which
`cap_training` shares; `stress_rate`), and `track`, which trains the seeds and reads the
effective condition number of the normalized projection inputs (`NORMED`) at every evaluation
(`input_conditions`, in float32 or float64; `kappa_ceiling`, `kappa_max`, `seed_metrics`).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import data
from experiments.lab import edge, stability
from experiments.lab.tuning import ended_diverged
from experiments.train import sweep
from experiments.train.step import adamw
from experiments.verdict.render.figures import median_band

EPS_F32 = float(jnp.finfo(jnp.float32).eps)
NORMED = ("attn_in", "ffn_in")  # the inputs a pre-norm produces: what the claim is about


def make_tx_factory(steps: int):
  """`make_tx(learning_rate)`: AdamW, cosine decay to 10%, no warm-up, no clipping.

  Example:
    >>> from experiments.lab.norm_training import make_tx_factory
    >>> tx = make_tx_factory(10)(learning_rate=1e-2)
  """
  unit = optax.cosine_decay_schedule(1.0, max(steps, 1), 0.1)
  return lambda learning_rate: adamw(lambda c: learning_rate * unit(c), weight_decay=0.1,
                                     decay="all")


def end_loss(final_loss, vocab_size: int) -> np.ndarray:
  """The final loss, with a run that ended diverged counted as its initial loss `ln V`.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.norm_training import end_loss
    >>> end_loss(np.array([2.5, np.nan]), 256).round(3).tolist()
    [2.5, 5.545]
  """
  x = np.asarray(final_loss, np.float64)
  return np.where(ended_diverged(x, vocab_size), math.log(vocab_size), x)


def stress_rate(grid, none_ended_diverged) -> tuple[float, bool]:
  """The smallest grid rate at which the un-normed model ended diverged (else the largest).

  Returns:
    `(rate, found)`; `found` is False when no rate diverged (the largest is used).

  Example:
    >>> from experiments.lab.norm_training import stress_rate
    >>> stress_rate((1e-3, 1e-2, 1e-1, 1.0), [False, False, True, True])
    (0.1, True)
  """
  hit = np.flatnonzero(np.asarray(none_ended_diverged, bool))
  if hit.size:
    return float(grid[int(hit[0])]), True
  return float(grid[-1]), False


def input_conditions(inter, center: bool = True, names=NORMED, float64: bool = False,
                     params=None) -> dict[str, dict[str, np.ndarray]]:
  """`stability.input_conditions` of sown `intermediates`, per layer, as numpy arrays.

  Args:
    inter: the model's `intermediates` collection (leading axes, e.g. `(R, S)` from
      `train_many`, then the layer axis `L`, then `B, T, width`).
    center: centre the rows first (`analysis.effective_condition`).
    names: the projection inputs to read (`stability.PROJECTION_INPUTS`).
    float64: the SVD in float64 with the inputs' own rounding as tolerance
      (`stability.input_conditions(float64=True)`; `inter` must be concrete arrays).
    params: with `float64`, a LayerNorm model's params (same leading axes as `inter`): each
      input's structural zero, the direction `1/scale` of its norm (`norm_1` feeds `attn_in`,
      `norm_2` feeds `ffn_in`), is projected out before the SVD (`stability.input_conditions`'s
      `null`), so that it is dropped as the float32 path drops it.

  Returns:
    `{input: {"kappa": (..., L), "n_dropped": (..., L)}}` for each of `names`.
  """
  blocks = jax.tree.map(lambda x: x[0], inter["blocks"], is_leaf=lambda x: isinstance(x, tuple))
  null = None
  if float64:
    blocks = jax.device_get(blocks)
    if params is not None:
      norms = {"attn_in": "norm_1", "ffn_in": "norm_2"}
      null = {n: 1.0 / np.asarray(params["blocks"][norms[n]]["scale"], np.float64)
              for n in names if n in norms}
  conds = jax.device_get(stability.input_conditions(blocks, center=center, names=names,
                                                    float64=float64, null=null))
  return {name: {"kappa": np.asarray(conds[name]["kappa_eff"], np.float64),
                 "n_dropped": np.asarray(conds[name]["n_dropped"])} for name in names}


def kappa_ceiling(n_rows: int, width: int, float64: bool = False) -> float:
  """The largest `κ_eff` the reading can report for `X (n_rows, width)`: `1/(max(N, D)·eps₃₂)`
  in float32; in float64, `1/stability.rounding_rtol`, the inputs' own float32 rounding.

  Singular values below `max(N, D)·eps₃₂·σ_1` count as zeros
  (`analysis.spectra.default_rank_tol`), so a float32 reading at this ceiling, with more values
  dropped, is an input that lost rank in float32; the float64 reading drops only what the
  inputs' rounding cannot resolve.

  Example:
    >>> from experiments.lab.norm_training import kappa_ceiling
    >>> round(kappa_ceiling(16 * 128, 32)), round(kappa_ceiling(16 * 128, 32, float64=True))
    (4096, 2965821)
  """
  if float64:
    return 1 / stability.rounding_rtol((n_rows, width))
  return 1 / (max(n_rows, width) * EPS_F32)


def kappa_max(kappa) -> float:
  """Largest finite value (over evaluations, layers, inputs); NaN if there is none.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.norm_training import kappa_max
    >>> kappa_max(np.array([[2.0, 30.0], [np.nan, np.inf]]))
    30.0
  """
  k = np.asarray(kappa, np.float64)
  k = k[np.isfinite(k)]
  return float(k.max()) if k.size else math.nan


def tune_fixed(cfg, make_tx, grid, *, seeds, steps: int, batch_size: int, seq_len: int,
               eval_batches: int, extend: int = 0, name: str = "tune_fixed") -> dict:
  r"""Every rate of `grid` on every tuning seed (final `val` loss only), under `make_tx`'s own
  schedule; the rate with the lowest mean loss among those no seed ended diverged at.

  .. math:: \eta^* = \arg\min_{\eta \in G,\ \text{no seed diverged}} \frac{1}{|S|}
     \sum_{s \in S} \ell_N(\eta, s)

  The edge rule (issue 38, `edge.Search`): while the best rate is the first or last run, one rate
  a step of the grid's ratio beyond that edge is run too, at most `extend` times.
  `tuning.tune_on_seeds` states the same rule under its warm-up schedule; the arms of
  `layernorm-condition` and `eigenvalue-constrained` train without one (`make_tx_factory`),
  so their tuning runs use their own optimizer, as the reported runs do.

  Args:
    cfg: the model.
    make_tx: `make_tx(learning_rate) -> optax.GradientTransformation`.
    grid: two or more increasing rates (geometric: the step is `grid[1] / grid[0]`).
    seeds: the tuning seeds (never reported ones); two or more where losses across the grid
      differ by less than the seed spread (issue 47 item 5).
    steps, batch_size, seq_len, eval_batches: every run's budget and evaluation.
    extend: rates that may be added beyond the edges, in total.
    name: the caller, for error messages.

  Returns:
    The one tuning record, `edge.Tuned.to_dict()`: `grid` (the rates run, increasing,
    extensions included), `losses` (per rate, mean over seeds), `losses_by_seed`, `excluded`
    (ended diverged on some seed), `spiked` (a recovered spike on some seed), `seeds`,
    `at_edge`, ...; raises `ValueError` when every rate ended diverged.
  """
  if len(grid) < 2:
    raise ValueError(f"{name}: grid={tuple(grid)} must hold two or more increasing rates "
                     "(its ratio is the edge rule's step). Fix: e.g. (1e-3, 3e-3, 1e-2, 3e-2).")
  seeds = tuple(int(s) for s in seeds)
  by_rate: dict[float, tuple[np.ndarray, bool]] = {}
  search = edge.Search(grid, extend=extend, name=name)
  for rates in search:
    r = sweep.train_many(cfg, make_tx, seeds=seeds, learning_rates=tuple(rates), steps=steps,
                         data=data.text_source("stdlib", seq_len), batch_size=batch_size,
                         seq_len=seq_len, eval_every=steps, eval_batches=eval_batches)
    val = np.asarray(r.val_loss[:, :, -1], np.float64)
    ended = ended_diverged(val, cfg.vocab_size)
    for k, lr in enumerate(rates):
      by_rate[lr] = (val[k], bool((r.diverged[k] & ~ended[k]).any()))
    search.record(val.mean(1), ended.any(1))
  t = search.tuned()
  return dataclasses.replace(
      t, losses=tuple(float(v) for v in t.losses),
      losses_by_seed=tuple(tuple(float(v) for v in by_rate[lr][0]) for lr in t.grid),
      spiked=tuple(by_rate[lr][1] for lr in t.grid), seeds=seeds).to_dict()


def tune_arm(cfg, grid, *, seeds, steps: int, batch_size: int, seq_len: int,
             eval_batches: int, extend: int = 0) -> dict:
  """A norm arm's tuned rate on the tuning `seeds`: `tune_fixed` with `make_tx_factory(steps)`
  (AdamW, cosine decay, no warm-up, no clipping).

  Example:
    >>> import transformer
    >>> from experiments.lab.norm_training import tune_arm
    >>> t = tune_arm(transformer.preset("tiny", d_model=16, n_layers=1), (1e-4, 3e-4),
    ...              seeds=(110, 111), steps=4, batch_size=2, seq_len=8, eval_batches=1,
    ...              extend=1)
    >>> len(t["grid"]), t["learning_rate"] in t["grid"], len(t["losses_by_seed"][0])
    (3, True, 2)
  """
  return tune_fixed(cfg, make_tx_factory(steps), grid, seeds=seeds, steps=steps,
                    batch_size=batch_size, seq_len=seq_len, eval_batches=eval_batches,
                    extend=extend, name="tune_arm")


def track(cfg, seeds, learning_rates, *, steps: int, batch_size: int, seq_len: int,
          eval_every: int, eval_batches: int, eval_split: str = "val",
          float64: bool = False) -> dict:
  """Trains at `learning_rates` × `seeds`, reading `κ_eff` of the normalized inputs each eval
  on the first batch of `eval_split` (`val`, or `test` for a verdict's runs), in float32 or,
  with `float64`, with the SVD in float64 (`input_conditions`).

  Returns:
    `kappa_ERSL` per input of `NORMED` (NaN where the validation loss is non-finite),
    `n_dropped_ERSL` (largest over inputs), `saturated_ERSL` (a reading within a quarter of the
    reading's ceiling, `kappa_ceiling`: a lower bound, not a measurement; any input),
    `val_RSE`, `steps_E`, `final_RS`, `ended_diverged_RS`, `spiked_RS`.
  """
  readings: list[dict] = []
  r = sweep.train_many(cfg, make_tx_factory(steps), seeds=seeds,
                       learning_rates=tuple(learning_rates), steps=steps,
                       data=data.text_source("stdlib", seq_len), batch_size=batch_size,
                       seq_len=seq_len, eval_every=eval_every, eval_batches=eval_batches,
                       eval_split=eval_split,
                       callback=lambda step, params, inter: readings.append(
                           input_conditions(inter, float64=float64, params=params
                                            if float64 and cfg.norm == "layernorm" else None)))
  finite_RSE = np.isfinite(r.val_loss)
  kappa = {name: np.stack([h[name]["kappa"] for h in readings]) for name in NORMED}
  for name in NORMED:  # a model whose loss is non-finite has no input to condition
    kappa[name] = np.where(np.moveaxis(finite_RSE, -1, 0)[..., None], kappa[name], np.nan)
  final = r.val_loss[:, :, -1]
  bad = ended_diverged(final, cfg.vocab_size)
  ceiling = kappa_ceiling(batch_size * seq_len, cfg.d_model, float64=float64)
  saturated = np.any([kappa[n] >= 0.25 * ceiling for n in NORMED], axis=0)
  return {"kappa_ERSL": kappa, "val_RSE": r.val_loss, "steps_E": np.asarray(r.steps),
          "saturated_ERSL": saturated,
          "n_dropped_ERSL": np.max([np.stack([h[n]["n_dropped"] for h in readings])
                                    for n in NORMED], axis=0),
          "final_RS": final, "ended_diverged_RS": bad, "spiked_RS": r.diverged & ~bad}


def seed_metrics(tr: dict, j: int, vocab_size: int) -> dict[str, float]:
  """One arm's metrics for seed index `j`: rate 0 of `tr` is the tuned one, rate 1 the stress."""
  m: dict[str, float] = {}
  for i, tag in enumerate(("tuned", "stress")):
    k = kappa_max([tr["kappa_ERSL"][n][:, i, j] for n in NORMED])
    m[f"kappa_{tag}"] = k
    m[f"log10_kappa_{tag}"] = math.log10(k) if k > 0 else math.nan
    for n in NORMED:
      m[f"{n}/kappa_{tag}"] = kappa_max(tr["kappa_ERSL"][n][:, i, j])
    m[f"kappa_{tag}_final"] = kappa_max([tr["kappa_ERSL"][n][-1, i, j] for n in NORMED])
    m[f"end_loss_{tag}"] = float(end_loss(tr["final_RS"][i, j], vocab_size))
    m[f"diverged_{tag}"] = float(tr["ended_diverged_RS"][i, j])
    m[f"spiked_{tag}"] = float(tr["spiked_RS"][i, j])
    m[f"n_dropped_{tag}"] = float(tr["n_dropped_ERSL"][:, i, j].max())
    if "saturated_ERSL" in tr:
      m[f"saturated_{tag}"] = float(tr["saturated_ERSL"][:, i, j].any())
  return m


def kappa_figure(tracks: dict, tuned: dict, stress: float, vocab_size: int, bound: float,
                 eval_every: int, ceiling: float) -> dict:
  """`kappa.png`, declared as data: `κ_eff` of the normalized inputs at the tuned and at the
  stress rates against the bound `bound` (and the reading's `ceiling` where readings come near
  it), and the validation loss at the stress rate (median over seeds, band min–max);
  `layernorm-condition`'s figure, its arms `tracks` (`track`) in the order of its norms."""
  colors = dict(zip(tracks, ("C0", "C1", "C3"), strict=False))
  ln_v = math.log(vocab_size)
  log = {"yscale": "log", "ylog_ticks": True, "xlabel": "training step", "legend_below": 2}
  panels = []
  for i, title in ((0, "at each arm's tuned rate"), (1, f"at the stress rate η = {stress:g}")):
    drawn = []
    for norm, tr in tracks.items():
      k_ES = np.nanmax(np.stack([np.nanmax(tr["kappa_ERSL"][n][:, i], -1) for n in NORMED]), 0)
      rate = tuned[norm]["learning_rate"] if i == 0 else stress
      drawn.append(median_band(tr["steps_E"], k_ES.T, color=colors[norm],
                               label=f"{norm} (η = {rate:g})"))
    top = max([np.nanmax(band["hi"]) for _, band in drawn if np.isfinite(band["hi"]).any()]
              + [bound])
    near = top > ceiling / 10  # the ceiling is drawn only where readings come near it
    panels.append({**log, "lines": [line for line, _ in drawn],
                   "bands": [band for _, band in drawn],
                   "hlines": [{"y": bound, "color": "k", "style": "--", "lw": 1,
                               "label": f"bound K = 1/u_bf16 = {bound:.0f}"}]
                   + ([{"y": ceiling, "color": "0.5", "style": ":", "lw": 1.5,
                        "label": f"ceiling of the κ_eff reading = {ceiling:.3g}"}] if near else []),
                   "ylabel": "κ_eff = σ₁/σ_k (max over attn_in, ffn_in, layers)",
                   "title": f"κ_eff of the normalized inputs\n{title}"})
  drawn = [median_band(tr["steps_E"], tr["val_RSE"][1], color=colors[norm], label=norm)
           for norm, tr in tracks.items()]
  top = 5 * ln_v  # a diverging run's early losses (hundreds of nats) would flatten the rest
  low = min([2.0] + [0.9 * np.nanmin(tr["val_RSE"][1]) for tr in tracks.values()])
  panels.append({**log, "lines": [line for line, _ in drawn], "bands": [b for _, b in drawn],
                 "hlines": [{"y": ln_v, "color": "k", "style": ":", "lw": 1.5,
                             "label": f"ln V = {ln_v:.2f} (initial loss)"}],
                 "ylim": [float(low), top], "ylabel": "validation loss (nats, log scale)",
                 "title": f"validation loss at the stress rate η = {stress:g}\n"
                          f"(axis cut at {top:.0f} nats)"})
  n_seeds = next(iter(tracks.values()))["final_RS"].shape[1]
  band = f"median over {n_seeds} seeds, band min–max" if n_seeds > 1 else "one seed"
  return {"name": "kappa.png", "size": [15, 5.4], "panels": panels, "suptitle_size": 10,
          "suptitle": f"layernorm-condition: {band}, read every {eval_every} steps on one "
                      "validation batch"}
