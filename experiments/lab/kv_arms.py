"""The `kv-compression` claim's arms on one model: calibrate, fit, evaluate, read the ranks.

`measure_seed` is the claim's whole recipe for one base model (`experiments.claims.kv_compression`
states the protocol): calibration windows from the training split fix the bases, quantization
steps and loss-aware table (`experiments.lab.kvcompress.calibrate`); the 8× allocations, 16×,
32× at 4 bits, the fitted arms (`fit_arms`: `analysis.kv.calibrate`), KIVI-style quantization
and low rank at its bytes are each evaluated on held-out windows; `full_rank_error` is the
exactness control and `kvcompress.rank_vs_context` the rank against context. `goals_on` is the
same recipe for the goal arms (`GOAL_ARMS`) on evaluation windows the caller chooses (the
`python -m experiments.commands.kvgoals` addendum); `notes` writes the report's lines. The sizes
`z` are the claim's `KvCompressionSizes` (read by attribute).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from analysis import kv
from experiments import models
from experiments.lab import edge, kvcompress
from experiments.verdict.arithmetic.stats import mean_ci95
from transformer import latent


def full_rank_error(params, cfg: transformer.Config, tokens_BT, cal=None, *,
                    relative: bool = False) -> float:
  """Max |logit difference| between the model and its latent form at full rank, float32 cache.

  With `relative`, divided by the largest |logit| of the model: float32 rounding grows with
  the logits' scale (a trained model's logits are tens), so the exactness control reads this.

  Args:
    params: model params.
    cfg: model config.
    tokens_BT: the tokens compared on.
    cal: a `kvcompress.Calibration` whose bases are used (calibration text); None: bases
      from `tokens_BT` themselves (at full rank any orthonormal basis is exact).

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.kv_arms import full_rank_error
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> full_rank_error(params, cfg, jax.numpy.zeros((1, 8), int)) < 1e-4
    True
  """
  if cal is None:
    mk, mv = kv.kv_moments(params, cfg, np.asarray(tokens_BT))
    kb, vb = kv.pca_bases(mk)[0], kv.pca_bases(mv)[0]
  else:
    kb, vb = cal.key_basis, cal.value_basis
  full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
  comp = latent.make_compression(kb, vb, full, full, 32)
  B, T = tokens_BT.shape
  cache = latent.init_cache(cfg, comp, B, T)
  got, _ = latent.forward(params, cfg, jnp.asarray(tokens_BT), comp, cache=cache)
  want = transformer.Transformer(cfg).apply({"params": params}, jnp.asarray(tokens_BT))
  err = float(jnp.abs(got - want).max())
  return err / max(float(jnp.abs(want).max()), 1.0) if relative else err


def _metrics(out: dict) -> dict:
  return {"loss_rise": out["loss_rise"], "kv_compression": out["kv_compression"],
          "loss": out["loss"], "loss_full": out["loss_full"]}


def feasible(cfg: transformer.Config, ratio: float, bits: int, log) -> bool:
  """Whether a cache of `ratio`× at `bits` bits keeps at least one coefficient per head; the
  arm is skipped (and logged) where it does not, e.g. 32× at 4 bits on `micro` (Dh 8)."""
  try:
    kv.coefficient_budget(cfg, ratio, bits)
  except ValueError as e:
    log(f"    r{ratio}q{bits}: skipped at this size ({e})")
    return False
  return True


# The calibrated arms: (name, the arm whose compression the fit starts from).
FITTED = (("r16-cal", "r16-loss"), ("r32q4-cal", "r32q4-loss"))


def fit_arms(params, cfg, seed: int, z, comps: dict, *, log) -> dict:
  """Fits the calibrated arms (`FITTED`) from their starting compressions in `comps`.

  Each fit is `analysis.kv.calibrate` on `z.fit_windows` training-split windows of
  `z.fit_len` tokens (`models.windows(seed, ...)`: never the evaluated files), `z.fit_steps`
  Adam steps at `z.fit_learning_rate`. An arm whose start is not in `comps` (infeasible at
  this size) is skipped. The fitted compressions are added to `comps`.

  Returns:
    `{name: seconds the fit took}`, in `FITTED`'s order.
  """
  fit_tokens = models.windows(seed, z.fit_len, z.fit_windows, "train")
  took = {}
  for name, start in FITTED:
    if start not in comps:  # the arm it starts from was infeasible at this size
      continue
    t0 = time.perf_counter()
    comps[name] = jax.block_until_ready(kv.calibrate(
        params, cfg, comps[start], fit_tokens, z.fit_steps, learning_rate=z.fit_learning_rate,
        batch_size=z.fit_batch))
    took[name] = time.perf_counter() - t0
    log(f"    {name}: fitted in {took[name]:.0f} s ({z.fit_steps} Adam steps)")
  return took


def eval_split(z) -> str:
  """The split `z`'s reported arms are read on (`z.split`; `heldout` for sizes without one)."""
  return getattr(z, "split", "heldout")


