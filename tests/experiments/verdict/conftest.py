"""Fixtures of the runner's axis tests."""

import pytest

from experiments import models
from tests.experiments.verdict.toy_claims import FAMILY, PARAMS


@pytest.fixture
def cards(monkeypatch):
  """Known base models: every name is a recipe, and its card gives a family and a size."""
  for name in PARAMS:
    monkeypatch.setitem(models.RECIPES, name, models.RECIPES["quick"])
  monkeypatch.setattr(models, "model_card",
                      lambda name: {"family": FAMILY[name], "params": PARAMS[name]},
                      raising=False)
