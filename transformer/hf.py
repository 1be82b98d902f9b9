"""Hugging Face checkpoints: read and write GPT-2 and Llama weights in our matrix layout.

A Hugging Face model folder holds `config.json` and the weights in `*.safetensors` (one
file, or shards listed by `model.safetensors.index.json`). Each family below is a table
from Hugging Face tensor names to our parameter paths, stating two facts per tensor:

* **layout** — GPT-2's `Conv1D` already stores `W: (d_in, d_out)` and is used as `x @ W`,
  like ours; `torch.nn.Linear` (Llama, every `lm_head`) stores `Wᵀ: (d_out, d_in)`, so it
  is transposed. Embeddings are `(V, D)` in both.
* **fusion** — GPT-2's `c_attn` is `[W_Q | W_K | W_V]: (D, 3D)`, the three projections
  concatenated along the output axis; it is split on the way in and joined on the way out.

Per-layer tensors (`h.{l}.…`, `layers.{l}.…`) are stacked on our leading layer axis `L`.
Llama's rotary embedding already uses the rotate-half pairing of `transformer.rope`, so
`W_Q` and `W_K` need no permutation. Reading uses `safetensors` into numpy only; torch is
never imported. Anything this mapping cannot represent exactly (an unknown architecture,
RoPE scaling, a missing or extra tensor, a wrong shape, an unreadable file) is a
`ValueError` naming the tensor or the `config.json` field.

Example (with a folder you already have, `cfg, params = transformer.from_hf("/models/gpt2")`;
here a round trip through a temporary folder):
  >>> import tempfile, jax, numpy as np, transformer
  >>> cfg = transformer.preset("llama-tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> folder = tempfile.mkdtemp()
  >>> transformer.to_hf(params, cfg, folder)               # opens in `transformers`
  >>> cfg_back, params_back = transformer.from_hf(folder)
  >>> cfg_back == cfg, np.array_equal(params_back["blocks"]["attn"]["w_q"],
  ...                                 params["blocks"]["attn"]["w_q"])
  (True, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from transformer.config import Config, gpt2_config, llama_config
from transformer.model import init, param_tree

INDEX_FILE = "model.safetensors.index.json"
WEIGHTS_FILE = "model.safetensors"

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

# Buffers some checkpoints carry that are not weights: GPT-2's causal mask and Llama's
# rotary frequencies (both recomputed from the config).
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")


# ----------------------------------------------------------------------------------------
# Reading.

def _safetensors():
  """The optional `safetensors` package (with its numpy API), imported on first use."""
  try:
    import safetensors.numpy
  except ImportError as e:
    raise ImportError("Hugging Face checkpoints need the `safetensors` package. Fix: "
                      "pip install 'matrices-in-transformers[hf]' (or just safetensors).") from e
  return safetensors


def _read_json(file: pathlib.Path) -> dict[str, Any]:
  if not file.is_file():
    raise ValueError(f"{file} does not exist. Fix: pass a Hugging Face model folder "
                     "(config.json + *.safetensors).")
  try:
    return json.loads(file.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{file} is not valid JSON: {e}") from e


def _read_config(folder: pathlib.Path, param_dtype: str) -> tuple[Family, Config]:
  file = folder / "config.json"
  hf = _read_json(file)
  model_type = hf.get("model_type")
  if model_type not in FAMILIES:
    supported = ", ".join(f"{f.model_type} ({f.architecture})" for f in FAMILIES.values())
    raise ValueError(f"{file}: unsupported architecture model_type={model_type!r} "
                     f"(architectures={hf.get('architectures')!r}). Supported: {supported}.")
  family = FAMILIES[model_type]
  kwargs = family.read_config(hf)
  try:
    return family, family.base(**kwargs, param_dtype=param_dtype)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{file}: {e}") from e


def config_from_hf(path: str | os.PathLike, *, param_dtype: str = "float32") -> Config:
  """Our `Config` for a Hugging Face model folder, from its `config.json` alone.

  Reads no weights, so it is instant even for a multi-gigabyte checkpoint.

  Args:
    path: folder holding `config.json`.
    param_dtype: `Config.param_dtype` of the result.

  Returns:
    The `Config` whose `Transformer` computes the same function as the checkpoint.

  Example:
    >>> import tempfile, jax, transformer
    >>> from transformer.hf import config_from_hf
    >>> cfg = transformer.preset("tiny")
    >>> folder = tempfile.mkdtemp()
    >>> transformer.to_hf(transformer.init(cfg, jax.random.key(0)), cfg, folder)
    >>> config_from_hf(folder).n_layers == cfg.n_layers
    True
  """
  return _read_config(pathlib.Path(path), param_dtype)[1]


class _Checkpoint:
  """The tensors of a folder's safetensors files, opened once, read one name at a time."""

  def __init__(self, folder: pathlib.Path, stack: contextlib.ExitStack):
    index = folder / INDEX_FILE
    if index.is_file():
      weight_map = _read_json(index).get("weight_map")
      if not isinstance(weight_map, dict):
        raise ValueError(f"{index} has no 'weight_map' object.")
      files = sorted(set(weight_map.values()))
    else:
      files = sorted(p.name for p in folder.glob("*.safetensors"))
      if not files:
        raise ValueError(f"{folder} holds no *.safetensors file. Fix: re-save the model with "
                         "save_pretrained(..., safe_serialization=True).")
    st = _safetensors()
    self.folder, self.error = folder, st.SafetensorError
    self.handles, self.where = {}, {}
    for name in files:
      file = folder / name
      if not file.is_file():
        raise ValueError(f"shard {name!r} listed in {index} does not exist.")
      try:
        self.handles[name] = stack.enter_context(st.safe_open(file, framework="np"))
      except st.SafetensorError as e:
        raise ValueError(f"{file} is not a readable safetensors file (corrupt or truncated): "
                         f"{e}") from e
      self.where.update(dict.fromkeys(self.handles[name].keys(), name))
    self.unread = set(self.where)

  def resolve(self, name: str, prefix: str) -> str | None:
    """The stored name: `name`, or without the body prefix (bare-body checkpoints)."""
    bare = name.removeprefix(prefix)
    return next((n for n in (name, bare) if n in self.where), None)

  def read(self, name: str, prefix: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    stored = self.resolve(name, prefix)
    if stored is None:
      raise ValueError(f"{self.folder}: missing tensor {name!r}.")
    try:
      array = self.handles[self.where[stored]].get_tensor(stored)
    except self.error as e:
      raise ValueError(f"{self.folder}: tensor {stored!r} cannot be read: {e}") from e
    if array.shape != shape:
      raise ValueError(f"tensor {stored!r} has shape {array.shape}, but config.json implies "
                       f"{shape}.")
    self.unread.discard(stored)
    return array.astype(dtype)


def _expected_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
  shapes = jax.eval_shape(lambda: init(cfg, jax.random.key(0)))
  return {k: tuple(v.shape) for k, v in traverse_util.flatten_dict(shapes, sep="/").items()}


def _check_table(table: list[Tensor], expected: dict[str, tuple[int, ...]], family: Family):
  covered = [p for t in table for p in t.ours]
  if sorted(covered) != sorted(expected):
    raise ValueError(f"the {family.model_type} tensor table does not cover the parameters of "
                     f"this config: missing {sorted(set(expected) - set(covered))}, extra "
                     f"{sorted(set(covered) - set(expected))}.")


def _layers(t: Tensor, n_layers: int) -> list[int | None]:
  return list(range(n_layers)) if "{l}" in t.name else [None]


def from_hf(path: str | os.PathLike, *, param_dtype: str = "float32"
            ) -> tuple[Config, dict[str, Any]]:
  """Load a Hugging Face GPT-2 or Llama checkpoint folder as our `(cfg, params)`.

  Each stored matrix `M` becomes `W = M` (GPT-2 `Conv1D`, embeddings) or `W = Mᵀ`
  (`nn.Linear`), so that the model computes `x @ W`; GPT-2's fused
  `c_attn = [W_Q | W_K | W_V]` is split, and layer `l`'s tensors become row `l` of the
  stacked block weights. Only `safetensors` and numpy are used (no torch).

  Args:
    path: a folder with `config.json` and `model.safetensors`, or shards listed in
      `model.safetensors.index.json`.
    param_dtype: dtype of the returned parameters (and `cfg.param_dtype`).

  Returns:
    `(cfg, params)` with `Transformer(cfg).apply({"params": params}, tokens)` equal to the
    Hugging Face model's logits (to float32 rounding).

  Raises:
    ValueError: an unsupported architecture or `config.json` field, a missing, extra,
      unreadable or wrongly shaped tensor (the message names it).

  Example (for Llama-3-8B, `w_k` is `(L, D, K·Dh) = (32, 4096, 1024)`):
    >>> import tempfile, jax, transformer
    >>> cfg = transformer.preset("llama-tiny")
    >>> folder = tempfile.mkdtemp()
    >>> transformer.to_hf(transformer.init(cfg, jax.random.key(0)), cfg, folder)
    >>> cfg16, params16 = transformer.from_hf(folder, param_dtype="bfloat16")
    >>> w_k_LDX = params16["blocks"]["attn"]["w_k"]   # X = K·Dh
    >>> w_k_LDX.shape == (cfg.n_layers, cfg.d_model, cfg.n_kv_heads * cfg.d_head), w_k_LDX.dtype
    (True, dtype(bfloat16))
  """
  folder = pathlib.Path(path)
  family, cfg = _read_config(folder, param_dtype)
  expected = _expected_shapes(cfg)
  table = family.tensors(cfg)
  _check_table(table, expected, family)
  flat = {}
  with contextlib.ExitStack() as stack:
    ckpt = _Checkpoint(folder, stack)
    for t in table:
      shapes = [expected[p][1:] if "{l}" in t.name else expected[p] for p in t.ours]
      ours_shape = (*shapes[0][:-1], sum(s[-1] for s in shapes))
      stored_shape = ours_shape[::-1] if t.transposed else ours_shape
      pieces = []
      for l in _layers(t, cfg.n_layers):
        m = ckpt.read(t.name.format(l=l), family.prefix, stored_shape, cfg.jnp_param_dtype)
        w = m.T if t.transposed else m
        pieces.append(np.split(w, np.cumsum([s[-1] for s in shapes[:-1]]), axis=-1))
      for i, p in enumerate(t.ours):
        flat[p] = jnp.asarray(np.stack([pc[i] for pc in pieces]) if "{l}" in t.name
                              else pieces[0][i])
    if cfg.tie_embeddings:  # a tied head may still be saved as a copy of the embedding
      ckpt.unread.discard(ckpt.resolve("lm_head.weight", "") or "")
    extra = sorted(n for n in ckpt.unread if not n.endswith(_BUFFER_SUFFIXES))
  if extra:
    raise ValueError(f"checkpoint has tensors this {family.model_type} config does not use: "
                     f"{extra[:5]}{' ...' if len(extra) > 5 else ''}. Fix: check config.json "
                     "(biases, tie_word_embeddings, number of layers).")
  return cfg, traverse_util.unflatten_dict(flat, sep="/")


# ----------------------------------------------------------------------------------------
# Writing.

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


def to_hf(params, cfg: Config, path: str | os.PathLike) -> None:
  """Write `(params, cfg)` as a Hugging Face folder that `transformers` opens directly.

  The inverse of `from_hf`: `config.json` (with `model_type` and `architectures`) and one
  `model.safetensors` in `cfg.param_dtype`, written with `safetensors.numpy` (no torch).
  Stacked block weights are unstacked into per-layer tensors, `nn.Linear` weights are
  stored transposed and GPT-2's `c_attn` is written as `[W_Q | W_K | W_V]`.

  Args:
    params: the parameters (`{"params": ...}` or the inner dict).
    cfg: a GPT-2-like (LayerNorm, learned positions, biases, MHA) or Llama-like (RMSNorm,
      RoPE, SwiGLU) pre-norm causal softmax config matching `params`.
    path: output folder (created if needed; existing files of the same names are replaced).

  Raises:
    TypeError: the arguments are in the old order `(cfg, params, path)`.
    ValueError: the config has no Hugging Face equivalent, or a parameter is missing or
      has the wrong shape.

  Example (then `transformers.AutoModelForCausalLM.from_pretrained(folder)` opens it):
    >>> import pathlib, tempfile, jax, transformer
    >>> cfg = transformer.preset("tiny")
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> transformer.to_hf(transformer.init(cfg, jax.random.key(0)), cfg, folder)
    >>> sorted(f.name for f in folder.iterdir())
    ['config.json', 'model.safetensors']
  """
  if isinstance(params, Config):
    raise TypeError("to_hf(params, cfg, path): got a Config first. Fix: pass the parameters "
                    "first, then the config (the `(params, cfg)` order of every function).")
  family = family_for(cfg)
  expected = _expected_shapes(cfg)
  table = family.tensors(cfg)
  _check_table(table, expected, family)
  flat = traverse_util.flatten_dict(param_tree(params), sep="/")
  for p, shape in expected.items():
    if p not in flat:
      raise ValueError(f"params has no {p!r}, which this config needs.")
    if tuple(flat[p].shape) != shape:
      raise ValueError(f"params {p!r} has shape {tuple(flat[p].shape)}, config implies {shape}.")
  dtype = cfg.jnp_param_dtype
  tensors = {}
  for t in table:
    arrays = [np.asarray(flat[p], dtype) for p in t.ours]
    for l in _layers(t, cfg.n_layers):
      w = np.concatenate([a if l is None else a[l] for a in arrays], axis=-1)
      tensors[t.name.format(l=l)] = np.ascontiguousarray(w.T if t.transposed else w)
  folder = pathlib.Path(path)
  folder.mkdir(parents=True, exist_ok=True)
  hf = dict(model_type=family.model_type, architectures=[family.architecture],
            dtype=cfg.param_dtype, **family.write_config(cfg))
  (folder / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
  # A stale shard index would make readers ignore the single file written here.
  (folder / INDEX_FILE).unlink(missing_ok=True)
  _safetensors().numpy.save_file(tensors, folder / WEIGHTS_FILE, metadata={"format": "pt"})