def tune_split(z) -> str:
  """The split the fit's rate is tuned on: `val` when the verdict reads `test` (v4 on), else
  the `heldout` windows the earlier versions tuned and read on."""
  return "val" if eval_split(z) == "test" else "heldout"


def tune_fit_rate(z, seeds, *, extend: int = 1, log) -> dict:
  """The fit's Adam rate, chosen on tuning seed(s) `seeds` (never a reported one) at `z.model`.

  Every rate of `z.fit_rates` fits the 16× loss-aware cache of each tuning seed's base model as
  `fit_arms` does (its training-split windows); the chosen rate has the lowest 16× loss rise,
  averaged over the tuning seeds, on their `tune_split(z)` windows (`val` when the verdict
  reads `test`), and a best rate at an edge of the grid extends it by one step (`edge.Search`,
  `extend` times).

  Args:
    z: the claim's sizes.
    seeds: one tuning seed (an int, as v1-v3 registered) or several.
    extend: the edge rule's extensions.
    log: progress lines.

  Returns:
    The one tuning record, `edge.Tuned.to_dict()` (`"learning_rate"`, `"grid"`, `"losses"`:
    the mean 16× loss rise per rate, `"losses_by_seed"` with several seeds, `"at_edge"`,
    `"seeds"`, ...); None where a 16× cache cannot exist (fewer coefficients than heads, e.g.
    `llama-micro-20`): nothing to fit.
  """
  if not feasible(models.config(z.model), 16, 16, log):
    return None
  seeds = (seeds,) if isinstance(seeds, int) else tuple(seeds)
  setups = []
  for seed, (params, cfg) in zip(seeds, models.base_models(z.model, seeds), strict=True):
    cal = kvcompress.calibrate(params, cfg, models.windows(seed, z.seq_len, z.n_calibration,
                                                           "train"),
                               grid=z.loss_grid, cost_windows=z.cost_windows)
    ev = models.windows(seed, z.seq_len, z.n_eval, tune_split(z))
    setups.append((seed, params, cfg, kvcompress.compression(params, cfg, cal, 16, "loss", 16),
                   models.windows(seed, z.fit_len, z.fit_windows, "train"), ev,
                   kvcompress.full_nll(params, cfg, ev)))
  by_rate: dict[float, list[float]] = {}
  search = edge.Search(z.fit_rates, extend=extend, name="tune_fit_rate")
  for rates in search:
    rise = []
    for lr in rates:
      by_rate[lr] = []
      for seed, params, cfg, start, fit_tokens, ev, nll_full in setups:
        comp = kv.calibrate(params, cfg, start, fit_tokens, z.fit_steps, learning_rate=lr,
                            batch_size=z.fit_batch)
        by_rate[lr].append(float(kvcompress.evaluate(params, cfg, comp, ev,
                                                     nll_full=nll_full)["loss_rise"]))
        log(f"    tuning the fit (seed {seed}): rate {lr:.3g}, 16× loss rise "
            f"{by_rate[lr][-1]:+.3%}")
      rise.append(float(np.mean(by_rate[lr])))
    search.record(rise, [False] * len(rates))
  t = search.tuned()
  per_seed = tuple(tuple(by_rate[g]) for g in t.grid) if len(seeds) > 1 else ()
  return dataclasses.replace(t, seeds=seeds, losses_by_seed=per_seed).to_dict()


