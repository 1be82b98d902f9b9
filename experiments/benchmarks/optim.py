"""Muon against optax's: orthogonalization time vs error, the update, and the train step.

Run: `python -m experiments.benchmarks.optim [--layers 2] [--repeats 5] [--skip SECTION ...]`.
Three sections, each timed as medians of interleaved rounds (`experiments.lab.timing`);
on two shared CPU cores each takes two to four minutes at `--layers 2` (`--skip` the others to
stay under that; `--layers 12 --repeats 3 --skip table train` times the whole of gpt2-small).

1. `table` — *orthogonalization, time vs error.* Each Newton–Schulz variant of ours
   (`newton_schulz` presets; the Gram iteration where it is cheaper, the direct one; bfloat16,
   meant for accelerators, error only) and optax's presets (`optax.contrib.scale_by_muon`
   coefficients and pre-conditionings; its default is `standard` with `frobenius`)
   orthogonalizes the hidden matrices of gpt2-small with `--layers` blocks (per block four
   `(768, 768)`, one `(768, 3072)`, one `(3072, 768)`), timed as `scale_by_muon(β=0)` (no
   momentum, no scaling). The error is measured against the exact polar factor `P = U Vᵀ`
   (float64 SVD) on a Gaussian matrix (the timed inputs' spectrum) and on one with `σ_i = 1/i`
   (steep, like real momenta), both `(768, 768)` and `(768, 3072)`: `rms |σ−1|` is
   `‖O − P‖_F / √min(m, n)` (the RMS distance of the singular values from 1 when the singular
   vectors are right) and `cos` is `⟨O, P⟩ / (‖O‖_F ‖P‖_F)`. Expected: ours `standard` has
   optax `standard`'s error to 4 digits at ~0.75x its time (the feed-forward matrices run on
   their `768 × 768` Gram: 25 instead of 45 products of `768³`); `polar_express` costs the
   same with a lower error on every input; `polar_express_lean` is one product per matrix
   cheaper than `standard`, also with a lower error.
2. `update` — `optim.muon` (default coefficients, and `polar_express_lean`) vs
   `optax.contrib.muon` vs `optax.adamw` on the parameters of `transformer.init` for
   `gpt2-small` with `--layers` of its 12 blocks (values random), and a `d=256` model. Both
   Muons use the same coefficients, steps, momentum and width scaling on the `hidden`
   matrices and AdamW elsewhere; the embedding's AdamW is a fixed cost shared by all, so the
   speed-up grows with `--layers`. Expected: ~1.35x at `--layers 2`.
3. `train` — *the train step* (`experiments.train.build`: loss, gradients, clipping,
   optimizer) with `--optimizer muon` vs `adamw`, and `optax.contrib.muon` in the same chain,
   at the `small` shared-model shape (`experiments.models.RECIPES["small"]`, its batch
   and length) and at gpt2-small width with `--layers` blocks.
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optim
import transformer
from experiments import train
from experiments.lab.timing import interleaved
from experiments.train import sharding


def random_params(cfg: transformer.Config, key: jax.Array | None = None):
  """Random arrays with the shapes (and dtypes) of `transformer.init(cfg, key)`.

  Example:
    >>> import jax, transformer
    >>> from experiments.benchmarks.optim import random_params
    >>> cfg = transformer.preset("tiny")
    >>> shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
    >>> jax.tree.map(lambda x: x.shape, random_params(cfg)) == jax.tree.map(
    ...     lambda x: x.shape, shapes)
    True
  """
  key = jax.random.key(0) if key is None else key
  shapes = jax.eval_shape(lambda: transformer.init(cfg, key))
  leaves, treedef = jax.tree.flatten(shapes)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(
      treedef, [jax.random.normal(k, s.shape, s.dtype) for k, s in zip(keys, leaves, strict=True)])


def _hidden_dims(params):
  """optax's `MuonDimensionNumbers` for our `hidden` matrices (`None` elsewhere)."""
  return jax.tree.map(lambda r, p: optax.contrib.MuonDimensionNumbers(p.ndim - 2, p.ndim - 1)
                      if r == "hidden" else None, optim.labels(params), params)


