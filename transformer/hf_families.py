"""Hugging Face model families: how GPT-2's and Llama's `config.json` and tensor names map to ours.

Each family is a table from Hugging Face tensor names to our parameter paths (`Tensor`: which
of ours it holds, and whether it is stored transposed), with its config readers and writers
and what keeps a `Config` out of it. Reading and writing the files is `transformer.hf`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from transformer.config import Config, gpt2_config, llama_config

# Hugging Face GPT-2 `activation_function` -> our `Config.activation`; the first name of
# each of ours is the one `to_hf` writes.
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                     "gelu": "gelu", "relu": "relu"}


@dataclasses.dataclass(frozen=True)
class Tensor:
  """One Hugging Face tensor and the parameters of ours it holds.

  Attributes:
    name: full Hugging Face name; `{l}` marks a per-layer tensor (stacked on axis `L`).
    ours: our parameter paths, concatenated along the output (last) axis in this order.
    transposed: the checkpoint stores `Wᵀ` (`torch.nn.Linear`) instead of `W`.
  """

  name: str
  ours: tuple[str, ...]
  transposed: bool = False


@dataclasses.dataclass(frozen=True)
class Family:
  """A model family: how its `config.json` and tensor names map to ours.

  Attributes:
    model_type: the `model_type` field of its `config.json`.
    architecture: the class `to_hf` names in `architectures`.
    prefix: the body's name prefix; checkpoints of the bare body model omit it.
    base: our config constructor for the family (`gpt2_config`, `llama_config`).
    read_config: `config.json` dict -> keyword arguments of `base`.
    write_config: our `Config` -> `config.json` dict.
    tensors: the tensor table of a config.
    unsupported: problems that keep a `Config` out of this family (empty: it fits).
  """

  model_type: str
  architecture: str
  prefix: str
  base: Callable[..., Config]
  read_config: Callable[[dict[str, Any]], dict[str, Any]]
  write_config: Callable[[Config], dict[str, Any]]
  tensors: Callable[[Config], list[Tensor]]
  unsupported: Callable[[Config], list[str]]


def _field(hf: dict[str, Any], name: str, meaning: str):
  """`hf[name]`, or a `ValueError` naming the missing `config.json` field."""
  if hf.get(name) is None:
    raise ValueError(f"config.json has no field {name!r} ({meaning}). Fix: add it, as "
                     "transformers' save_pretrained writes it.")
  return hf[name]


def _require(hf: dict[str, Any], **expected) -> None:
  """Fields whose other values change the math this mapping implements."""
  for name, want in expected.items():
    if name in hf and hf[name] != want:
      raise ValueError(f"config.json field {name}={hf[name]!r} is not supported: only {want!r} "
                       "has an exact equivalent here.")


def _problems(cfg: Config, **want) -> list[str]:
  return [f"{k}={getattr(cfg, k)!r} (needs {v!r})" for k, v in want.items()
          if getattr(cfg, k) != v]


def _common_problems(cfg: Config) -> list[str]:
  """What neither family can express: post-norm, no residual, masks other than causal."""
  return _problems(cfg, norm_position="pre", residual=True, causal=True, attention="softmax",
                   window=None, qk_tied=False)


# ----------------------------------------------------------------------------------------
# GPT-2: pre-LayerNorm, fused c_attn, Conv1D (d_in, d_out), learned positions, tied head.

def _gpt2_read(hf: dict[str, Any]) -> dict[str, Any]:
  _require(hf, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
           add_cross_attention=False)
  act = hf.get("activation_function", "gelu_new")
  if act not in _GPT2_ACTIVATIONS:
    raise ValueError(f"config.json field activation_function={act!r} is not supported. "
                     f"Fix: use one of {sorted(_GPT2_ACTIVATIONS)}.")
  d = _field(hf, "n_embd", "the residual width d")
  return dict(vocab_size=_field(hf, "vocab_size", "the vocabulary size"),
              d_model=d, n_layers=_field(hf, "n_layer", "the number of layers"),
              n_heads=_field(hf, "n_head", "the number of heads"),
              max_len=_field(hf, "n_positions", "rows of the position matrix"),
              d_ff=hf.get("n_inner") or 4 * d, activation=_GPT2_ACTIVATIONS[act],
              norm_eps=hf.get("layer_norm_epsilon", 1e-5),
              tie_embeddings=hf.get("tie_word_embeddings", True))


def _gpt2_write(cfg: Config) -> dict[str, Any]:
  act = next(k for k, v in _GPT2_ACTIVATIONS.items() if v == cfg.activation)
  return dict(vocab_size=cfg.vocab_size, n_embd=cfg.d_model, n_layer=cfg.n_layers,
              n_head=cfg.n_heads, n_positions=cfg.max_len, n_inner=cfg.d_ff,
              activation_function=act, layer_norm_epsilon=cfg.norm_eps,
              tie_word_embeddings=cfg.tie_embeddings, scale_attn_weights=True,
              scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
              attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)


def _gpt2_tensors(cfg: Config) -> list[Tensor]:
  h = "transformer.h.{l}."
  table = [Tensor("transformer.wte.weight", ("embed/embedding",)),
           Tensor("transformer.wpe.weight", ("pos_embed/embedding",)),
           Tensor("transformer.ln_f.weight", ("norm_f/scale",)),
           Tensor("transformer.ln_f.bias", ("norm_f/bias",))]
  for hf_norm, our_norm in (("ln_1", "norm_1"), ("ln_2", "norm_2")):
    table += [Tensor(f"{h}{hf_norm}.weight", (f"blocks/{our_norm}/scale",)),
              Tensor(f"{h}{hf_norm}.bias", (f"blocks/{our_norm}/bias",))]
  for hf_mat, ours in (("attn.c_attn", ("attn/{}_q", "attn/{}_k", "attn/{}_v")),
                       ("attn.c_proj", ("attn/{}_o",)), ("mlp.c_fc", ("ffn/{}_1",)),
                       ("mlp.c_proj", ("ffn/{}_2",))):
    for hf_kind, kind in (("weight", "w"), ("bias", "b")):
      table.append(Tensor(f"{h}{hf_mat}.{hf_kind}",
                          tuple("blocks/" + o.format(kind) for o in ours)))
  if not cfg.tie_embeddings:
    table.append(Tensor("lm_head.weight", ("unembed/w_out",), transposed=True))
  return table


def _gpt2_unsupported(cfg: Config) -> list[str]:
  problems = _common_problems(cfg) + _problems(
      cfg, norm="layernorm", positions="learned", use_bias=True, n_kv_heads=cfg.n_heads)
  if cfg.n_heads * cfg.d_head != cfg.d_model:
    problems.append(f"d_head={cfg.d_head} (needs d_model / n_heads = "
                    f"{cfg.d_model / cfg.n_heads:g})")
  if cfg.activation not in _GPT2_ACTIVATIONS.values():
    problems.append(f"activation={cfg.activation!r} (needs one of "
                    f"{sorted(set(_GPT2_ACTIVATIONS.values()))})")
  return problems


# ----------------------------------------------------------------------------------------
# Llama: pre-RMSNorm, SwiGLU, RoPE (rotate-half), GQA, nn.Linear (d_out, d_in), untied head.

def _llama_read(hf: dict[str, Any]) -> dict[str, Any]:
  _require(hf, hidden_act="silu")
  rope = hf.get("rope_parameters") or {}
  scaling = hf.get("rope_scaling") or {}
  rope_type = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
  if rope_type != "default":
    raise ValueError(f"config.json: rope_type={rope_type!r} (RoPE scaling) is not supported; "
                     "transformer.rope implements the unscaled rotation only.")
  attention_bias, mlp_bias = hf.get("attention_bias", False), hf.get("mlp_bias", False)
  if attention_bias != mlp_bias:
    raise ValueError(f"config.json fields attention_bias={attention_bias!r} and "
                     f"mlp_bias={mlp_bias!r} differ; Config.use_bias sets both. Fix: a "
                     "checkpoint with biases on both or on neither.")
  d = _field(hf, "hidden_size", "the residual width d")
  n_heads = _field(hf, "num_attention_heads", "the number of query heads")
  return dict(vocab_size=_field(hf, "vocab_size", "the vocabulary size"),
              d_model=d, n_layers=_field(hf, "num_hidden_layers", "the number of layers"),
              n_heads=n_heads, n_kv_heads=hf.get("num_key_value_heads") or n_heads,
              d_head=hf.get("head_dim") or d // n_heads,
              d_ff=_field(hf, "intermediate_size", "the feed-forward width"),
              max_len=hf.get("max_position_embeddings", 2048),
              rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10_000.0))),
              norm_eps=hf.get("rms_norm_eps", 1e-6),
              tie_embeddings=hf.get("tie_word_embeddings", False), use_bias=attention_bias)


def _llama_write(cfg: Config) -> dict[str, Any]:
  return dict(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
              num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
              head_dim=cfg.d_head, intermediate_size=cfg.d_ff,
              max_position_embeddings=cfg.max_len, hidden_act="silu",
              rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta,
              rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
              tie_word_embeddings=cfg.tie_embeddings, attention_bias=cfg.use_bias,
              mlp_bias=cfg.use_bias, attention_dropout=0.0)


def _llama_tensors(cfg: Config) -> list[Tensor]:
  layer = "model.layers.{l}."
  table = [Tensor("model.embed_tokens.weight", ("embed/embedding",)),
           Tensor("model.norm.weight", ("norm_f/scale",)),
           Tensor(f"{layer}input_layernorm.weight", ("blocks/norm_1/scale",)),
           Tensor(f"{layer}post_attention_layernorm.weight", ("blocks/norm_2/scale",))]
  linears = [(f"self_attn.{x}_proj", f"attn/{{}}_{x}") for x in "qkvo"]
  linears += [("mlp.gate_proj", "ffn/{}_gate"), ("mlp.up_proj", "ffn/{}_1"),
              ("mlp.down_proj", "ffn/{}_2")]
  kinds = (("weight", "w"), ("bias", "b")) if cfg.use_bias else (("weight", "w"),)
  for hf_mat, ours in linears:
    for hf_kind, kind in kinds:
      table.append(Tensor(f"{layer}{hf_mat}.{hf_kind}", ("blocks/" + ours.format(kind),),
                          transposed=True))
  if not cfg.tie_embeddings:
    table.append(Tensor("lm_head.weight", ("unembed/w_out",), transposed=True))
  return table


def _llama_unsupported(cfg: Config) -> list[str]:
  return _common_problems(cfg) + _problems(cfg, norm="rmsnorm", positions="rope",
                                           activation="swiglu")


FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", "GPT2LMHeadModel", "transformer.", gpt2_config, _gpt2_read, _gpt2_write,
                   _gpt2_tensors, _gpt2_unsupported),
    "llama": Family("llama", "LlamaForCausalLM", "model.", llama_config, _llama_read, _llama_write,
                    _llama_tensors, _llama_unsupported),
}


def family_for(cfg: Config) -> Family:
  """The Hugging Face family that represents `cfg` exactly, or a `ValueError` saying why none.

  Example:
    >>> import transformer
    >>> from transformer.hf import family_for
    >>> family_for(transformer.preset("llama-tiny")).architecture
    'LlamaForCausalLM'
  """
  problems = {name: f.unsupported(cfg) for name, f in FAMILIES.items()}
  fits = [name for name, p in problems.items() if not p]
  if fits:
    return FAMILIES[fits[0]]
  why = "; ".join(f"{FAMILIES[n].architecture}: {', '.join(p)}" for n, p in problems.items())
  raise ValueError(f"no Hugging Face architecture matches this Config ({why}).")
