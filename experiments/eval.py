"""Evaluate a model on any text: loss in nats per byte, bits per byte, perplexity, tokens.

    python -m experiments eval --checkpoint runs/train/RUN --data PATH [--split all|val]
    python -m experiments eval --hf PATH --data PATH [--seq-len T] [--max-bytes N]

`--data` follows the rules of `train` (`stdlib`, a file, a folder or a glob; hidden folders and
binary files skipped). The text is cut into consecutive windows of `T + 1` tokens that
overlap by one, so every token after the first is scored exactly once, with up to `T` tokens
of context. The last stdout line is one JSON object: `loss` (nats per byte), `bits_per_byte`,
`loss_per_token`, `perplexity` (per token), `tokens` (scored), `bytes` (scored).

The `tiny` run of `python -m experiments train` (300 steps, `--seq-len 64`) scores 2.357
nats/byte (3.400 bits/byte) on the first 200,000 held-out bytes (`--data stdlib --split val
--max-bytes 200000`), in about 7 s on 2 busy CPU cores.

`evaluate(params, cfg, tokens, ...)` is the function behind the command; its `logits_fn`
argument swaps the forward pass (e.g. a compressed KV cache) without touching the scoring.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import transformer
from experiments import checkpoint, console, data, jsonio

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tokenizer_config.json")


class EvalResult(NamedTuple):
  """Scores of a model on a text (see the module docstring)."""

  loss: float  # nats per byte
  bits_per_byte: float
  loss_per_token: float  # nats
  perplexity: float  # exp(loss_per_token)
  tokens: int  # scored
  bytes: int  # scored

  def to_dict(self) -> dict:
    return self._asdict()


def model_logits(params, cfg: transformer.Config, tokens_BT: jax.Array) -> jax.Array:
  """The full forward pass, `(B, T, V)` logits: the default `logits_fn` of `evaluate`."""
  return transformer.Transformer(cfg).apply({"params": params}, tokens_BT)


@functools.partial(jax.jit, static_argnames=("cfg", "logits_fn"))
def _nll_sum(params, cfg, tokens_BT1, weights_BT, logits_fn):
  logits_BTV = logits_fn(params, cfg, tokens_BT1[:, :-1]).astype(jnp.float32)
  nll_BT = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, tokens_BT1[:, 1:])
  return (nll_BT * weights_BT).sum()


def windows(tokens: np.ndarray, seq_len: int) -> data.Batch:
  """Consecutive `(seq_len + 1)`-token windows overlapping by one; padding is unscored.

  Every token but the first is a scored target exactly once.

  Example:
    >>> import numpy as np
    >>> from experiments.eval import windows
    >>> b = windows(np.arange(6), seq_len=3)
    >>> b.tokens.tolist(), b.weights.tolist()
    ([[0, 1, 2, 3], [3, 4, 5, 0]], [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
  """
  n_targets = len(tokens) - 1
  if n_targets < 1:
    raise ValueError(f"the text has {len(tokens)} tokens; scoring needs at least 2.")
  B = -(-n_targets // seq_len)
  padded = np.zeros(B * seq_len + 1, np.int32)
  padded[: len(tokens)] = tokens
  idx_BT1 = np.arange(B)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
  weights_BT = (idx_BT1[:, 1:] <= n_targets).astype(np.float32)
  return data.Batch(padded[idx_BT1], weights_BT)


def evaluate(params, cfg: transformer.Config, tokens, *, n_bytes: int | None = None,
             seq_len: int | None = None, batch_size: int = 8,
             logits_fn: Callable = model_logits, show_progress: bool = False) -> EvalResult:
  """Cross-entropy of `tokens` under the model, per token and per byte.

  .. math:: \\text{loss} = \\frac{1}{N_\\text{bytes}} \\sum_{t=2}^{N} -\\ln p(x_t \\mid
     x_{t-T}, \\dots, x_{t-1}), \\qquad \\text{bits per byte} = \\text{loss} / \\ln 2

  Args:
    params: the model's params.
    cfg: its config.
    tokens: 1-D int token ids (the text).
    n_bytes: bytes of text the scored tokens cover (default: one byte per token, as for the
      byte-level models of `train`).
    seq_len: context `T` per window (default `cfg.max_len`).
    batch_size: windows per forward pass.
    logits_fn: `(params, cfg, tokens_BT) -> logits_BTV` (hashable; default the model).
    show_progress: print progress to stderr.

  Returns:
    An `EvalResult`.

  Example:
    >>> import jax, numpy as np, transformer
    >>> from experiments.eval import evaluate
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2, max_len=16)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> r = evaluate(params, cfg, np.frombuffer(b"hello, world! " * 4, np.uint8))
    >>> r.tokens, bool(abs(r.loss - np.log(256)) < 0.2)  # a random init is near uniform
    (55, True)
  """
  tokens = np.asarray(tokens).astype(np.int64)
  if tokens.ndim != 1:
    raise ValueError(f"tokens must be 1-D; got {tokens.shape=}.")
  if len(tokens) and (tokens.min() < 0 or tokens.max() >= cfg.vocab_size):
    raise ValueError(f"token ids span [{tokens.min()}, {tokens.max()}], outside the model's "
                     f"vocabulary [0, {cfg.vocab_size}). Fix: use the model's tokenizer.")
  T = cfg.max_len if seq_len is None else seq_len
  if not 1 <= T <= cfg.max_len:
    raise ValueError(f"seq_len={T} must lie in [1, max_len={cfg.max_len}].")
  batch = windows(tokens, T)
  n_tokens = int(batch.weights.sum())
  total = 0.0
  starts = range(0, len(batch.tokens), batch_size)
  with console.progress(len(starts), desc="eval", disable=not show_progress) as bar:
    for i in starts:
      tokens_BT1, weights_BT = batch.tokens[i:i + batch_size], batch.weights[i:i + batch_size]
      if len(tokens_BT1) < batch_size:  # one compiled shape: pad with unscored windows
        pad = batch_size - len(tokens_BT1)
        tokens_BT1 = np.concatenate([tokens_BT1, np.zeros((pad, T + 1), np.int32)])
        weights_BT = np.concatenate([weights_BT, np.zeros((pad, T), np.float32)])
      total += float(_nll_sum(params, cfg, jnp.asarray(tokens_BT1), jnp.asarray(weights_BT),
                              logits_fn))
      bar.update(1)
  n_bytes = n_tokens if n_bytes is None else n_bytes
  per_token = total / n_tokens
  return EvalResult(total / n_bytes, total / n_bytes / math.log(2), per_token,
                    math.exp(min(per_token, 700.0)), n_tokens, n_bytes)


def read_text(spec: str, split: str = "all", val_fraction: float = 0.05,
              max_bytes: int = 0) -> tuple[bytes, str]:
  """The bytes of `--data spec` (all files, or the validation files of `train`) and a note."""
  if split == "val":
    corpus = data.load_corpus(spec, val_fraction)
    raw, note = corpus.val.tobytes(), corpus.note
  elif split == "all":
    found = data.scan_files(spec)
    chunks = []
    for f in found.files:
      with open(f, "rb") as fh:
        chunks.append(fh.read())
        if max_bytes and sum(map(len, chunks)) >= max_bytes:
          break
    raw, note = b"".join(chunks), found.note()
  else:
    raise ValueError(f"--split {split!r} is unknown. Fix: use 'all' or 'val'.")
  return (raw[:max_bytes] if max_bytes else raw), note


def load_model(checkpoint_dir: str | None, hf: str | None, step: int | None = None):
  """`(params, cfg, encode, source)`: the model and a `bytes -> (token ids, n_bytes)` encoder.

  A training run (or a Hugging Face folder without tokenizer files and 256 ids) reads bytes;
  a Hugging Face folder with a tokenizer uses it.
  """
  if checkpoint_dir is not None:
    params, cfg = checkpoint.load_run(checkpoint_dir, step)
    source = f"checkpoint {checkpoint_dir}"
  else:
    cfg, params = transformer.from_hf(hf)
    source = f"Hugging Face {hf}"
    if any(os.path.exists(os.path.join(hf, f)) for f in TOKENIZER_FILES):
      from transformers import AutoTokenizer

      tokenizer = AutoTokenizer.from_pretrained(hf)

      def encode(raw: bytes):
        ids = tokenizer(raw.decode("utf-8", "replace"))["input_ids"]
        first = len(tokenizer.decode(ids[:1]).encode())
        return np.asarray(ids), len(raw) - first
      return params, cfg, encode, source
    if cfg.vocab_size != data.VOCAB_SIZE:
      raise ValueError(f"{hf} has no tokenizer files and a vocabulary of {cfg.vocab_size}, so "
                       "its token ids are unknown. Fix: add the tokenizer files "
                       "(tokenizer.json, ...) to the folder.")
  if cfg.vocab_size < data.VOCAB_SIZE:
    raise ValueError(f"the model's vocab_size={cfg.vocab_size} cannot read bytes (256 ids).")
  return params, cfg, lambda raw: (np.frombuffer(raw, np.uint8), len(raw) - 1), source


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments eval", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  which = p.add_mutually_exclusive_group(required=True)
  which.add_argument("--checkpoint", metavar="RUN_DIR", help="a training run folder")
  which.add_argument("--hf", metavar="PATH", help="a GPT-2 or Llama Hugging Face folder")
  p.add_argument("--step", type=int, default=None,
                 help="checkpoint step of --checkpoint (default: the latest intact one)")
  p.add_argument("--data", required=True, help="'stdlib', a text file, a folder or a glob")
  p.add_argument("--split", default="all", choices=("all", "val"),
                 help="all the files, or the validation files train holds out (default: all)")
  p.add_argument("--val-fraction", type=float, default=0.05,
                 help="validation fraction, as in train (default: 0.05)")
  p.add_argument("--max-bytes", type=int, default=0,
                 help="score only the first N bytes (default: 0, all)")
  p.add_argument("--seq-len", type=int, default=None,
                 help="context per window (default: the run's training --seq-len; for --hf "
                      "the model's max_len)")
  p.add_argument("--batch-size", type=int, default=8, help="windows per step (default: 8)")
  args = p.parse_args(argv)
  try:
    if args.batch_size < 1 or args.max_bytes < 0:
      raise ValueError("--batch-size must be >= 1 and --max-bytes >= 0.")
    params, cfg, encode, source = load_model(args.checkpoint, args.hf, args.step)
    raw, note = read_text(args.data, args.split, args.val_fraction, args.max_bytes)
    if note:
      print(f"data: {note}", file=sys.stderr)
    tokens, n_bytes = encode(raw)
    seq_len = args.seq_len
    if seq_len is None and args.checkpoint is not None:  # the context the run trained on
      seq_len = min(checkpoint.read_config(args.checkpoint)["train"]["seq_len"], cfg.max_len)
    result = evaluate(params, cfg, tokens, n_bytes=n_bytes, seq_len=seq_len,
                      batch_size=args.batch_size, show_progress=True)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"{source} on {args.data} ({args.split}): {result.loss:.4f} nats/byte = "
        f"{result.bits_per_byte:.4f} bits/byte; {result.loss_per_token:.4f} nats/token, "
        f"perplexity {result.perplexity:.2f}; {result.tokens:,} tokens, {result.bytes:,} bytes")
  print(jsonio.dumps_line({**result.to_dict(), "source": source, "data": args.data,
                           "split": args.split}))
  return 0
