"""`evaluate` against a per-position reference; the `eval` command on runs and HF folders."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import data
from experiments.commands import eval as eval_
from experiments.train import checkpoint
from tests.experiments.conftest import corrupt

TEXT = b"def f(x):\n    return x * 2  # doubles\n" * 3


def test_evaluate_matches_a_per_position_float64_reference():
  cfg = transformer.preset("tiny", d_model=32, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = np.frombuffer(TEXT[:23], np.uint8).astype(np.int32)
  T = 4  # 6 windows, the last one partly padded
  result = eval_.evaluate(params, cfg, tokens, seq_len=T, batch_size=4)
  apply = jax.jit(transformer.Transformer(cfg).apply)
  nll = []
  for t in range(1, len(tokens)):  # target t sees the tokens since the start of its window
    start = (t - 1) // T * T
    logits = np.asarray(apply({"params": params}, jnp.asarray(tokens[None, start:t]))[0, -1],
                        np.float64)
    log_z = np.log(np.exp(logits - logits.max()).sum()) + logits.max()
    nll.append(log_z - logits[tokens[t]])
  assert result.tokens == result.bytes == len(tokens) - 1
  np.testing.assert_allclose(result.loss, np.mean(nll), rtol=1e-5)
  np.testing.assert_allclose(result.bits_per_byte, np.mean(nll) / math.log(2), rtol=1e-5)
  np.testing.assert_allclose(result.perplexity, np.exp(np.mean(nll)), rtol=1e-5)
  # Bytes and tokens differ for a tokenizer: the loss is per byte, `loss_per_token` per token.
  halved = eval_.evaluate(params, cfg, tokens, n_bytes=2 * (len(tokens) - 1), seq_len=T)
  np.testing.assert_allclose(halved.loss, result.loss / 2, rtol=1e-6)
  np.testing.assert_allclose(halved.loss_per_token, result.loss_per_token, rtol=1e-6)
  with pytest.raises(ValueError, match="seq_len=17 must lie in"):
    eval_.evaluate(params, cfg, tokens, seq_len=17)
  with pytest.raises(ValueError, match="outside the model's vocabulary"):
    eval_.evaluate(params, cfg, np.array([1, 300]))


def _last_json(out: str) -> dict:
  return json.loads(out.strip().splitlines()[-1])


def test_eval_command_on_a_run_and_on_a_hugging_face_folder(tiny_run, tmp_path, capsys):
  text = tmp_path / "text.txt"
  text.write_bytes(TEXT)
  # Without --seq-len a run is scored with the context it trained on (32 here, not max_len).
  assert eval_.main(["--checkpoint", tiny_run, "--data", str(text)]) == 0
  got = _last_json(capsys.readouterr().out)
  params, cfg = checkpoint.load_run(tiny_run)
  want = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32)
  assert got["tokens"] == len(TEXT) - 1 and got["bytes"] == len(TEXT) - 1
  np.testing.assert_allclose(got["loss"], want.loss, rtol=1e-6)
  np.testing.assert_allclose(got["bits_per_byte"], got["loss"] / math.log(2), rtol=1e-9)
  assert got["loss"] < math.log(256)  # 10 steps of training already beat the uniform guess
  # The same model exported to a Hugging Face folder (byte vocabulary, no tokenizer files).
  transformer.to_hf(params, cfg, tmp_path / "hf")
  assert eval_.main(["--hf", str(tmp_path / "hf"), "--data", str(text), "--seq-len", "32"]) == 0
  np.testing.assert_allclose(_last_json(capsys.readouterr().out)["loss"], want.loss, rtol=1e-5)
  # Folder data follows the rules of `train`.
  folder = tmp_path / "docs"
  os.makedirs(folder / ".git")
  (folder / ".git" / "HEAD").write_bytes(b"ref")
  (folder / "a.txt").write_bytes(TEXT)
  assert eval_.main(["--checkpoint", tiny_run, "--data", str(folder), "--seq-len", "32"]) == 0
  out = capsys.readouterr()
  assert "skipped 1 hidden and 0 binary files" in out.err
  assert _last_json(out.out)["loss"] == pytest.approx(got["loss"], rel=1e-6)


def test_eval_on_a_damaged_run_warns_or_fails_in_one_line(tiny_run_copy, tmp_path, capsys):
  text = tmp_path / "text.txt"
  text.write_bytes(TEXT)
  argv = ["--checkpoint", tiny_run_copy, "--data", str(text), "--seq-len", "32"]
  corrupt(tiny_run_copy, 10)
  assert eval_.main(argv) == 0
  out = capsys.readouterr()
  assert "checkpoints/10 is unreadable" in out.err and "Traceback" not in out.err
  params, cfg = checkpoint.load_run(tiny_run_copy, step=5)
  want = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32)
  assert _last_json(out.out)["loss"] == pytest.approx(want.loss, rel=1e-6)
  corrupt(tiny_run_copy, 5)
  assert eval_.main(argv) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: no readable checkpoint") and err.count("\n") == 1, err


def _projected_kv_fn(comp):
  """Reference for a 16-bit latent cache: K, V projected onto each head's leading basis
  columns in the plain (uncompressed) forward pass, the coefficients rounded to float16."""
  def project(x_BTKDh, basis_KDhDh, ranks):
    out = []
    for k, r in enumerate(ranks):
      P = basis_KDhDh[k][:, :r]
      c = (x_BTKDh[:, :, k] @ P).astype(jnp.float16).astype(jnp.float32)
      out.append(c @ P.T)
    return jnp.stack(out, 2)

  def kv_fn(l, k, v):
    return (project(k, comp.key_basis[l], comp.key_ranks[l]),
            project(v, comp.value_basis[l], comp.value_ranks[l]))

  return kv_fn


def test_eval_kv_ratio_scores_through_the_latent_cache(tiny_run, tmp_path, capsys):
  from analysis import kv
  from transformer import latent

  text, cal_text = tmp_path / "text.txt", tmp_path / "cal.txt"
  text.write_bytes(TEXT)
  cal_text.write_bytes(TEXT[::-1] * 4)
  args = ["--checkpoint", tiny_run, "--data", str(text), "--split", "all", "--seq-len", "32",
          "--calibration", str(cal_text)]
  assert eval_.main([*args, "--kv-ratio", "4", "--kv-alloc", "greedy"]) == 0
  got = _last_json(capsys.readouterr().out)
  params, cfg = checkpoint.load_run(tiny_run)
  # Independent reference: the same bases and ranks, K and V projected in the plain forward.
  cal = eval_.calibration_windows(np.frombuffer(cal_text.read_bytes(), np.uint8), 32)
  comp = kv.compress(params, cfg, cal, 4, "greedy", 16)
  fn = _projected_kv_fn(comp)
  want = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32,
                        logits_fn=lambda p, c, t: latent.forward(p, c, t, kv_fn=fn))
  np.testing.assert_allclose(got["loss"], want.loss, rtol=1e-4)
  assert got["kv_compression"] == pytest.approx(4.0)  # 16-bit coefficients at a quarter rank
  full = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32)
  np.testing.assert_allclose(got["loss_uncompressed"], full.loss, rtol=1e-6)
  assert got["kv_loss_rise"] == pytest.approx(got["loss"] / full.loss - 1, rel=1e-6)
  # Ratio and bits together: 32× with 4-bit coefficients is 8× fewer dimensions.
  assert eval_.main([*args, "--kv-ratio", "32", "--kv-bits", "4"]) == 0
  got = _last_json(capsys.readouterr().out)
  assert 32 <= got["kv_compression"] <= 48 and got["kv_bits"] == 4  # packed bytes round down
  # Full rank at 16 bits reproduces the uncompressed loss up to float16 coefficients.
  assert eval_.main([*args, "--kv-ratio", "1"]) == 0
  got = _last_json(capsys.readouterr().out)
  assert got["kv_compression"] == 1.0
  np.testing.assert_allclose(got["loss"], full.loss, rtol=1e-3)


def test_eval_kv_ratio_scores_the_same_text_and_refuses_overlapping_calibration(tiny_run,
                                                                               capsys):
  # The run trained on stdlib. The compression flags do not change the scored text: the
  # default split is `all` with or without them, so calibrating on the run's training split
  # would score text it calibrated on, which is refused in one line.
  base = ["--checkpoint", tiny_run, "--data", "stdlib", "--max-bytes", "3000"]
  assert eval_.main(base) == 0
  plain = _last_json(capsys.readouterr().out)
  assert eval_.main([*base, "--kv-ratio", "8"]) == 2
  err = capsys.readouterr().err.strip()
  assert "overlaps the scored text" in err and "--split val" in err and "\n" not in err
  assert plain["split"] == "all"
  # Held-out text: calibration from the training split, scoring the validation files.
  assert eval_.main([*base, "--split", "val", "--kv-ratio", "8"]) == 0
  out = capsys.readouterr()
  assert "calibration from the training split of stdlib" in out.err
  got = _last_json(out.out)
  assert got["split"] == "val" and got["kv_compression"] == pytest.approx(8.0)
  assert eval_.main([*base, "--split", "val"]) == 0
  val = _last_json(capsys.readouterr().out)
  assert (val["bytes"], val["tokens"]) == (got["bytes"], got["tokens"])  # the same text
  np.testing.assert_allclose(got["loss_uncompressed"], val["loss"], rtol=1e-6)


def test_text_segments_of_one_file_split_by_bytes_and_of_a_folder_by_file(tmp_path):
  one = tmp_path / "one.txt"
  one.write_bytes(b"x" * 1000)
  train, val = (eval_.text_segments(str(one), s, 0.1) for s in ("train", "val"))
  assert train == [(str(one.resolve()), 0, 900)] and val == [(str(one.resolve()), 900, None)]
  assert eval_.overlap(train, val) == []
  assert eval_.overlap(eval_.text_segments(str(one), "all"), val) == [str(one.resolve())]
  folder = tmp_path / "corpus"
  folder.mkdir()
  for i in range(40):
    (folder / f"f{i}.txt").write_text(f"file {i}\n" * 20)
  train, val = (eval_.text_segments(str(folder), s, 0.2) for s in ("train", "val"))
  corpus = data.load_corpus(str(folder), 0.2)  # the split `train` uses, file by file
  assert sorted(f for f, _, _ in val) == sorted(os.path.realpath(f) for f in corpus.val_files)
  assert eval_.overlap(train, val) == [] and len(train) + len(val) == 40


@pytest.mark.parametrize("extra, message", [
    (["--kv-ratio", "0.5"], "must be >= 1"),
    (["--kv-ratio", "2", "--kv-bits", "4"], "above the head width"),
    (["--kv-ratio", "2", "--kv-calibrate-steps", "-1"], "must be >= 0"),
])
def test_eval_kv_ratio_bad_input_one_line(tiny_run, tmp_path, capsys, extra, message):
  text, cal = tmp_path / "text.txt", tmp_path / "cal.txt"
  text.write_bytes(TEXT)
  cal.write_bytes(TEXT[::-1])
  assert eval_.main(["--checkpoint", tiny_run, "--data", str(text), "--split", "all",
                     "--calibration", str(cal), *extra]) == 2
  err = capsys.readouterr().err.strip()
  assert message in err and "\n" not in err


def test_eval_kv_ratio_without_calibration_data_is_one_line(tiny_run, tmp_path, capsys):
  params, cfg = checkpoint.load_run(tiny_run)
  transformer.to_hf(params, cfg, tmp_path / "hf")
  text = tmp_path / "text.txt"
  text.write_bytes(TEXT)
  assert eval_.main(["--hf", str(tmp_path / "hf"), "--data", str(text), "--split", "all",
                     "--seq-len", "32", "--kv-ratio", "4"]) == 2
  err = capsys.readouterr().err.strip()
  assert "no calibration text" in err and "--calibration" in err and "\n" not in err


def test_eval_kv_calibrate_steps_fits_the_projections_on_calibration_text(tiny_run, tmp_path,
                                                                          capsys):
  from analysis import kv
  from transformer import latent

  text, cal_text = tmp_path / "text.txt", tmp_path / "cal.txt"
  text.write_bytes(TEXT)
  cal_text.write_bytes(TEXT[::-1] * 4)
  assert eval_.main(["--checkpoint", tiny_run, "--data", str(text), "--split", "all",
                     "--seq-len", "32", "--calibration", str(cal_text), "--kv-ratio", "4",
                     "--kv-calibrate-steps", "20"]) == 0
  out = capsys.readouterr()
  got = _last_json(out.out)
  assert "20 Adam steps" in out.err
  assert got["kv_calibrate_steps"] == 20 and got["kv_pre_rope"] is False  # learned positions
  assert got["kv_compression"] == pytest.approx(4.0)  # the cache is the SVD's
  # The library on the same calibration windows; the scored text is not among them.
  params, cfg = checkpoint.load_run(tiny_run)
  cal = eval_.calibration_windows(np.frombuffer(cal_text.read_bytes(), np.uint8), 32)
  svd = kv.compress(params, cfg, cal, 4)
  comp = kv.calibrate(params, cfg, svd, cal, 20)
  assert got["kv_basis_bytes"] == latent.basis_bytes(comp) == 2 * latent.basis_bytes(svd)
  want = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32,
                        logits_fn=eval_.latent_logits_fn(comp))
  np.testing.assert_allclose(got["loss"], want.loss, rtol=1e-5)
  assert got["kv_loss_rise"] == pytest.approx(got["loss"] / got["loss_uncompressed"] - 1)


def test_eval_kv_ratio_on_a_rope_model_compresses_keys_before_rope(tmp_path, capsys):
  from analysis import kv

  cfg = transformer.llama_config(vocab_size=256, d_model=32, n_layers=2, n_heads=4,
                                 n_kv_heads=2, d_ff=48, max_len=32)
  transformer.to_hf(transformer.init(cfg, jax.random.key(0)), cfg, tmp_path / "hf")
  cfg, params = transformer.from_hf(str(tmp_path / "hf"))
  text, cal_text = tmp_path / "text.txt", tmp_path / "cal.txt"
  text.write_bytes(TEXT)
  cal_text.write_bytes(TEXT[::-1] * 4)
  args = ["--hf", str(tmp_path / "hf"), "--data", str(text), "--seq-len", "32",
          "--calibration", str(cal_text), "--kv-ratio", "4"]
  assert eval_.main(args) == 0
  pre = _last_json(capsys.readouterr().out)
  assert pre["kv_pre_rope"] is True and pre["kv_compression"] == pytest.approx(4.0)
  cal = eval_.calibration_windows(np.frombuffer(cal_text.read_bytes(), np.uint8), 32)
  comp = kv.compress(params, cfg, cal, 4)
  assert comp.pre_rope
  want = eval_.evaluate(params, cfg, np.frombuffer(TEXT, np.uint8), seq_len=32,
                        logits_fn=eval_.latent_logits_fn(comp))
  np.testing.assert_allclose(pre["loss"], want.loss, rtol=1e-5)
  assert eval_.main([*args, "--kv-post-rope"]) == 0
  post = _last_json(capsys.readouterr().out)
  assert post["kv_pre_rope"] is False and post["kv_compression"] == pre["kv_compression"]
  assert post["loss"] != pre["loss"]


def test_the_stdlib_held_out_text_is_its_val_and_test_files():
  """`--split val` scores every file `train` holds out: for `stdlib`, `val` and `test` together."""
  raw, note = eval_.read_text("stdlib", "val")
  corpus = data.load_corpus("stdlib")
  assert raw == corpus.heldout.tobytes() and note == ""
  assert len(raw) == len(corpus.val) + len(corpus.test)
