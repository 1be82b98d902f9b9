"""`python -m experiments train`: one `--flag` per `TrainConfig` field, then `train`."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from experiments.train import loop
from experiments.train.config import TrainConfig
from experiments.train.loop import NonFiniteLoss, train

EXAMPLES = """examples:
  python -m experiments train --steps 300                     # tiny model on stdlib text
  python -m experiments train --data task:recall --steps 2000 # a synthetic task, exact match
  python -m experiments train --optimizer muon --muon-learning-rate 0.02
  python -m experiments train --run-dir runs/train/my-run     # resume (or extend) a run
  python -m experiments train --model-overrides d_model=32,n_layers=2 --data 'docs/**/*.md'
"""

class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Keeps the description's layout; appends each option's default once (none for flags)."""

  def _get_help_string(self, action):
    help = action.help or ""
    if "%(default)" in help or action.default in (None, argparse.SUPPRESS):
      return help
    return help + " (default: %(default)s)"


def parser() -> argparse.ArgumentParser:
  """`--flag` per `TrainConfig` field, with its type, choices, help and default."""
  intro = loop.__doc__.split("\n\n")
  p = argparse.ArgumentParser(prog="python -m experiments train",
                              description=intro[0] + "\n\n" + intro[2].strip(),
                              epilog=EXAMPLES, formatter_class=_HelpFormatter)
  for f in dataclasses.fields(TrainConfig):
    flag = "--" + f.name.replace("_", "-")
    if isinstance(f.default, bool):
      p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                     help=f.metadata["help"] + " (default: %(default)s)")
    else:
      p.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"],
                     choices=f.metadata.get("choices"))
  return p


def main(argv=None) -> int:
  """`python -m experiments train [--flags]`; returns the exit status."""
  tc = TrainConfig(**vars(parser().parse_args(argv)))
  try:
    result = train(tc)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except NonFiniteLoss as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    return 130
  val = "" if math.isnan(result.val_loss) else f": validation loss {result.val_loss:.4f} nats"
  print(f"step {int(result.state.step)}{val}; run folder {result.run_dir}")
  return 0
