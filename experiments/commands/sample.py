"""Continue a prompt with a trained model: `python -m experiments sample`.

    python -m experiments sample --checkpoint runs/train/RUN --prompt "def main(" \
        --max-new-tokens 64 [--temperature 0.8] [--top-k 20] [--seed 0] [--step N]

The models of `train` read bytes, so the prompt is its UTF-8 bytes and the continuation is
decoded back (invalid byte sequences shown as U+FFFD). `--temperature 0` is greedy decoding.
Runs in seconds on 2 CPU cores, most of it compilation.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from experiments.train import checkpoint


def continue_bytes(params, cfg: transformer.Config, prompt: bytes, max_new_tokens: int, *,
                   key: jax.Array | None = None, temperature: float = 1.0,
                   top_k: int | None = None) -> bytes:
  """The `max_new_tokens` bytes a byte-level model writes after `prompt`.

  Example:
    >>> import jax, transformer
    >>> from experiments.commands.sample import continue_bytes
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> len(continue_bytes(params, cfg, b"Hi", 4, temperature=0))
    4
  """
  if not prompt:
    raise ValueError("--prompt is empty. Fix: pass at least one character.")
  if cfg.vocab_size < 256:
    raise ValueError(f"the model's vocab_size={cfg.vocab_size} cannot read bytes (256 ids).")
  prompt_1T = jnp.asarray(np.frombuffer(prompt, np.uint8).astype(np.int32))[None]
  out = transformer.generate(params, cfg, prompt_1T, max_new_tokens, key=key,
                             temperature=temperature, top_k=top_k)
  new = np.asarray(out[0, len(prompt):])
  return bytes(np.clip(new, 0, 255).astype(np.uint8))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments sample", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="a training run folder")
  p.add_argument("--step", type=int, default=None,
                 help="checkpoint step (default: the latest intact one)")
  p.add_argument("--prompt", required=True, help="text to continue")
  p.add_argument("--max-new-tokens", type=int, default=64, help="bytes to write (default: 64)")
  p.add_argument("--temperature", type=float, default=1.0,
                 help="softmax temperature; 0 is greedy (default: 1.0)")
  p.add_argument("--top-k", type=int, default=None,
                 help="sample among the k most likely bytes (default: all)")
  p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
  args = p.parse_args(argv)
  try:
    params, cfg = checkpoint.load_run(args.checkpoint, args.step)
    text = continue_bytes(params, cfg, args.prompt.encode(), args.max_new_tokens,
                          key=jax.random.key(args.seed), temperature=args.temperature,
                          top_k=args.top_k)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(args.prompt + text.decode("utf-8", "replace"))
  return 0


def catalog_main(argv=None) -> int:
  """`python -m experiments catalog --checkpoint RUN_DIR [--step N]`: a trained run's matrices."""
  from experiments.commands.demo import format_catalog

  p = argparse.ArgumentParser(prog="python -m experiments catalog",
                              description="Print the matrix catalog of a training run's "
                                          "checkpoint.")
  p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="a training run folder")
  p.add_argument("--step", type=int, default=None,
                 help="checkpoint step (default: the latest intact one)")
  p.add_argument("--seq-len", type=int, default=None, help="T for the QKᵀ and AV rows")
  args = p.parse_args(argv)
  try:
    params, cfg = checkpoint.load_run(args.checkpoint, args.step)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"checkpoint {args.checkpoint}: L={cfg.n_layers} d={cfg.d_model} H={cfg.n_heads} "
        f"Hkv={cfg.n_kv_heads} dh={cfg.d_head} d_ff={cfg.d_ff}\n")
  print(format_catalog(transformer.catalog(params, cfg, seq_len=args.seq_len)))
  print(f"\n{sum(x.size for x in jax.tree.leaves(params)):,} parameters")
  return 0
