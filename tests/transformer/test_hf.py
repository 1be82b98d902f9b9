"""Hugging Face conversion against tiny random `transformers` models (no download).

Every weight of the reference model is overwritten with seeded noise (norm scales around 1,
biases non-zero), so a swapped, untransposed or mis-split matrix changes the logits by O(1),
far above the tolerance. The reference runs in float64 (the same float32 weights, upcast): the
exact logits of those weights, so the comparison measures our float32 rounding alone, not
torch's too, and does not depend on either library's thread count or kernels. The tolerance is
scaled to the logits (`assert_logits_close`).
"""

import functools
import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import transformer
from transformer import hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

VOCAB, T = 96, 16
# Against the float64 reference, in units of `scale = max |logits|`: the largest error of a
# float32 forward pass (measured <= 20 eps·scale = 2.4e-6·scale over the 7 conversion cases,
# transformers 5.25.0, torch 2.13 CPU) and the mean error (measured <= 1.5 eps·scale). The max
# bound leaves 40x for kernels and thread counts; the mean bound catches a small error made
# everywhere (a systematic one), which the max bound would let through.
MAX_ERROR, MEAN_ERROR = 1e-4, 2e-6


@functools.partial(jax.jit, static_argnums=0)
def _logits(cfg, params, tokens_BT):
  return transformer.Transformer(cfg).apply({"params": params}, tokens_BT)


def _tokens(seed=0):
  return np.random.default_rng(seed).integers(0, VOCAB, (3, T))


@pytest.fixture(scope="module")
def torch_hf():
  """`(torch, transformers)`; the conversion tests need both, the error tests neither."""
  return pytest.importorskip("torch"), pytest.importorskip("transformers")


def _randomize(torch, model, seed):
  """Seeded noise on every parameter: norm scales near 1, everything else around 0."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = 0.3 * torch.randn(p.shape, generator=g)
      is_scale = ("ln_" in name or "norm" in name) and name.endswith("weight")
      p.copy_(1 + noise if is_scale else noise)
  return model.eval()


def _hf_logits(torch, model, tokens_BT):
  """The reference logits in float64 (on a float64 copy of `model`; `model` is unchanged)."""
  import copy

  with torch.no_grad():
    return copy.deepcopy(model).double()(torch.tensor(tokens_BT)).logits.numpy()


def assert_logits_close(got, want64):
  """`got` (float32) against the float64 reference, with a tolerance scaled to the logits."""
  err = np.abs(np.asarray(got, np.float64) - want64)
  scale = float(np.abs(want64).max())
  assert err.max() <= MAX_ERROR * scale, (err.max(), scale, np.unravel_index(err.argmax(),
                                                                               err.shape))
  assert err.mean() <= MEAN_ERROR * scale, (err.mean(), scale)


def _check_against_torch(torch, model, path, **save_kw):
  model.save_pretrained(path, safe_serialization=True, **save_kw)
  cfg, params = transformer.from_hf(path)
  tokens = _tokens()
  want = _hf_logits(torch, model, tokens)
  got = np.asarray(_logits(cfg, params, tokens))
  assert want.std() > 0.5, "reference logits too flat to tell a wrong mapping apart"
  assert_logits_close(got, want)
  return cfg


@pytest.mark.parametrize("n_head, extra, sharded", [
    (1, {}, False),
    (2, {"activation_function": "gelu", "n_inner": 48}, True),
    (8, {"tie_word_embeddings": False}, False),
])
def test_gpt2_logits_match_transformers(torch_hf, tmp_path, n_head, extra, sharded):
  torch, tf = torch_hf
  config = tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=n_head, n_positions=32,
                         bos_token_id=0, eos_token_id=0, **extra)
  model = _randomize(torch, tf.GPT2LMHeadModel(config), seed=n_head)
  cfg = _check_against_torch(torch, model, tmp_path, **({"max_shard_size": "20KB"} if sharded
                                                        else {}))
  assert (tmp_path / hf.INDEX_FILE).is_file() == sharded
  assert (cfg.n_heads, cfg.d_ff) == (n_head, extra.get("n_inner", 128))
  assert cfg.tie_embeddings == extra.get("tie_word_embeddings", True)
  assert cfg.activation == {"gelu": "gelu"}.get(extra.get("activation_function"), "gelu_tanh")


LLAMA_CASES = {
    "mha-untied": dict(num_attention_heads=4, num_key_value_heads=4),
    "gqa-tied-theta": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                           rope_theta=1_000_000.0),
    "mqa-head_dim": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                         rope_theta=500_000.0),
    "gqa-bias": dict(num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
                     mlp_bias=True),
}


@pytest.mark.parametrize("case", sorted(LLAMA_CASES))
def test_llama_logits_match_transformers(torch_hf, tmp_path, case):
  torch, tf = torch_hf
  kw = LLAMA_CASES[case]
  config = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, max_position_embeddings=32, bos_token_id=0,
                          eos_token_id=0, **kw)
  model = _randomize(torch, tf.LlamaForCausalLM(config), seed=len(case))
  cfg = _check_against_torch(torch, model, tmp_path)
  assert (cfg.n_heads, cfg.n_kv_heads) == (4, kw["num_key_value_heads"])
  assert cfg.d_head == kw.get("head_dim", 8)
  assert cfg.rope_theta == kw.get("rope_theta", 10_000.0)
  assert cfg.tie_embeddings == kw.get("tie_word_embeddings", False)
  assert cfg.use_bias == kw.get("attention_bias", False)


def _random_params(cfg, seed):
  """Noise of every parameter's shape (norm scales near 1, biases non-zero); no compile."""
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda s: (1.0 + 0.3 * rng.standard_normal(s.shape)).astype(np.float32)
                      if s.ndim == 1 else 0.3 * rng.standard_normal(s.shape, np.float32), shapes)


