"""The command line: `python -m experiments NAME [--flags]`; `--help` on any command.

Each command is a function taking `argv`; importing its module is deferred so that
`python -m experiments demo` does not pay for the training stack.
"""

from __future__ import annotations

import os
import sys

# One BLAS thread per process unless the user says otherwise: the claims' SVDs are of small
# matrices, and on a shared machine OpenBLAS's thread pool made a numpy SVD ~20× slower in
# CPU time (1.3 s against 0.06 s per call, measured at load 12 on 2 cores).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Compiled programs persist across commands and a claim's arms (`experiments.compile_cache`).
from experiments.compile_cache import use_compile_cache  # noqa: E402

use_compile_cache()


def _demo(argv):
  from experiments.commands import demo
  return demo.main(argv)


def _catalog(argv):
  if any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in argv):
    from experiments.commands import sample
    return sample.catalog_main(argv)
  from experiments.commands import demo
  return demo.catalog_main(argv)


def _train(argv):
  from experiments import train
  return train.main(argv)


def _atlas(argv):
  from experiments.commands import atlas
  return atlas.main(argv)


def _eval(argv):
  from experiments.commands import eval as eval_
  return eval_.main(argv)


def _sample(argv):
  from experiments.commands import sample
  return sample.main(argv)


def _models(argv):
  from experiments.commands import models
  return models.main(argv)


def _claim(argv):
  from experiments.commands import tour
  return tour.claim_main(argv)


def _tour(argv):
  from experiments.commands import tour
  return tour.tour_main(argv)


COMMANDS = {
    "demo": (_demo, "catalog, forward pass on real text, cached generation (make demo: tour)"),
    "catalog": (_catalog, "print the matrix catalog of a preset, a run (--checkpoint) or a "
                          "Hugging Face folder"),
    "train": (_train, "train a model (jit, Orbax checkpoints, resume, sharding)"),
    "atlas": (_atlas, "the analysis atlas: spectra, Jacobians, the seven properties"),
    "eval": (_eval, "loss, bits per byte and perplexity of a run or HF model on any text"),
    "sample": (_sample, "continue a prompt with a trained run"),
    "models": (_models, "the shared base models: sizes, params, tokens per param, cached "
                        "seeds; --train pre-trains them"),
    "claim": (_claim, "test one preface claim: seeds, effects with 95% CIs, a verdict"),
    "tour": (_tour, "every preface claim in order, with the verdict table (make demo: --quick)"),
}


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if not argv or argv[0] in ("-h", "--help"):
    print("usage: python -m experiments COMMAND [--flags]   (COMMAND --help for its flags)\n")
    for name, (_, about) in COMMANDS.items():
      print(f"  {name:<10} {about}")
    return 0 if argv else 2
  name, rest = argv[0], argv[1:]
  if name not in COMMANDS:
    print(f"unknown command {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
    return 2
  return COMMANDS[name][0](rest) or 0


if __name__ == "__main__":
  sys.exit(main())
