"""The verdict's arithmetic: conditions, distributions, censored seeds, statistics, the rule."""