ROUND_TRIP_CONFIGS = {
    "gpt2": transformer.gpt2_config(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                    max_len=32, tie_embeddings=False),
    "llama": transformer.llama_config(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                      n_kv_heads=2, d_ff=48, max_len=32, rope_theta=20_000.0,
                                      norm_eps=1e-6),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_CONFIGS))
def test_to_hf_opens_in_transformers_with_same_logits(torch_hf, tmp_path, name):
  torch, tf = torch_hf
  cfg = ROUND_TRIP_CONFIGS[name]
  params = _random_params(cfg, seed=3)
  transformer.to_hf(params, cfg, tmp_path)
  model = tf.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
  assert type(model).__name__ == hf.FAMILIES[name].architecture
  tokens = _tokens(1)
  want = np.asarray(_logits(cfg, params, tokens))
  assert want.std() > 0.5
  assert_logits_close(want, _hf_logits(torch, model, tokens))
  # And back: from_hf(to_hf(params)) is the identity, bit for bit.
  cfg_back, params_back = transformer.from_hf(tmp_path)
  assert cfg_back == cfg
  jax.tree.map(np.testing.assert_array_equal, params_back, params)


def test_from_hf_does_not_import_torch(saved):
  folder, _ = saved
  code = ("import sys, transformer; cfg, p = transformer.from_hf(sys.argv[1]); "
          "assert 'torch' not in sys.modules, 'torch was imported'; print(cfg.n_kv_heads)")
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                       text=True, env=env, check=True, cwd=os.path.dirname(transformer.__path__[0]))
  assert out.stdout.strip() == "4"


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory):
  cfg = ROUND_TRIP_CONFIGS["gpt2"]
  params = _random_params(cfg, seed=5)
  folder = tmp_path_factory.mktemp("gpt2")
  transformer.to_hf(params, cfg, folder)
  return folder, params


@pytest.fixture
def saved(saved_once, tmp_path):
  """A fresh copy of a GPT-2-family checkpoint written by `to_hf` (no torch), and its params."""
  folder, params = saved_once
  shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
  return tmp_path, params


def _edit_weights(folder, edit):
  file = folder / hf.WEIGHTS_FILE
  tensors = load_file(file)
  edit(tensors)
  save_file(tensors, file, metadata={"format": "pt"})


def test_bare_body_names_without_prefix_load(saved):
  folder, params = saved
  _edit_weights(folder, lambda t: t.update(
      {k.removeprefix("transformer."): t.pop(k) for k in list(t)}))
  _, loaded = transformer.from_hf(folder)
  jax.tree.map(np.testing.assert_array_equal, loaded, params)


def test_bfloat16_checkpoint_round_trips_exactly(tmp_path):
  cfg = ROUND_TRIP_CONFIGS["llama"].replace(param_dtype="bfloat16")
  params = jax.tree.map(lambda w: w.astype(jnp.bfloat16), _random_params(cfg, seed=7))
  transformer.to_hf(params, cfg, tmp_path)
  assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
  cfg_bf16, params_bf16 = transformer.from_hf(tmp_path, param_dtype="bfloat16")
  cfg_f32, params_f32 = transformer.from_hf(tmp_path)
  assert (cfg_bf16, cfg_f32.param_dtype) == (cfg, "float32")
  for loaded, dtype in ((params_bf16, jnp.bfloat16), (params_f32, jnp.float32)):
    assert {x.dtype for x in jax.tree.leaves(loaded)} == {jnp.dtype(dtype)}
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a, np.float32),
                                                            np.asarray(b, np.float32)),
                 loaded, params)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"),
     r"missing tensor 'transformer\.h\.1\.mlp\.c_fc\.weight'"),
    (lambda t: t.update({"transformer.h.0.attn.c_attn.weight": np.zeros((32, 64), np.float32)}),
     r"'transformer\.h\.0\.attn\.c_attn\.weight' has shape \(32, 64\).*\(32, 96\)"),
    (lambda t: t.update({"transformer.h.2.ln_1.weight": np.ones(32, np.float32)}),
     r"does not use: \['transformer\.h\.2\.ln_1\.weight'\]"),
])
def test_bad_tensors_raise_naming_the_tensor(saved, edit, message):
  folder, _ = saved
  _edit_weights(folder, edit)
  with pytest.raises(ValueError, match=message):
    transformer.from_hf(folder)