# The arms of the issue-23 goals, as `goals_on` measures them: (name, ratio, bits); the
# `-cal` arms are fitted from the arm before them (`FITTED`).
GOAL_ARMS = (("r8-loss", 8, 16), ("r16-loss", 16, 16), ("r16-cal", 16, 16),
             ("r32q4-loss", 32, 4), ("r32q4-cal", 32, 4))


def goals_on(params, cfg, seed: int, z, tokens, *, log=print) -> dict:
  """The goal arms' metrics (`GOAL_ARMS`) on evaluation windows the caller chooses.

  The claim's recipe exactly (`measure_seed`): the bases, quantization steps and loss-aware
  table come from `z.n_calibration` training-split windows of `z.seq_len` tokens for `seed`,
  the `-cal` arms are fitted by `fit_arms`, and only the evaluated text differs: `tokens`
  (e.g. `experiments.commands.kvgoals.prose_windows`, text no base model trained on). The
  calibration and fit windows come from the stdlib training split, so they never overlap a
  held-out file.

  Args:
    params, cfg: the model.
    seed: the model's seed (picks the calibration and fit windows, as in the claim).
    z: the claim's sizes at this length (`FULL`, or `at_length(FULL, T)`).
    tokens: `(B, T + 1)` evaluation windows.
    log: progress lines.

  Returns:
    `{arm: {"loss_rise", "kv_compression", "loss", "loss_full"[, "fit_s"]}}`; an arm that
    does not fit this model (32× at 4 bits with under one coefficient per head) is absent.
  """
  cal_tokens = models.windows(seed, z.seq_len, z.n_calibration, "train")
  cal = kvcompress.calibrate(params, cfg, cal_tokens, grid=z.loss_grid,
                             cost_windows=z.cost_windows)
  comps = {name: kvcompress.compression(params, cfg, cal, ratio, "loss", bits)
           for name, ratio, bits in GOAL_ARMS
           if name.endswith("-loss") and feasible(cfg, ratio, bits, log)}
  took = fit_arms(params, cfg, seed, z, comps, log=log)
  nll_full = kvcompress.full_nll(params, cfg, tokens)
  runs = {}
  for name, _, _ in GOAL_ARMS:
    if name in comps:
      runs[name] = _metrics(kvcompress.evaluate(params, cfg, comps[name], tokens,
                                                nll_full=nll_full))
      if name in took:
        runs[name]["fit_s"] = took[name]
      log(f"    {name}: ratio {runs[name]['kv_compression']:.2f}, loss rise "
          f"{runs[name]['loss_rise']:+.3%}")
  return runs


def short_windows(z) -> int:
  """Evaluation windows at `z.short_len`: `z.n_short` where the sizes set it, else `z.n_eval`."""
  return getattr(z, "n_short", None) or z.n_eval


