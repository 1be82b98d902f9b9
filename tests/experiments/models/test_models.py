"""The shared base models: sizes, families, recipes, and what `base_model_info` reports."""

import json
import math
import os
import shutil

import jax
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.commands import models as models_cli
from experiments.models import trained

SIZED = [*models.FAMILIES["gpt"], *models.FAMILIES["llama"], *models.LONG.values()]


def _count_by_hand(cfg) -> int:
  """Parameters of `cfg` from the matrix catalog (DESIGN.md), independently of any init."""
  d, H, K, dh, F, V = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff, cfg.vocab_size
  attn = d * H * dh + 2 * d * K * dh + H * dh * d + (H * dh + 2 * K * dh + d) * cfg.use_bias
  ffn = (3 if cfg.activation == "swiglu" else 2) * d * F + (F + d) * cfg.use_bias
  norm = d * (2 if cfg.norm == "layernorm" else 1)
  outside = V * d + (cfg.max_len * d if cfg.positions == "learned" else 0)
  outside += 0 if cfg.tie_embeddings else d * V
  return outside + cfg.n_layers * (attn + ffn + 2 * norm) + norm


@pytest.mark.parametrize("name", SIZED)
def test_param_count_equals_the_matrix_catalog(name):
  assert models.param_count(name) == _count_by_hand(models.RECIPES[name].cfg)


@pytest.mark.parametrize("name", ["mini", "llama-mini"])
def test_param_count_equals_the_arrays_of_an_actual_init(name):
  # One init per family: each distinct shape costs an XLA compile of the stack (~5 s on 2
  # busy cores); the catalog count above covers every size.
  cfg = models.RECIPES[name].cfg
  arrays = jax.tree.leaves(transformer.init(cfg, jax.random.key(0)))
  assert models.param_count(name) == sum(np.asarray(a).size for a in arrays)
  assert _count_by_hand(cfg) == models.param_count(name)


def test_shapes_are_configs_with_cards_from_the_catalog_and_never_base_models(tmp_path):
  assert models.SHAPES and not set(models.SHAPES) & set(models.RECIPES)
  for name, cfg in models.SHAPES.items():
    assert models.config(name) is cfg
    card = models.model_card(name)
    assert card["params"] == models.param_count(name) == _count_by_hand(cfg)
    assert (card["family"], card["d_model"], card["max_len"]) == (
        models.family(cfg), cfg.d_model, cfg.max_len)
    assert card["steps"] is None and card["tokens_seen"] is None  # no recipe
    with pytest.raises(ValueError, match="unknown"):  # nothing trains a shape
      models.base_model(name, 0, root=str(tmp_path))
  assert models.model_card("nano")["params"] == 34_688
  assert [r["name"] for r in models.summary(str(tmp_path))] == list(
      dict.fromkeys([*SIZED, *models.RECIPES]))  # `models` lists recipes only
  assert models.config("mini") is models.RECIPES["mini"].cfg
  with pytest.raises(ValueError, match="name='huge' is unknown"):
    models.config("huge")


def test_each_family_spans_at_least_8x_in_parameters_at_matched_sizes():
  gpt = [models.param_count(n) for n in models.FAMILIES["gpt"]]
  llama = [models.param_count(n) for n in models.FAMILIES["llama"]]
  for sizes in (gpt, llama):
    assert all(2 * a <= b for a, b in zip(sizes, sizes[1:], strict=False))
    assert sizes[-1] >= 8 * sizes[0]
  for fam, names in models.CPU_SCALE.items():  # the sizes a full run on CPU measures
    assert names == models.FAMILIES[fam][:3]
    assert models.param_count(names[-1]) >= 8 * models.param_count(names[0])
  # Llama's SwiGLU + GQA shapes are chosen to match GPT's sizes within 2%.
  np.testing.assert_allclose(llama, gpt, rtol=0.02)
  assert models.FAMILIES["gpt"][2] == "small"


@pytest.mark.parametrize("fam", ["gpt", "llama"])
def test_families_are_what_their_names_say(fam):
  for name in (*models.FAMILIES[fam], models.LONG[fam]):
    cfg = models.RECIPES[name].cfg
    card = models.model_card(name)
    assert card["family"] == models.family(cfg) == fam
    if fam == "gpt":
      assert (cfg.positions, cfg.norm, cfg.use_bias) == ("learned", "layernorm", True)
      assert cfg.activation in ("gelu", "gelu_tanh") and cfg.n_kv_heads == cfg.n_heads
    else:
      assert (cfg.positions, cfg.norm, cfg.activation) == ("rope", "rmsnorm", "swiglu")
      assert cfg.n_kv_heads == cfg.n_heads // 2 and not cfg.use_bias
  # The long-context model is its family's middle size with a longer reach.
  long, middle = models.RECIPES[models.LONG[fam]], models.RECIPES[models.FAMILIES[fam][2]]
  assert long.cfg == middle.cfg.replace(max_len=long.cfg.max_len)
  assert long.seq_len >= 1024 and long.cfg.max_len >= 2 * long.seq_len