def optimizers(params, lr: float = 0.02):
  """The three optimizers under comparison, configured alike."""
  return {
      "optim.muon": optim.muon(lr, adam_learning_rate=lr, adam_b2=0.95, adam_nesterov=False),
      "optax.contrib.muon": optax.contrib.muon(
          lr, muon_weight_dimension_numbers=_hidden_dims(params)),
      "optax.adamw": optax.adamw(lr),
  }


def time_updates(txs: dict, params, repeats: int) -> dict[str, float]:
  """Median wall time (s) of one jitted `tx.update` for each of `txs`.

  All are compiled and warmed up first, then timed in interleaved rounds (one update of
  each per round), so drift in the machine's load hits every optimizer alike.
  """
  grads = jax.tree.map(lambda p: p * 1e-2, params)

  def update_fn(tx):
    update, state = jax.jit(tx.update), tx.init(params)
    return lambda: update(grads, state, params)

  return interleaved({name: update_fn(tx) for name, tx in txs.items()}, repeats)


# ------------------------------------------------------------ orthogonalization: time vs error


def orthogonalizers() -> dict[str, optax.GradientTransformation]:
  """Newton–Schulz variants as momentum-free transforms: `update(G) = NS(G)` per matrix.

  Ours: `optim.scale_by_muon(β=0, shape_scaling="none")` with each coefficient preset, the
  Gram iteration where it is cheaper (the default) or never (`gram=False`), and bfloat16.
  optax's: `optax.contrib.scale_by_muon(β=0)` with its coefficient presets and
  pre-conditionings (its default is `standard` with `frobenius`).
  """
  ours = functools.partial(optim.scale_by_muon, 0.0, nesterov=False, shape_scaling="none",
                           matrix_axes=optim.MatrixAxes(-2, -1))
  theirs = functools.partial(optax.contrib.scale_by_muon, beta=0.0, nesterov=False,
                             weight_dimension_numbers=lambda p: jax.tree.map(
                                 lambda x: optax.contrib.MuonDimensionNumbers(
                                     x.ndim - 2, x.ndim - 1), p))
  dion = optim.NS_COEFFS["dion"]
  return {
      "ours standard": ours(),
      "ours standard, direct": ours(gram=False),
      "ours classic": ours(coeffs="classic"),
      "ours dion": ours(coeffs="dion"),
      "ours polar_express": ours(coeffs="polar_express"),
      "ours polar_express_lean": ours(coeffs="polar_express_lean"),
      "ours standard, bf16": ours(compute_dtype=jnp.bfloat16),
      "ours polar_express, bf16": ours(coeffs="polar_express", compute_dtype=jnp.bfloat16),
      "optax standard": theirs(),
      "optax dion": theirs(ns_coeffs=dion, ns_steps=len(dion)),
      "optax standard, schatten": theirs(preconditioning="schatten"),
      "optax standard, aol": theirs(preconditioning="aol"),
  }


def spectrum_matrix(shape: tuple[int, int], spectrum: str, seed: int = 0):
  """A float64 `(m, n)` matrix with the named spectrum, and its exact polar factor `U Vᵀ`.

  `"gaussian"`: i.i.d. normal entries (the polar factor from `np.linalg.svd`).
  `"power"`: `σ_i = 1/i` with Haar-random singular vectors.

  Example:
    >>> import numpy as np
    >>> from experiments.benchmarks.optim import spectrum_matrix
    >>> G, P = spectrum_matrix((8, 12), "power")
    >>> np.allclose(np.linalg.svd(G, compute_uv=False), 1 / np.arange(1, 9))
    True
  """
  rng = np.random.default_rng(seed)
  m, n = shape
  k = min(m, n)
  if spectrum == "gaussian":
    G = rng.standard_normal(shape)
    U, _, Vt = np.linalg.svd(G, full_matrices=False)
    return G, U @ Vt
  if spectrum == "power":
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((n, k)))[0]
    return (U / np.arange(1, k + 1)) @ V.T, U @ V.T
  raise ValueError(f"spectrum_matrix: unknown {spectrum=}; choose 'gaussian' or 'power'")