def measure_seed(params, cfg, seed: int, z, *, log) -> tuple[dict, dict]:
  """Every arm's metrics for one model (the claim's docstring lists them) and the ranks chosen."""
  runs, ranks = {}, {}
  cal_tokens = models.windows(seed, z.seq_len, z.n_calibration, "train")
  ev = models.windows(seed, z.seq_len, z.n_eval, eval_split(z))
  ev_short = models.windows(seed, z.short_len, short_windows(z), eval_split(z))
  cal = kvcompress.calibrate(params, cfg, cal_tokens, grid=z.loss_grid,
                             cost_windows=z.cost_windows)
  nll_full = kvcompress.full_nll(params, cfg, ev)
  comps = {}

  def comp_eval(name, ratio, alloc, bits, tokens=ev, nll=nll_full):
    if name not in comps:
      comps[name] = kvcompress.compression(params, cfg, cal, ratio, alloc, bits)
    comp = comps[name]
    out = kvcompress.evaluate(params, cfg, comp, tokens, nll_full=nll)
    runs[name] = _metrics(out)
    ranks[name] = {"key": out["key_ranks"], "value": out["value_ranks"],
                   "payoff_tokens": out["payoff_tokens"], "basis_bytes": out["basis_bytes"]}
    log(f"    {name}: ratio {out['kv_compression']:.2f}, loss rise {out['loss_rise']:+.3%}")

  exact_tokens = ev[:z.exact_windows, :-1]
  runs["exact"] = {"max_logit_error": full_rank_error(params, cfg, exact_tokens, cal),
                   "max_logit_error_rel": full_rank_error(params, cfg, exact_tokens, cal,
                                                          relative=True)}
  for alloc in z.allocs:
    comp_eval(f"r8-{alloc}", 8, alloc, 16)
  if feasible(cfg, 32, 4, log):
    comp_eval("r32q4-loss", 32, "loss", 4)
  if feasible(cfg, 16, 16, log):
    comp_eval("r16-loss", 16, "loss", 16)
  for name, fit_s in fit_arms(params, cfg, seed, z, comps, log=log).items():
    comp_eval(name, None, None, None)
    runs[name]["fit_s"] = fit_s
  for bits in z.kivi_bits:
    k = kvcompress.evaluate_kivi(params, cfg, ev, bits, nll_full=nll_full)
    runs[f"kivi{bits}"] = _metrics(k)
    log(f"    kivi{bits}: ratio {k['kv_compression']:.2f}, loss rise {k['loss_rise']:+.3%}")
    comp_eval(f"rank@kivi{bits}", k["kv_compression"], "loss", 16)
  comps["short-r8-loss"] = comps["r8-loss"]  # the same compression, read at a shorter length
  comp_eval("short-r8-loss", 8, "loss", 16, ev_short, kvcompress.full_nll(params, cfg, ev_short))
  lengths = z.context_lengths
  ctx = kvcompress.rank_vs_context(params, cfg, cal_tokens[:, :-1], lengths)
  runs["context"] = {f"{kind}_rank99_T{T}": v[f"{kind}_mean"] for T, v in ctx.items()
                     for kind in ("key", "value")}
  runs["context"]["key_rank99_growth"] = ctx[lengths[-1]]["key_mean"] - ctx[lengths[0]]["key_mean"]
  runs["context"]["key_rank99_max"] = float(max(v["key_max"] for v in ctx.values()))
  return runs, ranks


_SPLIT_WORDS = {"heldout": "validation-file", "test": "test-split"}


