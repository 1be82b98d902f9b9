"""Temporary (issue 40): the old import path of the claim modules, until 10:05."""

from experiments.verdict.claim import Claim
from experiments.verdict.sizes import Sizes, Spec, TrainedSizes, more_steps
from experiments.verdict.thresholds import Anchor, Extension, Threshold

__all__ = ["Anchor", "Claim", "Extension", "Sizes", "Spec", "Threshold", "TrainedSizes",
           "more_steps"]
