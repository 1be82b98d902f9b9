"""The shared base models: list the recipes, pre-train missing seeds in the background.

    python -m experiments models [--root runs]
    python -m experiments models --train NAME [NAME ...] [--seeds 0-4]
    python -m experiments models --train all --seeds 0 1 2 3 4

    python -m experiments models --commit NAME [NAME ...] [--seeds 0-4]
    python -m experiments models --verify

`--commit` copies cached models of the trained regime (`experiments.models.STORED`) into
`results/models/<name>/seed-<k>/` (float16 `params.npz` + `meta.json` with its sha256), from
where every claim reads them on a fresh clone without training; `--verify` checks every
committed model's arrays against its hash and its recipe against the current one, prints
one line per model and exits 1 if any fails.

Without `--train` it prints one row per recipe of `experiments.models.RECIPES` (name, family,
shape, parameters, tokens seen, tokens per parameter, the seeds already cached under
`ROOT/cache/` and their mean held-out bits per byte), reading only `meta.json` files: nothing
trains, in about 5 s. `--train NAME ...` (`all`: the two families and the two long-context
models) trains, model by model, the seeds of `--seeds` (default `0-4`, the claims'
pre-registered seeds) that are not cached yet, all seeds of one model together as one vmapped
program, with a progress bar; then prints the table. A claim that later asks for these models
loads them from the cache. The cost per model is in `experiments.models`'s docstring (seconds
per step per seed × 400 steps × seeds); run it under `nohup nice -n 19 ... &` to pre-train.
"""

from __future__ import annotations

import argparse
import time

from experiments import console, models

COLUMNS = ("name", "family", "shape", "params", "seq_len", "tokens_seen", "tokens/param",
           "cached seeds", "bits/byte")


def parse_seeds(tokens) -> tuple[int, ...]:
  """`("0-4",)`, `("0,2",)` or `("0", "1")` -> the seeds, in order, without repeats.

  Example:
    >>> from experiments.commands.models import parse_seeds
    >>> parse_seeds(["0-2", "7,5"])
    (0, 1, 2, 7, 5)
  """
  seeds = []
  for token in tokens:
    for part in str(token).split(","):
      lo, sep, hi = part.strip().partition("-")
      if not lo.isdigit() or (sep and not hi.isdigit()):
        raise ValueError(f"--seeds {token!r}: expected seeds like 0-4, 0,1,2 or 0 1 2.")
      seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
  return tuple(dict.fromkeys(seeds))


def _seed_ranges(seeds) -> str:
  """`[0, 1, 2, 4]` -> `0-2, 4`."""
  runs: list[list[int]] = []
  for s in seeds:
    if runs and s == runs[-1][-1] + 1:
      runs[-1].append(s)
    else:
      runs.append([s])
  return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "-"


def table(rows) -> str:
  """The markdown table of `models.summary()` rows."""
  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
  for r in rows:
    shape = f"d {r['d_model']}, L {r['n_layers']}, H {r['n_heads']}, K {r['n_kv_heads']}"
    bpb = "-" if r["bits_per_byte"] is None else f"{r['bits_per_byte']:.3f}"
    cells = (r["name"], r["family"], shape, f"{r['params']:,}", str(r["seq_len"]),
             f"{r['tokens_seen']:,}", f"{r['tokens_per_param']:.2f}",
             _seed_ranges(r["cached_seeds"]), bpb)
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def train(names, seeds, root: str, log=print) -> None:
  """Trains the missing `seeds` of each model in `names`, one model at a time."""
  for name in names:
    missing = [s for s in seeds if s not in models.cached_seeds(name, root)]
    if not missing:
      log(f"{name}: seeds {_seed_ranges(seeds)} already cached")
      continue
    start = time.monotonic()
    steps = models.RECIPES[name].steps
    with console.progress(steps, desc=f"{name} seeds {_seed_ranges(missing)}",
                          unit="step") as bar:
      models.base_models(name, missing, root=root, progress=bar)
    log(f"{name}: trained seeds {_seed_ranges(missing)} in {time.monotonic() - start:.0f} s")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments models", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--train", nargs="+", default=None, metavar="NAME",
                 help=f"models to pre-train: {', '.join(models.RECIPES)}, or all")
  p.add_argument("--seeds", nargs="+", default=["0-4"],
                 help="seeds to train: 0-4, 0,1,2 or 0 1 2 (default 0-4)")
  p.add_argument("--root", default="runs", help="the runs folder holding cache/")
  p.add_argument("--commit", nargs="+", default=None, metavar="NAME",
                 help=f"store cached models in results/models: {', '.join(sorted(models.STORED))}")
  p.add_argument("--verify", action="store_true",
                 help="check every committed model's hash and recipe; exit 1 on a mismatch")
  args = p.parse_args(argv)
  if args.verify:
    rows = models.verify()
    for r in rows:
      print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']} seed {r['seed']}"
            + (f": {r['why']}" if r["why"] else ""))
    bad = sum(not r["ok"] for r in rows)
    print(f"{len(rows) - bad}/{len(rows)} committed models verified")
    return 1 if bad or not rows else 0
  try:
    seeds = parse_seeds(args.seeds)
  except ValueError as e:
    p.error(str(e))
  if args.train:
    names = args.train
    if names == ["all"]:
      names = [*models.FAMILIES["gpt"], *models.FAMILIES["llama"], *models.LONG.values()]
    unknown = [n for n in names if n not in models.RECIPES]
    if unknown:
      p.error(f"unknown model(s) {unknown}; choose from {list(models.RECIPES)} or all")
    train(names, seeds, args.root)
  for name in args.commit or ():
    if name not in models.STORED:
      p.error(f"--commit {name}: only the trained regime is committed: {sorted(models.STORED)}")
    for path in models.commit(name, seeds, args.root):
      print(f"committed {path}")
  print(table(models.summary(args.root)))
  return 0