def orthogonalization_error(O, P) -> dict[str, float]:
  """`rms |σ−1|` = `‖O − P‖_F / √min(m, n)` and `cos` = `⟨O, P⟩ / (‖O‖_F ‖P‖_F)`, in float64.

  Example:
    >>> import numpy as np
    >>> from experiments.benchmarks.optim import orthogonalization_error
    >>> P = np.eye(4)[:, :3].T  # (3, 4), orthonormal rows
    >>> e = orthogonalization_error(0.5 * P, P)
    >>> round(e["rms"], 6), round(e["cos"], 6)
    (0.5, 1.0)
  """
  O, P = np.asarray(O, np.float64), np.asarray(P, np.float64)
  k = min(P.shape[-2:])
  return {"rms": float(np.linalg.norm(O - P) / np.sqrt(k)),
          "cos": float(np.sum(O * P) / (np.linalg.norm(O) * np.sqrt(k)))}


# Error-only rows of the table: a convergent reference and the accelerator (bfloat16) option.
UNTIMED = ("ours classic", "ours standard, bf16", "ours polar_express, bf16")

ERROR_INPUTS = tuple((shape, spectrum) for spectrum in ("gaussian", "power")
                     for shape in ((768, 768), (768, 3072)))


def error_table(txs: dict, inputs=ERROR_INPUTS) -> dict[str, list[dict[str, float]]]:
  """name -> one `orthogonalization_error` per `(shape, spectrum)` of `inputs`."""
  mats = [spectrum_matrix(shape, spectrum) for shape, spectrum in inputs]
  out = {}
  for name, tx in txs.items():
    update = jax.jit(tx.update)
    out[name] = []
    for G, P in mats:
      g = {"w": jnp.asarray(G, jnp.float32)}
      O = update(g, tx.init(g))[0]["w"]
      out[name].append(orthogonalization_error(O, P))
  return out


def block_matrices(cfg: transformer.Config, key: jax.Array | None = None) -> dict:
  """The `hidden` matrices of `random_params(cfg)` (a flat dict, path -> array)."""
  params = random_params(cfg, key)
  return {jax.tree_util.keystr(path): x * 1e-2 for (path, x), role in zip(
      jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(optim.labels(params)),
      strict=True) if role == "hidden"}


def time_orthogonalizers(txs: dict, matrices: dict, rounds: int) -> dict[str, float]:
  """Median seconds of one jitted momentum-free update of `matrices` for each of `txs`."""

  def update_fn(tx):
    update, state = jax.jit(tx.update), tx.init(matrices)
    return lambda: update(matrices, state)

  return interleaved({name: update_fn(tx) for name, tx in txs.items()}, rounds)


# ---------------------------------------------------------------------------- the train step