def notes(runs: dict, chosen: dict, z, cfg: transformer.Config, seeds) -> list:
  """The report's notes on the arms: sentences, ending in a table of every arm declared as data
  (`verdict.render.findings` renders both).

  `runs` are `measure_seed`'s metrics (`{arm: {seed: metrics}}`) over `seeds`, `chosen` its
  ranks (`{seed: ranks}`), `z` the claim's sizes and `cfg` the model's config.
  """
  s0 = seeds[0]
  lengths = z.context_lengths

  def mean(arm, metric):
    return float(np.mean([runs[arm][s][metric] for s in seeds]))

  table = {"header": ["arm", "measured ratio", "loss rise (mean over seeds)"],
           "rows": [[a, f"{mean(a, 'kv_compression'):.2f}", f"{mean(a, 'loss_rise'):+.3%}"]
                    for a in runs if "kv_compression" in runs[a][s0]]}
  trained_T = models.RECIPES[z.model].seq_len
  return [
      f"Models: the shared `{z.model}` models (trained at T = {trained_T}, max_len "
      f"{cfg.max_len}); per seed {z.n_calibration} training-split calibration windows of "
      f"{z.seq_len} tokens (bases, quantization steps; the first {z.cost_windows} also the "
      f"loss-aware table, {z.loss_grid} ranks per head) and {z.n_eval} "
      f"{_SPLIT_WORDS.get(eval_split(z), eval_split(z))} windows of {z.seq_len} tokens (and "
      f"{short_windows(z)} of {z.short_len} for the loss rise against context); calibration and "
      "evaluation files are disjoint.",
      "Allocations at 8× (16-bit coefficients): " + ", ".join(
          f"{a} {mean(f'r8-{a}', 'loss_rise'):+.2%}" for a in z.allocs) + ".",
      (f"32× with 4-bit coefficients (loss-aware): {mean('r32q4-loss', 'loss_rise'):+.2%} at "
       f"a measured {mean('r32q4-loss', 'kv_compression'):.2f}×." if "r32q4-loss" in runs else
       "32× with 4-bit coefficients: not possible at this size (fewer than one coefficient "
       "per head)."),
      *([f"Fitted projections (`analysis.kv.calibrate`: {z.fit_steps} Adam steps at "
         f"{z.fit_learning_rate:g} on {z.fit_windows} training-split windows of {z.fit_len} "
         f"tokens, {z.fit_batch} per step, from the SVD bases): 16× "
         f"{mean('r16-loss', 'loss_rise'):+.2%} (SVD) → "
         f"{mean('r16-cal', 'loss_rise'):+.2%} (fitted, {mean('r16-cal', 'fit_s'):.0f} s per "
         "seed)" + (f"; 32× 4-bit {mean('r32q4-loss', 'loss_rise'):+.2%} → "
                    f"{mean('r32q4-cal', 'loss_rise'):+.2%} ({mean('r32q4-cal', 'fit_s'):.0f} s)"
                    if "r32q4-cal" in runs else "") + "."] if "r16-cal" in runs else []),
      "Equal bytes, KIVI-style quantization vs the loss-aware low-rank cache: " + "; ".join(
          f"{b}-bit KIVI {mean(f'kivi{b}', 'kv_compression'):.2f}× "
          f"{mean(f'kivi{b}', 'loss_rise'):+.2%} vs rank "
          f"{mean(f'rank@kivi{b}', 'kv_compression'):.2f}× "
          f"{mean(f'rank@kivi{b}', 'loss_rise'):+.2%}" for b in z.kivi_bits) + ".",
      f"The 8× loss-aware compression read at T = {z.short_len}: "
      f"{mean('short-r8-loss', 'loss_rise'):+.2%} (T = {z.seq_len}: "
      f"{mean('r8-loss', 'loss_rise'):+.2%}).",
      "Rank for 99% of the key energy (mean head) vs context: " + ", ".join(
          f"T={T}: {mean('context', f'key_rank99_T{T}'):.1f}" for T in lengths)
      + f" of {cfg.d_head}; values: " + ", ".join(
          f"T={T}: {mean('context', f'value_rank99_T{T}'):.1f}" for T in lengths) + ".",
      f"Loss-aware ranks chosen at 8× (seed {s0}, keys per layer × head): "
      f"{chosen[s0]['r8-loss']['key']}; values {chosen[s0]['r8-loss']['value']}; the bases "
      f"cost {chosen[s0]['r8-loss']['basis_bytes']} bytes and pay off after "
      f"{chosen[s0]['r8-loss']['payoff_tokens']:.0f} tokens of one sequence.",
      {"table": table},
  ]


