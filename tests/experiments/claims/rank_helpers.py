"""What the tests of the rank claims share: synthetic per-seed results."""


def seed_runs(per_seed: dict, seeds=(0, 1, 2, 3, 4)) -> dict:
  """`{arm: {seed: {metric: value}}}` from `{(arm, metric): values per seed}`."""
  out: dict = {}
  for (arm, metric), values in per_seed.items():
    for s, v in zip(seeds, values, strict=True):
      out.setdefault(arm, {}).setdefault(s, {})[metric] = v
  return out
