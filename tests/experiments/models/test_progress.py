"""A base model that is neither committed nor cached says so, then how far its training is."""

import re

import transformer
from experiments import models
from experiments.models import recipes, trained


def test_training_a_missing_base_model_prints_what_and_how_far(tmp_path, monkeypatch, capsys):
  tiny = recipes.Recipe(transformer.preset("tiny", d_model=32, n_layers=2, n_heads=2),
                        steps=10, batch_size=2, seq_len=16, warmup_steps=2)
  monkeypatch.setitem(recipes.RECIPES, "quick", tiny)
  (params, cfg), = models.base_models("quick", [3], root=str(tmp_path))
  assert cfg.d_model == 32 and trained.cached_seeds("quick", str(tmp_path)) == [3]
  err = capsys.readouterr().err.splitlines()
  assert err[0].startswith("[models] quick seed 3: not committed nor cached in ")
  assert "training it now (10 steps of 2 x 16 tokens)" in err[0]
  done = [int(m.group(1)) for line in err[1:]
          if (m := re.fullmatch(r"\[models\] training quick seed 3: (\d+)/10", line))]
  assert done == sorted(done) and done[-1] == 10 and len(done) >= 2
  models.base_models("quick", [3], root=str(tmp_path))  # cached now: nothing to say
  assert capsys.readouterr().err == ""