def figure(runs: dict, seeds, z, d_head: int) -> dict:
  """`kv_compression.png`, declared as data: each arm's loss rise against its measured ratio
  (95% intervals), and the rank that holds 99% of the energy against the context length.

  `runs` are `measure_seed`'s metrics (`{arm: {seed: metrics}}`) over `seeds`, `z` the claim's
  sizes and `d_head` the model's head width.
  """
  mean = lambda arm, metric, scale=1.0: scale * float(np.mean([runs[arm][s][metric]
                                                                for s in seeds]))

  def interval(arm):
    m, ci = mean_ci95([100 * runs[arm][s]["loss_rise"] for s in seeds])
    return [m - ci[0], ci[1] - m] if ci else [0.0, 0.0]

  def label(arm):
    if arm.startswith("kivi"):
      return f"{arm[4:]}-bit"
    if arm.startswith("rank@kivi"):
      return f"at {arm[9:]}-bit bytes"
    return {"short-r8-loss": f"loss-aware, T = {z.short_len}", "r16-loss": "SVD",
            "r32q4-loss": "SVD", "r16-cal": "fitted", "r32q4-cal": "fitted"}.get(
        arm, arm.split("-")[-1].replace("loss", "loss-aware"))

  groups = (("low rank, 16-bit", [f"r8-{a}" for a in z.allocs] + ["short-r8-loss", "r16-loss"],
             "o"),
            ("low rank + 4-bit", ["r32q4-loss"], "s"),
            ("fitted projections", ["r16-cal", "r32q4-cal"], "D"),
            ("KIVI-style quantization", [f"kivi{b}" for b in z.kivi_bits], "x"),
            ("low rank at KIVI's bytes", [f"rank@kivi{b}" for b in z.kivi_bits], "^"))
  lines, notes = [], []
  for name, arms, marker in groups:
    arms = [a for a in arms if a in runs]  # 16× and 32× cannot exist on the narrowest models
    if not arms:
      continue
    spread = np.linspace(-0.06, 0.06, len(arms)) if len(arms) > 1 else [0.0]
    xs = [mean(a, "kv_compression") * float(np.exp(d)) for a, d in zip(arms, spread,
                                                                      strict=True)]
    ys = [mean(a, "loss_rise", 100) for a in arms]
    lines.append({"x": xs, "y": ys, "yerr": np.array([interval(a) for a in arms]).T.tolist(),
                  "style": marker, "label": name})
    left = name.startswith("KIVI")
    notes += [{"text": label(a), "xy": [x, y], "ha": "right" if left else "left",
               "offset": [-6 if left else 6, -11 if a == "short-r8-loss" else 0]}
              for a, x, y in zip(arms, xs, ys, strict=True)]  # short-r8-loss: below r8-loss
  ticks, lengths = [2, 4, 8, 16, 32, 64], list(z.context_lengths)
  loss = {"lines": lines, "annotations": notes, "xscale": "log", "legend": 7,
          "hlines": [{"y": 1, "color": "k", "style": ":", "label": "1% (primary margin)"},
                     {"y": 2, "color": "0.5", "style": "--", "label": "2% (32× extensions)"}],
          "xticks": ticks, "xticklabels": [str(t) for t in ticks],
          "xlabel": "measured compression vs a 16-bit K/V cache (×, log scale)",
          "ylabel": "held-out loss rise (% of uncompressed)",
          "title": f"loss vs cache size, T = {z.seq_len} ({len(seeds)} seed(s); bars: 95% CI)"}
  rank = {"lines": [{"x": lengths, "y": [mean("context", f"{kind}_rank99_T{T}") for T in lengths],
                     "style": "o-", "label": f"{kind}s"} for kind in ("key", "value")],
          "xscale": "log", "xticks": lengths, "xticklabels": [str(T) for T in lengths],
          "xlabel": "context length T (tokens, log scale)",
          "ylabel": f"rank for 99% of the energy (mean head, of {d_head})",
          "title": "rank needed vs context (calibration text)", "legend": 7}
  return {"name": "kv_compression.png", "size": [11, 4.2], "panels": [loss, rank]}