def train_steps(cfg: transformer.Config, batch: int, seq_len: int, repeats: int) -> dict:
  """Median seconds of one train step with Muon (ours, optax's) and with AdamW.

  Each is `experiments.train.build`'s step (loss, gradients, metrics, donated state) with
  `train.optimizer(TrainConfig(optimizer=...))`; optax's Muon replaces ours in the same chain
  (global-norm clipping, then Muon on the hidden matrices at the same learning rates).
  """
  tc = train.TrainConfig(steps=1000, warmup_steps=10)
  lr, muon_lr = train.schedule(tc), train.schedule(tc, peak=tc.muon_learning_rate)
  abstract = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  theirs = optax.chain(optax.clip_by_global_norm(tc.grad_clip), optax.contrib.muon(
      muon_lr, adam_learning_rate=lr, weight_decay=tc.weight_decay,
      muon_weight_dimension_numbers=_hidden_dims(abstract)))
  txs = {"muon (optim.muon)": train.optimizer(tc.replace(optimizer="muon")),
         "muon (optax.contrib)": theirs,
         "adamw": train.optimizer(tc.replace(optimizer="adamw"))}
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq_len + 1)), jnp.int32)
  weights = jnp.ones((batch, seq_len), jnp.float32)
  mesh = sharding.make_mesh({"data": 1})

  def stepper(tx):
    trainer = train.build(cfg, tx, mesh)
    state = trainer.init(jax.random.key(0))
    step = trainer.step.lower(state, tokens, weights).compile()

    def one():
      nonlocal state
      state, metrics = step(state, tokens, weights)
      return metrics["loss"]

    return one

  return interleaved({name: stepper(tx) for name, tx in txs.items()}, repeats)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=2, help="gpt2-small blocks to time (of 12)")
  parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds")
  parser.add_argument("--skip", nargs="*", default=(), choices=("table", "update", "train"),
                      help="sections to leave out")
  args = parser.parse_args(argv)

  if "table" not in args.skip:
    txs = orthogonalizers()
    matrices = block_matrices(transformer.preset("gpt2-small", n_layers=args.layers))
    times = time_orthogonalizers({k: v for k, v in txs.items() if k not in UNTIMED}, matrices,
                                 args.repeats)
    errors = error_table(txs)
    base = times["optax standard"]
    heads = "".join(f"{spectrum} {m}x{n}".rjust(22) for (m, n), spectrum in ERROR_INPUTS)
    print(f"Orthogonalization of the 6 hidden matrices of gpt2-small, {args.layers} blocks "
          "stacked: median ms, ratio to optax standard's; error vs the exact polar factor "
          "(rms |σ−1| / cos)")
    print(f"{'variant':<26}{'ms':>8}{'x optax':>9}{heads}")
    for name in txs:
      errs = "".join(f"{e['rms']:.4f} / {e['cos']:.5f}".rjust(22) for e in errors[name])
      t = times.get(name)
      timing = f"{1e3 * t:>8.1f}{t / base:>9.2f}" if t else f"{'-':>8}{'-':>9}"
      print(f"{name:<26}{timing}{errs}")
    print()

  if "update" not in args.skip:
    sizes = {
        f"gpt2-small (L={args.layers})": transformer.preset("gpt2-small", n_layers=args.layers),
        "d=256 (L=4)": transformer.preset("gpt2-small", d_model=256, n_heads=4, d_ff=1024,
                                          n_layers=4),
    }
    print(f"{'update of':<22}{'optimizer':<22}{'median ms':>12}{'x adamw':>10}")
    for size, cfg in sizes.items():
      params = random_params(cfg)
      txs = optimizers(params)
      txs["optim.muon, lean"] = optim.muon(0.02, adam_learning_rate=0.02, adam_b2=0.95,
                                           adam_nesterov=False, coeffs="polar_express_lean")
      times = time_updates(txs, params, args.repeats)
      for name, t in times.items():
        print(f"{size:<22}{name:<22}{1e3 * t:>12.1f}{t / times['optax.adamw']:>10.2f}")
      for name in ("optim.muon", "optim.muon, lean"):
        speedup = times["optax.contrib.muon"] / times[name]
        print(f"{size:<22}{f'speed-up of {name}':<34}{speedup:>10.2f}x")
    print()

  if "train" not in args.skip:
    from experiments.models import RECIPES

    small = RECIPES["small"]
    models = {
        f"small (d=128, L=4) {small.batch_size}x{small.seq_len}":
            (small.cfg, small.batch_size, small.seq_len),
        f"gpt2-small width (L={args.layers}) 4x128":
            (transformer.preset("gpt2-small", n_layers=args.layers), 4, 128),
    }
    print(f"{'train step of':<34}{'optimizer':<22}{'median ms':>12}{'x adamw':>10}")
    for name, (cfg, batch, seq_len) in models.items():
      times = train_steps(cfg, batch, seq_len, args.repeats)
      for opt, t in times.items():
        print(f"{name:<34}{opt:<22}{1e3 * t:>12.1f}{t / times['adamw']:>10.2f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
