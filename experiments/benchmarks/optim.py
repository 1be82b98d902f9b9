"""Jitted update time of `optim.muon` vs `optax.contrib.muon` vs `optax.adamw`.

Run: `python -m experiments.benchmarks.optim [--layers 2] [--repeats 5]` (about a minute on
two CPU cores with the defaults; `--layers 12`, the whole of gpt2-small, takes about four).
Parameters have the shapes of `transformer.init` for the `gpt2-small` preset (with `--layers`
of its 12 blocks: the Muon work grows linearly with the layer count while the embedding, on
AdamW in all three, is a fixed cost, so the ratio to AdamW grows with `--layers`) and of a
smaller `d=256` model; values are random.
Both Muons use the same coefficients, steps, momentum and width scaling on the `hidden`
matrices and AdamW elsewhere. Prints the median time of each and its ratio to AdamW; the goal
is `optim.muon` no slower than `optax.contrib.muon`.
"""

from __future__ import annotations

import argparse

import jax
import optax

import optim
import transformer
from experiments.benchmarks.timing import interleaved


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


def optimizers(params, lr: float = 0.02):
  """The three optimizers under comparison, configured alike."""
  dims = jax.tree.map(
      lambda r, p: optax.contrib.MuonDimensionNumbers(p.ndim - 2, p.ndim - 1)
      if r == "hidden" else None, optim.labels(params), params)
  return {
      "optim.muon": optim.muon(lr, adam_learning_rate=lr),
      "optax.contrib.muon": optax.contrib.muon(lr, muon_weight_dimension_numbers=dims),
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


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=2, help="gpt2-small blocks to time (of 12)")
  parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds")
  args = parser.parse_args(argv)
  sizes = {
      f"gpt2-small (L={args.layers})": transformer.preset("gpt2-small", n_layers=args.layers),
      "d=256 (L=4)": transformer.preset("gpt2-small", d_model=256, n_heads=4, d_ff=1024,
                                        n_layers=4),
  }
  print(f"{'size':<22}{'optimizer':<22}{'median ms':>12}{'x adamw':>10}")
  for size, cfg in sizes.items():
    params = random_params(cfg)
    times = time_updates(optimizers(params), params, args.repeats)
    for name, t in times.items():
      print(f"{size:<22}{name:<22}{1e3 * t:>12.1f}{t / times['optax.adamw']:>10.2f}")
    ratio = times["optim.muon"] / times["optax.contrib.muon"]
    print(f"{size:<22}{'optim / optax muon':<22}{'':>12}{ratio:>10.2f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
