"""The preface's catalog on a live model: the opening checks of the tour.

    python -m experiments demo [--model tiny] [--seed 0] [--steps 24]

`make demo` runs `python -m experiments tour --quick`, whose opening section is `run` below.

Runs in a few seconds on 2 CPU cores. It builds the preset, prints every named matrix
with its role in the preface's catalog (plus the two input-derived products `Q Kᵀ` and
`A V`), runs a forward pass on real text bytes (a file of the Python standard library),
reports the loss against the uniform baseline `ln 256`, and checks that cached decoding
reproduces the full forward pass before generating a few tokens with the KV cache.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from transformer import Entry


def format_catalog(entries: list[Entry]) -> str:
  """A plain-text table of catalog entries, one line per matrix."""
  lines = [f"{'#':>2}  {'matrix':<22} {'shape':<22} {'role':<17} what it does"]
  for e in entries:
    shape = "(" + ", ".join(map(str, e.shape)) + ")"
    lines.append(f"{e.step:>2}  {e.path:<22} {shape:<22} {e.role:<17} {e.description}")
  return "\n".join(lines)


def sample_text(n_bytes: int) -> np.ndarray:
  """The first `n_bytes` bytes of a standard-library source file (real text, no download)."""
  with open(json.__file__, "rb") as f:
    return np.frombuffer(f.read(n_bytes), np.uint8).astype(np.int32)


def run(model: str = "tiny", seed: int = 0, steps: int = 24, seq_len: int = 64) -> dict:
  """Build, catalog, forward, check the cache, generate. Returns the measured numbers."""
  cfg = transformer.preset(model)
  params = transformer.init(cfg, jax.random.key(seed))
  n_params = sum(x.size for x in jax.tree.leaves(params))
  print(f"model {model!r}: {n_params:,} parameters, L={cfg.n_layers} d={cfg.d_model} "
        f"H={cfg.n_heads} Hkv={cfg.n_kv_heads} dh={cfg.d_head} d_ff={cfg.d_ff}\n")
  print(format_catalog(transformer.catalog(params, cfg, seq_len=seq_len)))

  tokens_1T = jnp.asarray(sample_text(seq_len + 1))[None]
  apply = jax.jit(transformer.Transformer(cfg).apply)
  logits_1TV = apply({"params": params}, tokens_1T[:, :-1])
  logp = jax.nn.log_softmax(logits_1TV)
  loss = float(-jnp.take_along_axis(logp, tokens_1T[:, 1:, None], -1).mean())
  print(f"\nforward pass on {seq_len} bytes of {json.__file__}:")
  print(f"  next-byte loss {loss:.4f} nats (uniform guess: ln 256 = {math.log(256):.4f})")

  # Cached decoding must reproduce the full forward pass: prefill half, then step.
  half = seq_len // 2
  cached_1TV = transformer.cached_logits(params, cfg, tokens_1T[:, :-1], half)
  cache_err = float(jnp.abs(cached_1TV - logits_1TV).max())
  print(f"  KV-cache decode vs full forward: max |Δlogit| = {cache_err:.2e}")

  prompt = tokens_1T[:, :16]
  out = transformer.generate(params, cfg, prompt, steps, key=jax.random.key(seed + 1),
                             temperature=1.0, top_k=20)
  text = bytes(np.asarray(out[0, 16:], np.uint8)).decode("utf-8", "replace")
  print(f"  generated {steps} bytes after {bytes(np.asarray(prompt[0], np.uint8))!r}:"
        f" {text!r} (random init, so noise)")
  return {"n_params": int(n_params), "loss": loss, "cache_max_abs_err": cache_err}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments demo", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="tiny", choices=sorted(transformer.PRESETS))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--steps", type=int, default=24, help="tokens to generate")
  args = parser.parse_args(argv)
  run(args.model, args.seed, args.steps)
  return 0


def catalog_main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments catalog",
                                   description="Print the matrix catalog of a preset or of a "
                                               "Hugging Face checkpoint folder.")
  parser.add_argument("--model", default="tiny", choices=sorted(transformer.PRESETS))
  parser.add_argument("--hf", metavar="PATH", default=None,
                      help="a GPT-2 or Llama Hugging Face folder (config.json + *.safetensors); "
                           "loaded in full, so every tensor is checked. Overrides --model")
  parser.add_argument("--seq-len", type=int, default=None, help="T for the QKᵀ and AV rows")
  args = parser.parse_args(argv)
  if args.hf is not None:
    try:
      cfg, params = transformer.from_hf(args.hf)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    print(f"checkpoint {args.hf}: L={cfg.n_layers} d={cfg.d_model} H={cfg.n_heads} "
          f"Hkv={cfg.n_kv_heads} dh={cfg.d_head} d_ff={cfg.d_ff} norm={cfg.norm} "
          f"positions={cfg.positions} tied={cfg.tie_embeddings}\n")
  else:
    cfg = transformer.preset(args.model)
    # Shapes only: eval_shape never allocates, so gpt2-small or llama-3-8b print instantly.
    params = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  print(format_catalog(transformer.catalog(params, cfg, seq_len=args.seq_len)))
  print(f"\n{sum(x.size for x in jax.tree.leaves(params)):,} parameters")
  return 0
