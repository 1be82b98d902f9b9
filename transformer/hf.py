"""Hugging Face checkpoints: read and write GPT-2 and Llama weights in our matrix layout.

A Hugging Face model folder holds `config.json` and the weights in `*.safetensors` (one
file, or shards listed by `model.safetensors.index.json`). Each family
(`transformer.hf_families`) is a table from Hugging Face tensor names to our parameter paths,
stating two facts per tensor:

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
import json
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from transformer.config import Config
from transformer.hf_families import FAMILIES, Family, Tensor, family_for
from transformer.model import init, param_tree

INDEX_FILE = "model.safetensors.index.json"
WEIGHTS_FILE = "model.safetensors"

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
