"""The `sample` and `catalog --checkpoint` commands on a trained run."""

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from experiments import __main__ as cli
from experiments.commands import sample
from experiments.train import checkpoint
from tests.experiments.conftest import corrupt


def test_greedy_sample_continues_the_prompt_like_repeated_forward_passes(tiny_run, capsys):
  prompt = "def f("
  assert sample.main(["--checkpoint", tiny_run, "--prompt", prompt, "--max-new-tokens", "6",
                      "--temperature", "0"]) == 0
  out = capsys.readouterr().out.rstrip("\n")
  params, cfg = checkpoint.load_run(tiny_run)
  apply = jax.jit(transformer.Transformer(cfg).apply)
  seq = jnp.asarray(np.frombuffer(prompt.encode(), np.uint8).astype(np.int32))[None]
  for _ in range(6):
    seq = jnp.concatenate([seq, apply({"params": params}, seq)[:, -1].argmax(-1)[:, None]], 1)
  want = bytes(np.asarray(seq[0], np.uint8)).decode("utf-8", "replace")
  assert out == want and out.startswith(prompt)
  # Sampling is reproducible from --seed.
  argv = ["--checkpoint", tiny_run, "--prompt", prompt, "--max-new-tokens", "8", "--top-k", "5"]
  assert cli.main(["sample", *argv, "--seed", "3"]) == 0
  first = capsys.readouterr().out
  assert cli.main(["sample", *argv, "--seed", "3"]) == 0
  assert capsys.readouterr().out == first


def test_sample_errors_are_one_line(tiny_run_copy, capsys):
  base = ["--checkpoint", tiny_run_copy, "--prompt", "x"]
  for extra, message in [(["--top-k", "0"], "top_k=0"), (["--temperature=-1"], "temperature=-1"),
                         (["--max-new-tokens", "64"], "exceeds max_len=64")]:
    assert sample.main([*base, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
  corrupt(tiny_run_copy, 10)
  corrupt(tiny_run_copy, 5)
  assert sample.main(base) == 2
  assert capsys.readouterr().err.startswith("error: no readable checkpoint")


def test_catalog_of_a_checkpoint(tiny_run, capsys):
  assert cli.main(["catalog", "--checkpoint", tiny_run, "--step", "5"]) == 0
  out = capsys.readouterr().out
  params, _ = checkpoint.load_run(tiny_run, step=5)
  assert "blocks/attn/w_q" in out and "d=32" in out
  assert f"{sum(x.size for x in jax.tree.leaves(params)):,} parameters" in out
  assert cli.main(["catalog", "--checkpoint", tiny_run, "--step", "7"]) == 2
  assert "holds steps [5, 10]" in capsys.readouterr().err
