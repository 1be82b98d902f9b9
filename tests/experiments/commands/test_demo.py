"""The main job (`make demo`) and the catalog command."""

import math

from experiments import __main__ as cli
from experiments.commands import demo


def test_demo_runs_and_its_cache_check_holds(capsys):
  out = demo.run("llama-tiny", seed=0, steps=4, seq_len=32)
  text = capsys.readouterr().out
  assert out["cache_max_abs_err"] <= 1e-5
  # Random init predicts bytes about as well as a uniform guess.
  assert abs(out["loss"] - math.log(256)) < 0.2
  for row in ("blocks/attn/w_q", "Q K^T", "A V", "blocks/ffn/w_gate", "unembed/w_out"):
    assert row in text


def test_catalog_of_gpt2_small_without_allocating(capsys):
  assert cli.main(["catalog", "--model", "gpt2-small", "--seq-len", "1024"]) == 0
  text = capsys.readouterr().out
  assert "124,439,808 parameters" in text
  assert "(12, 768, 768)" in text and "embed/embedding^T" in text


def test_unknown_command_is_an_error(capsys):
  assert cli.main(["trian"]) == 2
  assert "choose one of" in capsys.readouterr().err
