"""Committed base models: stored in float16 by hash, read without training, refused when changed."""

import hashlib
import os
import shutil

import numpy as np
import pytest

from experiments import model_store, models
from experiments.commands import models as models_cmd


def test_digest_is_sha256_of_names_dtypes_shapes_and_bytes():
  a = {"b": np.arange(6, dtype=np.float16).reshape(2, 3), "a": np.ones(2, np.float16)}
  h = hashlib.sha256()
  for name in ("a", "b"):
    h.update(f"{name}|{a[name].dtype.str}|{a[name].shape}|".encode())
    h.update(a[name].tobytes())
  assert model_store.digest(a) == h.hexdigest()
  assert model_store.digest({**a, "b": a["b"].reshape(3, 2)}) != h.hexdigest()  # shape counts


def test_save_rounds_to_float16_and_a_changed_file_is_refused(tmp_path):
  w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  path = str(tmp_path / "m" / "seed-0")
  meta = model_store.save(path, {"w": w, "step": np.array(3)}, {"name": "m"})
  arrays, got = model_store.load(path)
  assert arrays["w"].dtype == np.float16 and arrays["step"].dtype == np.array(3).dtype
  np.testing.assert_array_equal(arrays["w"], w.astype(np.float16))
  assert got["sha256"] == meta["sha256"] and not os.path.exists(path + f".tmp-{os.getpid()}")
  np.savez(os.path.join(path, "params.npz"), w=arrays["w"] * 2, step=arrays["step"])
  with pytest.raises(ValueError, match="does not match the sha256") as e:
    model_store.load(path)
  assert "\n" not in str(e.value) and "Fix:" in str(e.value)
  rows = model_store.verify(lambda n, s: "k", str(tmp_path))
  assert rows == [{"name": "m", "seed": 0, "ok": False, "why": rows[0]["why"]}]


def test_every_committed_model_verifies_and_covers_the_trained_regime():
  rows = models.verify()
  assert rows and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
  got = {(r["name"], r["seed"]) for r in rows}
  reported = {(n, s) for n in models.STORED for s in (0, 1, 2, 3, 4, 10, 11, 12, 13, 14)}
  assert got >= reported  # the seeds of the kept and the confirmatory versions (issue 47)
  assert got - reported == {  # tuning seeds: lora's and kv's (v3: 100; v4: 110, 111)
      ("micro-20", 100), ("mini-20", 100), (models.LONG_TRAINED, 100),
      *((n, s) for n in ("pico-20", "micro-20", "mini-20", models.LONG_TRAINED)
        for s in (110, 111))}
  for name in models.STORED:
    card = models.model_card(name)
    assert card["tokens_per_param"] >= models.TOKENS_PER_PARAM


def test_a_committed_model_loads_without_training_and_its_heldout_loss_recomputes(tmp_path):
  params, cfg = models.base_model("pico-20", 0, root=str(tmp_path))
  assert not os.path.exists(tmp_path / "cache")  # read from results/models, nothing trained
  meta = model_store.read_meta(model_store.folder("pico-20", 0))
  again = models.heldout_loss(params, cfg)
  assert again["loss"] == pytest.approx(meta["heldout"]["loss"], rel=1e-5)
  assert models.base_model_info("pico-20", 0, root=str(tmp_path))["bits_per_byte"] == (
      pytest.approx(meta["heldout"]["bits_per_byte"]))
  assert models.heldout_bits("pico-20", range(5)) == pytest.approx(np.mean(
      [model_store.read_meta(model_store.folder("pico-20", s))["heldout"]["bits_per_byte"]
       for s in range(5)]))
  assert models.heldout_bits("pico-20", [0, 99]) is None  # seed 99 is not committed


def test_a_stale_committed_model_names_the_fix(tmp_path, monkeypatch):
  root = tmp_path / "models"
  shutil.copytree(model_store.folder("pico-20", 0), root / "pico-20" / "seed-0")
  monkeypatch.setattr(model_store, "MODELS_DIR", str(root))
  meta = model_store.read_meta(str(root / "pico-20" / "seed-0"))
  arrays, _ = model_store.load(str(root / "pico-20" / "seed-0"))
  model_store.save(str(root / "pico-20" / "seed-0"), arrays, {**meta, "key": "0" * 16})
  with pytest.raises(ValueError, match="retrain it"):
    models.committed("pico-20", 0)
  assert models_cmd.main(["--verify"]) == 1
