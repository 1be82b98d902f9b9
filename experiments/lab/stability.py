"""Stability measurements: eigenvalues at depth, norms and conditioning, the logit certificate.

The measurement cores of three claims (`residual-eigenvalues`, `layernorm-condition`,
`eigenvalue-constrained`); the claim modules wrap them. Each core returns a dict of plain
floats and lists (JSON-ready).

* `depth_point` / `depth_sweep`: at initialisation, each layer's causal Jacobian eigenvalues
  (exact, from its diagonal blocks) and `max |λ − 1|`, against the end-to-end Jacobian's largest
  singular value, for pre-norm with residuals, pre-norm without residuals, and post-norm.
* `condition_profile`: the effective condition number of each projection's input, read from
  the sown `attn_in` (into `w_q, w_k, w_v`), `ffn_in` (into `w_1`, `w_gate`) and `ffn_hidden`
  (into `w_2`). `norm_condition_run` tracks it through training for one norm.
* `logit_certificate`: `analysis.logit_bound` against the measured largest attention logit;
  `logit_bound_run` tracks both through training with `optim.spectral_cap` on `W_Q`, `W_K`.

Quick numbers (about a minute on 2 CPU cores): `python -m experiments.lab.stability`.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

import analysis
import optim
import transformer
from experiments import data
from experiments.train.step import TrainState, loss_fn, train_step
from experiments.train.step import adamw as house_adamw
from transformer.linalg import serial
from transformer.model import param_tree

DEPTHS = (1, 2, 4, 8, 16, 32, 64, 128)

# The depth-sweep arms: the changes each makes to the base config.
ARMS: dict[str, dict] = {
    "pre": dict(norm_position="pre", residual=True),
    "pre-no-residual": dict(norm_position="pre", residual=False),
    "post": dict(norm_position="post", residual=True),
}

# Each projection's input, as sown by the model (`blocks/attn/attn_in`, ...).
PROJECTION_INPUTS = {"attn_in": ("attn", "w_q, w_k, w_v"), "ffn_in": ("ffn", "w_1, w_gate"),
                     "ffn_hidden": ("ffn", "w_2")}

# ----------------------------------------------------------------- eigenvalues at depth


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len", "full_max_size"))
def _depth_arrays(cfg: transformer.Config, key: jax.Array, seq_len: int, full_max_size: int):
  k_init, k_tokens = jax.random.split(key)
  params = transformer.init(cfg, k_init)
  tokens_T = jax.random.randint(k_tokens, (seq_len,), 0, cfg.vocab_size)
  return _spectra(cfg, params, tokens_T, full_max_size)


@functools.partial(jax.jit, static_argnames=("cfg", "full_max_size"))
def _spectra(cfg: transformer.Config, params, tokens_T: jax.Array, full_max_size: int):
  x_TD = analysis.stream_input(params, cfg, tokens_T)
  blocks = params["blocks"]
  xs_LTD = analysis.layer_inputs(cfg, blocks, x_TD)
  f = transformer.block_fn(cfg)

  def per_layer(args):
    p, x = args
    J_TDD = analysis.causal_jacobian_blocks(lambda z: f(p, z), x)
    lam_TD = serial.eigvals(J_TDD)
    s_TD = serial.svd(J_TDD, compute_uv=False)
    return jnp.max(jnp.abs(lam_TD - 1)), jnp.max(jnp.abs(lam_TD)), jnp.max(s_TD[:, 0])

  dist_L, rho_L, block_sigma_L = jax.lax.map(per_layer, (blocks, xs_LTD))
  g = analysis.stack_fn(cfg)
  end = lambda z: g(blocks, z)
  if x_TD.size <= full_max_size:
    J = jax.jacfwd(end)(x_TD).reshape(x_TD.size, x_TD.size)
    e2e = serial.svd(J, compute_uv=False)[0]
  else:
    e2e = analysis.jacobian_top_singular_values(end, x_TD, 1).values[0]
  out_TD = end(x_TD)
  return {"dist_from_one": dist_L, "spectral_radius": rho_L, "block_sigma_max": block_sigma_L,
          "e2e_sigma_max": e2e, "stream_rms_in": jnp.sqrt(jnp.mean(x_TD**2)),
          "stream_rms_out": jnp.sqrt(jnp.mean(out_TD**2))}


def depth_point(cfg: transformer.Config, seed: int, *, seq_len: int = 8,
                full_max_size: int = 2048) -> dict:
  """Eigenvalues and singular values of every layer's Jacobian, and the end-to-end one, at init.

  The model is `transformer.init(cfg, ·)` at `seed`; the point is the stream of `seq_len`
  random tokens. Layer `l`'s Jacobian `J_l = ∂x_{l+1}/∂x_l` is taken at its own input `x_l`.

  Args:
    cfg: model config (`n_layers`, `residual`, `norm_position` are what the sweep varies).
    seed: seed of the init and of the tokens.
    seq_len: tokens `T`.
    full_max_size: dense end-to-end Jacobian up to `T·D` this large, matrix-free above.

  Returns:
    `dist_from_one (L,)` `max |λ(J_l) − 1|`, `spectral_radius (L,)`, `block_sigma_max (L,)`
    `max_t σ_max(∂y_t/∂x_t)`, as lists; scalars `max_dist_from_one`, `mean_dist_from_one`,
    `e2e_sigma_max` (`σ_max` of `J_{L-1} ⋯ J_0`), `stream_rms_in`, `stream_rms_out`.

  Example:
    >>> import transformer
    >>> from experiments.lab.stability import depth_point
    >>> cfg = transformer.Config(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=8)
    >>> out = depth_point(cfg, seed=0, seq_len=4)
    >>> len(out["dist_from_one"]), 0 < out["max_dist_from_one"] < 1  # one value per layer
    (2, True)
  """
  a = jax.device_get(_depth_arrays(cfg, jax.random.key(seed), seq_len, full_max_size))
  out = {k: (v.tolist() if np.ndim(v) else float(v)) for k, v in a.items()}
  out["max_dist_from_one"] = float(np.max(a["dist_from_one"]))
  out["mean_dist_from_one"] = float(np.mean(a["dist_from_one"]))
  return out


def trained_point(cfg: transformer.Config, params, tokens_T, *, full_max_size: int = 2048) -> dict:
  """`depth_point`'s measurements on given (e.g. trained) `params` at the stream of `tokens_T`.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.stability import depth_point, trained_point
    >>> cfg = transformer.Config(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=8)
    >>> k_init, k_tokens = jax.random.split(jax.random.key(0))
    >>> tokens = jax.random.randint(k_tokens, (4,), 0, 32)
    >>> out = trained_point(cfg, transformer.init(cfg, k_init), tokens)
    >>> abs(out["max_dist_from_one"] - depth_point(cfg, 0, seq_len=4)["max_dist_from_one"]) < 1e-4
    True
  """
  a = jax.device_get(_spectra(cfg, params, jnp.asarray(tokens_T), full_max_size))
  out = {k: (v.tolist() if np.ndim(v) else float(v)) for k, v in a.items()}
  out["max_dist_from_one"] = float(np.max(a["dist_from_one"]))
  out["min_dist_from_one"] = float(np.min(a["dist_from_one"]))
  out["mean_dist_from_one"] = float(np.mean(a["dist_from_one"]))
  return out


def depth_sweep(base: transformer.Config, seed: int, *, depths=DEPTHS, arms=None,
                seq_len: int = 8) -> dict[str, dict[int, dict]]:
  """`depth_point` for every arm (default `ARMS`) and depth: `{arm: {L: metrics}}`.

  Example:
    >>> import transformer
    >>> from experiments.lab.stability import depth_sweep
    >>> base = transformer.Config(vocab_size=32, d_model=8, n_layers=1, n_heads=2, max_len=8)
    >>> out = depth_sweep(base, 0, depths=(1, 2), arms={"pre": {}}, seq_len=4)
    >>> sorted(out["pre"])
    [1, 2]
  """
  arms = ARMS if arms is None else arms
  return {arm: {L: depth_point(base.replace(n_layers=L, **changes), seed, seq_len=seq_len)
                for L in depths} for arm, changes in arms.items()}


# ------------------------------------------------------------------ per-step measurements


def intermediates(params, cfg: transformer.Config, tokens_BT: jax.Array) -> dict:
  """The sown intermediates of `blocks` in one forward pass, e.g. `["attn"]["scores"] (L, ...)`."""
  _, state = transformer.Transformer(cfg).apply({"params": param_tree(params)}, tokens_BT,
                                                mutable=["intermediates"])

  def unwrap(tree):  # `sow` stores a tuple of one value per call
    return tree[0] if isinstance(tree, tuple) else {k: unwrap(v) for k, v in tree.items()}

  return unwrap(state["intermediates"]["blocks"])


@functools.partial(jax.jit, static_argnames=("center", "rtol"))
def _effective_condition(X, center: bool, rtol: float | None = None):
  return analysis.effective_condition(X, center=center, rtol=rtol)


def input_conditions(blocks, *, center: bool, names=tuple(PROJECTION_INPUTS),
                     float64: bool = False, null=None) -> dict[str, dict[str, jax.Array]]:
  """Effective condition number of each projection's input, per layer: the one measure.

  The `B·T` rows of each sown input (`PROJECTION_INPUTS`) form `X (B·T, width)`, and
  `analysis.effective_condition(X, center=center)` gives `κ_eff` with the number of dropped
  zero singular values (one for LayerNorm with zero bias: the all-ones direction).

  In float32 a singular value below `max(N, D)·eps₃₂·σ_1` counts as zero, so `κ_eff` cannot
  exceed `1/(max(N, D)·eps₃₂)`, 4,096 for `N = 16·128` rows (`kappa_ceiling`): a reading near
  it is saturated (`kappa_saturated`), not measured. `float64=True` reads the same float32
  inputs with the SVD in float64 (`jax.enable_x64`; outside `jit` only) and a tolerance set by
  the inputs' own float32 rounding (`rounding_rtol`), not by the SVD's.

  Args:
    blocks: the sown `intermediates["blocks"]` with `sow`'s tuples unwrapped; any leading
      axes (runs of a sweep) come before `(L, B, T, width)`.
    center: centre the rows of `X` first (see `analysis.effective_condition`).
    names: the inputs to measure (keys of `PROJECTION_INPUTS`; default all). `ffn_hidden`
      is the widest (`d_ff` columns), so its SVD costs the most.
    float64: the float64 path, for `layernorm-condition` v3 (issue 47 item 5): RMSNorm's
      `κ_eff` 3,987 of v2 sits at the float32 ceiling with 7 values dropped.
    null: float64 only, `{NAME: v (..., L, width)}`: a structural zero's direction per layer
      (LayerNorm's `1/scale`), projected out first (float32 leaves it near `eps₃₂·σ_1`).

  Returns:
    `{NAME: {"kappa_eff": (..., L), "n_dropped": (..., L)}}` for NAME in `names`.
  """
  unknown = sorted(set(names) - set(PROJECTION_INPUTS))
  if unknown:
    raise ValueError(f"input_conditions: {unknown} are not projection inputs. Fix: choose from "
                     f"{sorted(PROJECTION_INPUTS)}.")
  if null and not float64:
    raise ValueError("input_conditions: null= acts on the float64 path. Fix: float64=True.")
  out = {}
  for name in names:
    sub, _ = PROJECTION_INPUTS[name]
    X = blocks[sub][name].astype(jnp.float32)
    X = X.reshape(*X.shape[:-3], -1, X.shape[-1])
    cond = (_conditions64(X, center, (null or {}).get(name)) if float64
            else _effective_condition(X, center))
    out[name] = {"kappa_eff": cond["kappa_eff"], "n_dropped": cond["n_dropped"]}
  return out


def rounding_rtol(shape) -> float:
  """The relative size below which a singular value of float32-stored `X (N, D)` cannot be told
  from the rounding of its entries: `√min(N, D)·eps₃₂/2`.

  Rounding moves each entry by at most `eps₃₂/2` of itself, a perturbation `E` with
  `‖E‖₂ ≤ ‖E‖_F ≤ (eps₃₂/2)‖X‖_F ≤ (eps₃₂/2)√min(N, D)·σ_1`, and by Weyl's inequality no
  singular value moves by more than `‖E‖₂`. It is the float64 path's tolerance: the SVD's own
  error (`max(N, D)·eps₆₄`) is far below it, so the ceiling is the data's, not the algorithm's
  (with `center`, relative to the uncentred `σ_1`: loose when the mean row dominates).

  Example:
    >>> from experiments.lab.stability import rounding_rtol
    >>> round(1 / rounding_rtol((16 * 128, 32)))  # the float64 path's κ ceiling, D = 32
    2965821
  """
  return math.sqrt(min(shape[-2:])) * float(jnp.finfo(jnp.float32).eps) / 2


def _conditions64(X, center: bool, v=None) -> dict:
  if isinstance(X, jax.core.Tracer):
    raise ValueError("input_conditions(float64=True) switches on float64 and cannot run inside "
                     "jit or vmap. Fix: call it on concrete arrays (jax.device_get first).")
  rtol, X = rounding_rtol(X.shape), np.asarray(X, np.float64)
  if v is not None:  # X (..., N, D) minus its component along the unit direction v (..., D)
    v = np.asarray(v, np.float64) / np.linalg.norm(v, axis=-1, keepdims=True)
    X = X - (X @ v[..., :, None]) * v[..., None, :]
  with jax.enable_x64(True):
    cond = _effective_condition(jnp.asarray(X, jnp.float64), center, rtol)
    return {k: np.asarray(v) for k, v in cond.items()}


def kappa_ceiling(shape, dtype=jnp.float32, rtol: float | None = None) -> float:
  """The largest condition number an SVD of `shape` in `dtype` reports: `1/rtol`, with
  `analysis.effective_condition`'s default `rtol = max(N, D)·eps` (4,096 for float32 and
  `N = 2,048` rows); `rtol = eps` gives the plain `κ` of a matrix (8.4e6 in float32).

  Example:
    >>> from experiments.lab.stability import kappa_ceiling
    >>> round(kappa_ceiling((2048, 32))), round(kappa_ceiling((4, 4), rtol=2.0**-23))
    (4096, 8388608)
  """
  return 1.0 / (rtol if rtol is not None else max(shape[-2:]) * float(jnp.finfo(dtype).eps))


def kappa_saturated(kappa, shape, dtype=jnp.float32, *, rtol: float | None = None,
                    factor: float = 0.25) -> np.ndarray:
  """Whether each `κ` is within `factor` of the largest value its SVD can report
  (`kappa_ceiling`): a lower bound, not a measurement, recomputed in float64
  (`input_conditions(float64=True)`, `layernorm-condition` v3) or declared censored.

  Args:
    kappa: condition numbers (any shape); NaN counts as not saturated.
    shape: the `(N, D)` of the matrices they were read from.
    dtype: the dtype the SVD ran in.
    rtol: the tolerance it dropped singular values at (None: `max(N, D)·eps`).
    factor: how close to the ceiling counts as saturated.

  Example:
    >>> from experiments.lab.stability import kappa_saturated
    >>> kappa_saturated([118.1, 3987.0], (2048, 32)).tolist()  # layernorm-condition v2
    [False, True]
  """
  return np.asarray(kappa, np.float64) >= factor * kappa_ceiling(shape, dtype, rtol)


def condition_profile(params, cfg: transformer.Config, tokens_BT: jax.Array, *,
                      center: bool | None = None) -> dict[str, jax.Array]:
  """`input_conditions` of one forward pass of `params` on `tokens_BT` (jit- and vmap-able).

  `center` defaults to `cfg.use_bias`: the projections then have biases that absorb the mean
  row.

  Returns:
    `{NAME/kappa_eff: (L,), NAME/n_dropped: (L,)}` for NAME in `PROJECTION_INPUTS`.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.stability import condition_profile
    >>> cfg = transformer.Config(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=16)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
    >>> condition_profile(params, cfg, tokens)["attn_in/n_dropped"].tolist()  # LayerNorm
    [1, 1]
  """
  conds = input_conditions(intermediates(params, cfg, tokens_BT),
                           center=cfg.use_bias if center is None else center)
  return {f"{name}/{k}": v for name, c in conds.items() for k, v in c.items()}


def logit_certificate(params, cfg: transformer.Config, tokens_BT: jax.Array) -> dict:
  """The certified logit bound against the measured largest logit, per layer and head.

  Returns:
    `bound (L, H)`, `measured (L, H)`, `ratio` `max(measured / bound)` (`≤ 1` when the
    certificate holds), `bound_max`, `measured_max`.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab.stability import logit_certificate
    >>> cfg = transformer.Config(vocab_size=32, d_model=8, n_layers=2, n_heads=2, max_len=16)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
    >>> bool(logit_certificate(params, cfg, tokens)["ratio"] <= 1)
    True
  """
  bound = analysis.logit_bound(params, cfg)
  measured = analysis.max_logit(intermediates(params, cfg, tokens_BT)["attn"]["scores"])
  return {"bound": bound, "measured": measured, "ratio": jnp.max(measured / bound),
          "bound_max": jnp.max(bound), "measured_max": jnp.max(measured)}


# ------------------------------------------------------------------------- training runs


def adamw(learning_rate: float, steps: int, *, warmup_steps: int = 0, weight_decay: float = 0.1,
          cap: float | None = None, cap_names=("w_q", "w_k")) -> optax.GradientTransformation:
  """AdamW on a warm-up + cosine schedule, no gradient clipping (it would hide divergence).

  With `cap`, `optim.spectral_cap(cap)` follows on the matrices named `cap_names` (exact SVD,
  so the cap, and with it `analysis.logit_bound`, holds after every step).
  """
  if warmup_steps:
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup_steps,
                                                  max(steps, warmup_steps + 1), 0.1 * learning_rate)
  else:
    schedule = optax.cosine_decay_schedule(learning_rate, max(steps, 1), 0.1)
  tx = house_adamw(schedule, weight_decay=weight_decay, decay="all")
  if cap is None:
    return tx
  return optax.chain(tx, optim.spectral_cap(cap, mask=optim.select(names=cap_names),
                                            method="svd"))


def text_batches(seq_len: int, batch_size: int, seed: int, spec: str = "stdlib") -> Callable:
  """`step -> tokens (B, T+1)` from `experiments.data` (pure in `(seed, step)`)."""
  src = data.text_source(spec, seq_len)
  return lambda step: src.batch(seed, step, batch_size).tokens


def train_tracked(cfg: transformer.Config, tx: optax.GradientTransformation, seed: int,
                  batches: Callable[[int], np.ndarray], *, steps: int, measure_every: int,
                  measure: Callable, eval_tokens: np.ndarray, diverge_loss: float = 20.0) -> dict:
  """Train `cfg` with `tx` and call `measure(params, eval_tokens)` every `measure_every` steps.

  A run stops as diverged when the loss is non-finite or exceeds `diverge_loss` nats.

  Returns:
    `{"steps": [...], "loss": [...] (train loss at the measured steps), "metrics": [measure
    output as lists], "final_loss", "diverged", "steps_done"}`.
  """
  model = transformer.Transformer(cfg)
  params = transformer.init(cfg, jax.random.key(seed))
  opt_state = tx.init(params)

  @jax.jit
  def step_fn(params, opt_state, tokens_BT1):
    weights_BT = jnp.ones((tokens_BT1.shape[0], tokens_BT1.shape[1] - 1))
    state = TrainState(jnp.zeros((), jnp.int32), params, opt_state)
    state, metrics = train_step(state, tokens_BT1, weights_BT, model=model, tx=tx)
    return state.params, state.opt_state, metrics["loss"]

  eval_tokens = jnp.asarray(eval_tokens)
  measure_jit = jax.jit(measure)
  eval_loss = jax.jit(lambda p: loss_fn(p, model, eval_tokens, jnp.ones(
      (eval_tokens.shape[0], eval_tokens.shape[1] - 1))))
  history = {"steps": [], "loss": [], "metrics": []}

  def record(step, loss):
    history["steps"].append(step)
    history["loss"].append(float(loss))
    m = jax.device_get(measure_jit(params, eval_tokens[:, :-1]))
    history["metrics"].append(jax.tree.map(lambda v: np.asarray(v).tolist(), m))

  record(0, eval_loss(params))
  diverged, step = False, 0
  for step in range(1, steps + 1):
    params, opt_state, loss = step_fn(params, opt_state, jnp.asarray(batches(step - 1)))
    if step % measure_every == 0 or step == steps:
      loss = float(loss)
      if not math.isfinite(loss) or loss > diverge_loss:
        diverged = True
        history["steps"].append(step)
        history["loss"].append(loss if math.isfinite(loss) else None)
        break
      record(step, loss)
  final = float(eval_loss(params)) if not diverged else None
  if final is not None and not math.isfinite(final):
    final, diverged = None, True
  return {**history, "final_loss": final, "diverged": diverged, "steps_done": step}


def _tiny(**changes) -> transformer.Config:
  base = dict(vocab_size=256, d_model=32, n_layers=2, n_heads=2, max_len=64,
              activation="gelu_tanh")
  return transformer.Config(**{**base, **changes})


def norm_condition_run(norm: str, *, seed: int = 0, learning_rate: float = 3e-3,
                       steps: int = 200, measure_every: int = 20, cfg=None, batches=None,
                       seq_len: int = 32, batch_size: int = 16,
                       center: bool | None = None) -> dict:
  """Train with `norm` (`layernorm`, `rmsnorm`, `none`) and track `condition_profile`.

  Returns:
    The `train_tracked` history plus, per projection input NAME, `NAME/kappa_ratio_max`
    (largest over layers and measurements of `κ(t)/κ(0)`), `NAME/kappa_init` and
    `NAME/kappa_final` (max over layers), `NAME/n_dropped` (max over layers, per measurement),
    and `kappa_ratio_max` over all inputs.
  """
  cfg = (cfg or _tiny(max_len=seq_len)).replace(norm=norm)
  batches = batches or text_batches(seq_len, batch_size, seed)
  eval_tokens = np.asarray(batches(10**6))
  run = train_tracked(cfg, adamw(learning_rate, steps), seed, batches, steps=steps,
                      measure_every=measure_every,
                      measure=lambda p, t: condition_profile(p, cfg, t, center=center),
                      eval_tokens=eval_tokens)
  summary = {}
  for name in PROJECTION_INPUTS:
    k_ML = np.array([m[f"{name}/kappa_eff"] for m in run["metrics"]], np.float64)
    summary[f"{name}/kappa_init"] = float(k_ML[0].max())
    summary[f"{name}/kappa_final"] = float(k_ML[-1].max())
    summary[f"{name}/kappa_ratio_max"] = float(np.nanmax(k_ML / k_ML[:1]))
    summary[f"{name}/n_dropped"] = [int(max(m[f"{name}/n_dropped"])) for m in run["metrics"]]
  summary["kappa_ratio_max"] = max(summary[f"{n}/kappa_ratio_max"] for n in PROJECTION_INPUTS)
  return {**run, **summary}


def logit_bound_run(cap: float | None, *, seed: int = 0, learning_rate: float = 1e-2,
                    steps: int = 200, measure_every: int = 20, cfg=None, batches=None,
                    seq_len: int = 32, batch_size: int = 16) -> dict:
  """Train with AdamW (+ `spectral_cap(cap)` on `W_Q`, `W_K`) and track `logit_certificate`.

  Returns:
    The `train_tracked` history plus `max_ratio` (largest measured/bound over the run; `≤ 1`
    means the certificate held throughout), `bound_final`, `measured_final`, `violations`.
  """
  cfg = cfg or _tiny(max_len=seq_len)
  batches = batches or text_batches(seq_len, batch_size, seed)
  eval_tokens = np.asarray(batches(10**6))
  measure = lambda p, t: {k: v for k, v in logit_certificate(p, cfg, t).items()
                          if k in ("ratio", "bound_max", "measured_max")}
  run = train_tracked(cfg, adamw(learning_rate, steps, cap=cap), seed, batches, steps=steps,
                      measure_every=measure_every, measure=measure, eval_tokens=eval_tokens)
  ratios = [m["ratio"] for m in run["metrics"]]
  return {**run, "max_ratio": float(max(ratios)),
          "violations": int(sum(r > 1 + 1e-5 for r in ratios)),
          "bound_final": run["metrics"][-1]["bound_max"],
          "measured_final": run["metrics"][-1]["measured_max"]}


def main(argv=None) -> int:
  """Print quick numbers: the depth sweep at tiny width, then one κ and one certificate run."""
  del argv
  base = transformer.Config(vocab_size=64, d_model=16, n_layers=1, n_heads=2, max_len=16)
  sweep = depth_sweep(base, 0, seq_len=8)
  print("arm              L   max|λ-1|  mean|λ-1|  σmax(J_e2e)  rms_out/rms_in")
  for arm, rows in sweep.items():
    for L, r in rows.items():
      print(f"{arm:16s} {L:4d} {r['max_dist_from_one']:9.4f} {r['mean_dist_from_one']:10.4f} "
            f"{r['e2e_sigma_max']:12.4g} {r['stream_rms_out'] / r['stream_rms_in']:12.4g}")
  for norm in ("layernorm", "rmsnorm", "none"):
    r = norm_condition_run(norm, steps=100, measure_every=25)
    print(json.dumps({"norm": norm, "final_loss": r["final_loss"], "diverged": r["diverged"],
                      **{k: v for k, v in r.items() if "kappa" in k}}))
  for cap in (None, 1.0):
    r = logit_bound_run(cap, steps=100, measure_every=25)
    print(json.dumps({"cap": cap, "final_loss": r["final_loss"], "max_ratio": r["max_ratio"],
                      "bound_final": r["bound_final"], "measured_final": r["measured_final"]}))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
