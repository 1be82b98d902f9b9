"""Temporary (issue 40): the old import path of the claim modules, until 10:05."""

from experiments.verdict.stats import mean_ci95, spearman

__all__ = ["mean_ci95", "spearman"]
