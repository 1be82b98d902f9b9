"""Config validation, presets and exact parameter counts."""

import math

import jax
import pytest

import transformer

INVALID = [
    ("vocab_size", dict(vocab_size=0)),
    ("d_model", dict(d_model=-8)),
    ("n_layers", dict(n_layers=0)),
    ("n_heads", dict(n_heads=2.5)),
    ("n_kv_heads", dict(n_heads=4, n_kv_heads=3)),
    ("d_head", dict(d_model=30, n_heads=4)),
    ("d_head", dict(positions="rope", d_head=15)),
    ("norm", dict(norm="batchnorm")),
    ("norm_position", dict(norm_position="middle")),
    ("norm_position", dict(norm="none", norm_position="post")),
    ("activation", dict(activation="tanh")),
    ("positions", dict(positions="alibi")),
    ("attention", dict(attention="flash")),
    ("window", dict(window=0)),
    ("dtype", dict(dtype="int8")),
    ("param_dtype", dict(param_dtype="float8")),
    ("norm_eps", dict(norm_eps=0.0)),
    ("init_std", dict(init_std=-1.0)),
    ("rope_theta", dict(rope_theta=0.0)),
    ("max_len", dict(max_len=0)),
]


@pytest.mark.parametrize("field,kwargs", INVALID,
                         ids=[f"{f}-{i}" for i, (f, _) in enumerate(INVALID)])
def test_invalid_config_names_field_and_fix(field, kwargs):
  with pytest.raises(ValueError, match=rf"Config\.{field}=.*Fix:"):
    transformer.Config(**kwargs)


def test_unknown_preset():
  with pytest.raises(ValueError, match="unknown preset 'gpt5'.*tiny"):
    transformer.preset("gpt5")


def test_config_is_hashable_and_frozen():
  cfg = transformer.preset("tiny")
  assert hash(cfg) == hash(transformer.preset("tiny"))
  assert {cfg: 1}[transformer.Config(**cfg.to_dict())] == 1
  with pytest.raises(AttributeError):
    cfg.d_model = 3


def test_replace_rederives_default_sizes_but_keeps_explicit_ones():
  cfg = transformer.preset("tiny")
  wide = cfg.replace(d_model=128)
  assert (wide.d_head, wide.d_ff, wide.n_kv_heads) == (32, 512, 4)
  llama = transformer.preset("llama-tiny")
  assert llama.replace(d_model=128).d_ff == llama.d_ff  # explicit d_ff is kept
  assert transformer.preset("tiny", n_heads=8).d_head == 8


def _count(cfg):
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))


def test_gpt2_small_has_exactly_gpt2_parameter_count():
  # GPT-2 small (124M) as counted by Hugging Face's GPT2LMHeadModel with the tied head.
  assert _count(transformer.preset("gpt2-small")) == 124_439_808


def test_llama3_8b_parameter_count():
  # Meta's Llama-3-8B: 8,030,261,248 parameters (untied head, GQA 32/8, SwiGLU 14336).
  assert _count(transformer.preset("llama-3-8b")) == 8_030_261_248


def test_llama_builder_defaults():
  cfg = transformer.llama_config(d_model=64, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=128,
                                 vocab_size=100)
  assert (cfg.norm, cfg.activation, cfg.positions, cfg.tie_embeddings, cfg.use_bias) == (
      "rmsnorm", "swiglu", "rope", False, False)
  assert cfg.kv_groups == 4