def test_the_regime_long_model_is_llama_mini_20_read_at_1024_on_20_tokens_per_param():
  """The context axis of a claim registered under the trained regime reads a model of the
  regime: llama-mini-20's parameters exactly (RoPE: max_len adds none), 2,048 tokens a step
  like it, 20 tokens per parameter, at T = 1024; a claim on an older size keeps its own."""
  long, mini = models.RECIPES[models.LONG_TRAINED], models.RECIPES["llama-mini-20"]
  assert long.cfg == mini.cfg.replace(max_len=1024) and long.seq_len == 1024
  assert long.batch_size * long.seq_len == mini.batch_size * mini.seq_len
  assert models.param_count(models.LONG_TRAINED) == models.param_count("llama-mini-20")
  assert long.learning_rate == mini.learning_rate
  card = models.model_card(models.LONG_TRAINED)
  assert 20 <= card["tokens_per_param"] < 20 + 2048 / card["params"]
  assert models.LONG_TRAINED in models.STORED
  for model in (*models.TRAINED["gpt"], *models.TRAINED["llama"]):
    assert models.model_at_length("x", model, 512) == models.LONG_TRAINED
  assert models.model_at_length("x", "small", 512) == models.LONG["llama"]
  with pytest.raises(ValueError, match="T=2048"):
    models.model_at_length("x", "mini-20", 2048)


def test_every_size_sees_the_tokens_of_small_so_tokens_per_param_falls():
  small = models.RECIPES["small"]
  tokens = small.steps * small.batch_size * small.seq_len
  cards = [models.model_card(n) for n in SIZED]
  assert {c["tokens_seen"] for c in cards} == {tokens} == {400 * 16 * 128}
  for c in cards:
    assert c["tokens_per_param"] == pytest.approx(tokens / c["params"])
  for fam in ("gpt", "llama"):
    per_param = [models.model_card(n)["tokens_per_param"] for n in models.FAMILIES[fam]]
    assert per_param == sorted(per_param, reverse=True)


def test_small_and_quick_keep_their_cache_keys():
  # Committed results were computed on these cached models; a changed key retrains them.
  assert models.RECIPES["small"].key(0) == "7e41e2256b5941e1"
  assert models.RECIPES["quick"].key(0) == "1c3ebf3871d0b036"


TINY_LLAMA = models.Recipe(
    transformer.preset("llama-tiny", d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=48,
                       max_len=16), steps=2, batch_size=2, seq_len=8, warmup_steps=1)


@pytest.fixture(scope="module")
def trained_root(tmp_path_factory):
  """A cache root holding `llama-mini` (replaced by `TINY_LLAMA`) at seed 1, trained for real."""
  root = str(tmp_path_factory.mktemp("runs"))
  with pytest.MonkeyPatch.context() as mp:
    mp.setitem(models.RECIPES, "llama-mini", TINY_LLAMA)
    trained._load.cache_clear()
    models.base_model_info("llama-mini", 1, root=root)  # trains 2 steps, in one chunk
  trained._load.cache_clear()
  return root


@pytest.fixture
def tiny_llama(monkeypatch):
  monkeypatch.setitem(models.RECIPES, "llama-mini", TINY_LLAMA)
  trained._load.cache_clear()
  yield TINY_LLAMA.cfg
  trained._load.cache_clear()


def test_base_model_info_reports_the_recipe_and_held_out_loss(tmp_path, trained_root,
                                                               tiny_llama):
  root = str(tmp_path / "runs")
  shutil.copytree(trained_root, root)
  info = models.base_model_info("llama-mini", 1, root=root)  # loads
  n = sum(np.asarray(a).size for a in jax.tree.leaves(transformer.init(tiny_llama,
                                                                        jax.random.key(0))))
  assert info["params"] == n and info["tokens_seen"] == 2 * 2 * 8
  assert info["tokens_per_param"] == pytest.approx(32 / n)
  assert (info["family"], info["d_model"], info["n_kv_heads"], info["seq_len"]) == (
      "llama", 16, 1, 8)
  assert math.isfinite(info["val_loss"]) and 0 < info["val_loss"] < 1.5 * math.log(256)
  assert info["bits_per_byte"] == pytest.approx(info["val_loss"] / math.log(2))
  assert models.cached_seeds("llama-mini", root) == [1]
  assert models.cached_seeds("llama-base", root) == []
  meta_path = os.path.join(info["path"], "meta.json")
  with open(meta_path) as f:
    assert json.load(f)["tokens_per_param"] == info["tokens_per_param"]
  # An entry written before the card existed still reports it, from the recipe.
  with open(meta_path) as f:
    old = {k: v for k, v in json.load(f).items()
           if k in ("name", "seed", "cfg", "recipe", "train_loss", "val_loss", "diverged")}
  with open(meta_path, "w") as f:
    json.dump(old, f)
  trained._load.cache_clear()
  again = models.base_model_info("llama-mini", 1, root=root)
  assert {k: again[k] for k in info if k != "path"} == {k: info[k] for k in info if k != "path"}


def test_cli_trains_missing_seeds_with_progress_then_lists_them(tmp_path, trained_root,
                                                                tiny_llama, capsys):
  root = str(tmp_path)
  assert models_cli.parse_seeds(["0-2", "4,1"]) == (0, 1, 2, 4)
  with pytest.raises(ValueError, match="--seeds"):
    models_cli.parse_seeds(["a-b"])
  assert models_cli.main(["--train", "llama-mini", "--seeds", "0-1", "--root", root]) == 0
  out, err = capsys.readouterr()
  assert "llama-mini seeds 0-1: 2/2" in err  # the progress lines
  row = next(line for line in out.splitlines() if line.startswith("| llama-mini |"))
  assert "| 0-1 |" in row and "| llama |" in row
  assert models.cached_seeds("llama-mini", root) == [0, 1]
  # Trained in chunks for the progress bar (and beside seed 0), seed 1 equals the model trained
  # alone in one chunk, and `train_loss` is still the mean over all steps.
  chunked = models.base_model_info("llama-mini", 1, root=root)
  plain = models.base_model_info("llama-mini", 1, root=trained_root)
  assert chunked["train_loss"] == pytest.approx(plain["train_loss"], rel=1e-5)
  assert chunked["val_loss"] == pytest.approx(plain["val_loss"], rel=1e-5)