@pytest.mark.parametrize("damage", ["truncated", "garbage_header"])
def test_corrupt_safetensors_raise(saved, damage):
  folder, _ = saved
  file = folder / hf.WEIGHTS_FILE
  data = file.read_bytes()
  file.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\xff" * 8 + data[8:])
  with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors file"):
    transformer.from_hf(folder)


def test_missing_shard_raises(saved):
  folder, _ = saved
  index = {"weight_map": {"transformer.wte.weight": "model-00002-of-00002.safetensors"}}
  (folder / hf.INDEX_FILE).write_text(json.dumps(index))
  with pytest.raises(ValueError, match=r"shard 'model-00002-of-00002\.safetensors'"):
    transformer.from_hf(folder)


def _write_config(folder, **fields):
  folder.mkdir(exist_ok=True)
  (folder / "config.json").write_text(json.dumps(fields))


LLAMA_JSON = dict(model_type="llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4)


@pytest.mark.parametrize("fields, message", [
    (dict(model_type="bert", architectures=["BertModel"]),
     r"unsupported architecture model_type='bert'"),
    ({**LLAMA_JSON, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
     r"rope_type='llama3'"),
    ({**LLAMA_JSON, "hidden_act": "gelu"}, r"hidden_act='gelu'"),
    ({**LLAMA_JSON, "attention_bias": True}, r"attention_bias=True and mlp_bias=False"),
    ({k: v for k, v in LLAMA_JSON.items() if k != "hidden_size"}, r"no field 'hidden_size'"),
    (dict(model_type="gpt2", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=3, n_positions=32),
     r"d_head"),
])
def test_unsupported_config_raises(tmp_path, fields, message):
  _write_config(tmp_path, **fields)
  with pytest.raises(ValueError, match=message):
    transformer.from_hf(tmp_path)


def test_rope_theta_read_from_either_key(tmp_path):
  _write_config(tmp_path / "legacy", **LLAMA_JSON, rope_theta=123.0)
  _write_config(tmp_path / "v5", **LLAMA_JSON, rope_parameters={"rope_theta": 456.0})
  assert hf.config_from_hf(tmp_path / "legacy").rope_theta == 123.0
  assert hf.config_from_hf(tmp_path / "v5").rope_theta == 456.0
  assert hf.config_from_hf(tmp_path / "v5").n_kv_heads == 4


@pytest.mark.parametrize("change, message", [
    (dict(norm_position="post"), r"norm_position='post'"),
    (dict(window=4), r"window=4"),
    (dict(norm="rmsnorm"), r"norm='rmsnorm'"),
])
def test_to_hf_rejects_configs_without_equivalent(tmp_path, change, message):
  cfg = ROUND_TRIP_CONFIGS["gpt2"].replace(**change)
  with pytest.raises(ValueError, match=message):
    transformer.to_hf({}, cfg, tmp_path)
  assert not (tmp_path / hf.WEIGHTS_FILE).exists()


def test_to_hf_names_the_params_cfg_order(tmp_path):
  cfg = ROUND_TRIP_CONFIGS["gpt2"]
  with pytest.raises(TypeError, match=r"to_hf\(params, cfg, path\)"):
    transformer.to_hf(cfg, {}, tmp_path)
  assert not (tmp_path / hf.WEIGHTS_FILE).exists()


def test_catalog_cli_reads_checkpoint(saved, capsys):
  from experiments.commands import demo

  folder, params = saved
  assert demo.catalog_main(["--hf", str(folder), "--seq-len", "8"]) == 0
  out = capsys.readouterr().out
  assert "blocks/attn/w_q" in out and "(2, 32, 32)" in out and "unembed/w_out" in out
  assert f"{sum(x.size for x in jax.tree.leaves(params)):,} parameters" in out


def test_the_tolerance_catches_a_small_error_made_everywhere():
  """The mean bound is what makes the scaled tolerance strict: a 3e-5 relative error on every
  logit (a systematic one) fails it, while the max bound alone would pass."""
  want = np.random.default_rng(0).normal(0, 2.0, (3, T, VOCAB))
  assert_logits_close(want.astype(np.float32), want)  # float32 rounding: passes
  with pytest.raises(AssertionError):
    assert_logits_close(want * (1 + 3e-5), want)
  with pytest.raises(AssertionError):
    assert_logits_close(want + np.where(np.arange(VOCAB) == 5, 1e-2, 0), want)  # one column
