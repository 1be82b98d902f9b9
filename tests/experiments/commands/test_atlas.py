"""The atlas CLI end to end on a random-init preset, with its numbers checked."""

import json
import os

import chex
import jax
import numpy as np

import transformer
from experiments.commands import atlas


def test_atlas_cli_writes_a_report_with_correct_numbers(tmp_path):
  argv = ["--model", "tiny", "--seq-len", "8", "--k", "4", "--krylov-dim", "64", "--out",
          str(tmp_path), "--run-id", "t"]
  assert atlas.main(argv) == 0
  run_dir = tmp_path / "atlas" / "t"
  for name in ("report.md", "results.json", "config.json", "spectra.png", "depth.png",
               "jacobian.png", "token_dependency.png", "attention_entropy.png"):
    assert os.path.getsize(run_dir / name) > 0, name
  def refuse(token):
    raise ValueError(f"non-strict JSON constant {token}")

  results = json.loads((run_dir / "results.json").read_text(), parse_constant=refuse)
  config = json.loads((run_dir / "config.json").read_text())
  assert config["atlas"]["seq_len"] == 8 and config["model"]["d_model"] == 64

  cfg = transformer.preset("tiny")
  params = transformer.init(cfg, jax.random.key(0))
  w_q = np.asarray(params["blocks"]["attn"]["w_q"], np.float64)
  np.testing.assert_allclose(results["weights"]["blocks/attn/w_q"]["singular_values"],
                             np.linalg.svd(w_q, compute_uv=False), rtol=1e-4)
  jac = results["jacobian"]
  np.testing.assert_allclose(jac["layer_sv"][0], jac["dense_sv_layer0"], rtol=1e-3)
  np.testing.assert_allclose(jac["spectral_radius"][0], jac["dense_spectral_radius_layer0"],
                             rtol=1e-2)
  causality = results["causality"]
  assert causality["block_lower_triangular"] and causality["leak"] == 0
  assert all(np.ravel(causality["attention_full_rank"]))
  report = (run_dir / "report.md").read_text()
  assert "block lower-triangular: **True**" in report and "![jacobian](jacobian.png)" in report


def test_atlas_loads_a_hugging_face_checkpoint(tmp_path):
  cfg = transformer.preset("llama-tiny")
  params = transformer.init(cfg, jax.random.key(0))
  transformer.to_hf(params, cfg, tmp_path / "hf")
  got_cfg, got, source = atlas.load_model(atlas.AtlasConfig(hf=str(tmp_path / "hf")))
  assert got_cfg == cfg and source.startswith("Hugging Face")
  chex.assert_trees_all_equal(got, params)


def test_atlas_reads_a_chosen_checkpoint_step_and_refuses_long_inputs(tiny_run, tmp_path,
                                                                      capsys):
  from experiments.train import checkpoint
  got_cfg, got, source = atlas.load_model(atlas.AtlasConfig(checkpoint=tiny_run, step=5))
  params, cfg = checkpoint.load_run(tiny_run, step=5)
  assert got_cfg == cfg and "step 5" in source
  chex.assert_trees_all_equal(got, params)
  latest, _ = checkpoint.load_run(tiny_run)
  assert not np.array_equal(latest["blocks"]["attn"]["w_q"], params["blocks"]["attn"]["w_q"])
  argv = ["--checkpoint", tiny_run, "--seq-len", "65", "--out", str(tmp_path)]
  assert atlas.main(argv) == 2
  err = capsys.readouterr().err
  assert "--seq-len 65 must lie in [1, max_len=64]" in err and err.count("\n") == 1
  assert not os.path.exists(tmp_path / "atlas")


def test_atlas_on_a_damaged_run_is_a_one_line_error(tiny_run_copy, tmp_path, capsys):
  from tests.experiments.conftest import corrupt
  corrupt(tiny_run_copy, 5)
  corrupt(tiny_run_copy, 10)
  assert atlas.main(["--checkpoint", tiny_run_copy, "--out", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: no readable checkpoint") and err.count("\n") == 1, err
