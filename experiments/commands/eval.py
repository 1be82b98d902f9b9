"""Evaluate a model on any text: loss in nats per byte, bits per byte, perplexity, tokens.

    python -m experiments eval --checkpoint runs/train/RUN --data PATH [--split all|val]
    python -m experiments eval --hf PATH --data PATH [--seq-len T] [--max-bytes N]
    python -m experiments eval --checkpoint RUN --data PATH --kv-ratio R
        [--kv-alloc uniform|greedy|loss] [--kv-bits 16|8|4] [--calibration PATH]
        [--kv-calibrate-steps N] [--kv-post-rope]

`--data` follows the rules of `train` (`stdlib`, a file, a folder or a glob; hidden folders and
binary files skipped). The text is cut into consecutive windows of `T + 1` tokens that
overlap by one, so every token after the first is scored exactly once, with up to `T` tokens
of context. The last stdout line is one JSON object: `loss` (nats per byte), `bits_per_byte`,
`loss_per_token`, `perplexity` (per token), `tokens` (scored), `bytes` (scored).

The `tiny` run of `python -m experiments train` (300 steps, `--seq-len 64`) scores 2.357
nats/byte (3.400 bits/byte) on the first 200,000 held-out bytes (`--data stdlib --split val
--max-bytes 200000`), in about 7 s on 2 busy CPU cores.

**Compressed KV cache** (`--kv-ratio R`): the text is scored through a `transformer.latent`
cache whose bases and ranks come from calibration text (`analysis.kv.compress`): `R` is the
target for the whole measured ratio, rank and bits together, against a 16-bit K/V cache
(`--kv-ratio 32 --kv-bits 4` = 4-bit coefficients at 8× fewer dimensions). Calibration text
defaults to the training split of the run's `--data`; `--calibration PATH` reads all of `PATH`
instead. The scored text never changes with the compression flags (`--split` defaults to `all`
with or without them), and calibration text that overlaps it (a file, or a byte range of a
single file, in both) is refused with one line: score `--split val` of the run's own data, or
pass disjoint `--calibration` text. A RoPE model's keys are compressed before the rotation
(`Compression.pre_rope`; `--kv-post-rope` compresses the rotated keys instead, as the cache
did before). `--kv-calibrate-steps N` then fits the down and up projections to the
uncompressed model's next-token distribution on the calibration windows by `N` Adam steps
from the SVD bases (`analysis.kv.calibrate`); the scored text is never among them. The JSON
line then also holds `kv_compression` (the ratio measured from the cache arrays' bytes),
`kv_ratio`, `kv_alloc`, `kv_bits`, `kv_pre_rope`, `kv_calibrate_steps`, `loss_uncompressed`
(nats/byte, the same windows without compression) and `kv_loss_rise` (relative); `loss` and
the other scores are those of the compressed cache.

`evaluate(params, cfg, tokens, ...)` is the function behind the command; its `logits_fn`
argument swaps the forward pass (e.g. a compressed KV cache, `latent_logits_fn`) without
touching the scoring.
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

import transformer
from experiments import console, data, jsonio
from experiments.train import checkpoint

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
  return (transformer.next_token_nll(logits_BTV, tokens_BT1) * weights_BT).sum()


def latent_logits_fn(comp) -> Callable:
  """A `logits_fn` for `evaluate` that reads every window through a latent cache of `comp`.

  Args:
    comp: a `transformer.latent.Compression` (bases, ranks, bits).

  Returns:
    `logits_fn(params, cfg, tokens_BT) -> logits_BTV`: prefill of an empty cache of `T` slots.

  Example:
    >>> import jax, numpy as np, transformer
    >>> from transformer import latent
    >>> from experiments.commands.eval import evaluate, latent_logits_fn
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2, max_len=16)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> comp = latent.weight_compression(params, cfg, rank=cfg.d_head)  # full rank, float32
    >>> text = np.frombuffer(b"hello, world! " * 4, np.uint8)
    >>> a = evaluate(params, cfg, text, logits_fn=latent_logits_fn(comp))
    >>> bool(abs(a.loss - evaluate(params, cfg, text).loss) < 1e-5)
    True
  """
  from transformer import latent

  def logits_fn(params, cfg, tokens_BT):
    B, T = tokens_BT.shape
    logits, _ = latent.forward(params, cfg, tokens_BT, comp,
                               cache=latent.init_cache(cfg, comp, B, T))
    return logits

  return logits_fn


def calibration_windows(raw: bytes | np.ndarray, seq_len: int, n: int = 32) -> np.ndarray:
  """`(≤ n, seq_len + 1)` token windows spread evenly over the calibration bytes.

  Example:
    >>> import numpy as np
    >>> from experiments.commands.eval import calibration_windows
    >>> calibration_windows(np.arange(10, dtype=np.uint8), 3, n=2).tolist()
    [[0, 1, 2, 3], [6, 7, 8, 9]]
  """
  tokens = np.frombuffer(raw, np.uint8) if isinstance(raw, bytes) else np.asarray(raw)
  span = seq_len + 1
  if len(tokens) < span:
    raise ValueError(f"the calibration text has {len(tokens)} tokens, fewer than seq_len + 1 = "
                     f"{span}. Fix: pass more text with --calibration PATH.")
  starts = np.unique(np.linspace(0, len(tokens) - span, n).round().astype(int))
  return tokens[starts[:, None] + np.arange(span)[None, :]].astype(np.int32)


def windows(tokens: np.ndarray, seq_len: int) -> data.Batch:
  """Consecutive `(seq_len + 1)`-token windows overlapping by one; padding is unscored.

  Every token but the first is a scored target exactly once.

  Example:
    >>> import numpy as np
    >>> from experiments.commands.eval import windows
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
    >>> from experiments.commands.eval import evaluate
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
  """The bytes of `--data spec` (all files, or the files `train` holds out) and a note.

  For `stdlib` the held-out files are its `val` and `test` splits together (`Corpus.heldout`).
  """
  if split == "val":
    corpus = data.load_corpus(spec, val_fraction)
    held = corpus.val if corpus.heldout is None else corpus.heldout
    raw, note = held.tobytes(), corpus.note
  elif split == "all":
    found = data.scan_files(spec)
    chunks = []
    for f in found.files:
      chunks.append(data.file_bytes(f))  # a path, or a file of a shipped corpus archive
      if max_bytes and sum(map(len, chunks)) >= max_bytes:
        break
    raw, note = b"".join(chunks), found.note()
  else:
    raise ValueError(f"--split {split!r} is unknown. Fix: use 'all' or 'val'.")
  return (raw[:max_bytes] if max_bytes else raw), note


def text_segments(spec: str, split: str, val_fraction: float = 0.05
                  ) -> list[tuple[str, int, int | None]]:
  """The `(real path, first byte, end byte or None)` ranges `read_text(spec, split)` reads.

  `split` is `all`, `val` (what `train` holds out) or `train` (the rest), with `load_corpus`'s
  rule: by file, or by bytes for a single file.
  """
  files = [os.path.realpath(f) for f in data.scan_files(spec).files]
  if split == "all":
    return [(f, 0, None) for f in files]
  if len(files) == 1:
    cut = int(os.path.getsize(files[0]) * (1 - val_fraction))
    return [(files[0], cut, None) if split == "val" else (files[0], 0, cut)]
  root = os.path.commonpath(files)
  return [(f, 0, None) for f in files
          if data.is_validation(os.path.relpath(f, root), val_fraction) == (split == "val")]


def overlap(a, b) -> list[str]:
  """The files two `text_segments` lists share a byte of."""
  def meets(x, y):
    return x[0] == y[0] and (y[2] is None or x[1] < y[2]) and (x[2] is None or y[1] < x[2])

  return sorted({x[0] for x in a for y in b if meets(x, y)})


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
                 help="all the files, or the validation files train holds out (default: all, "
                      "with or without --kv-ratio)")
  p.add_argument("--val-fraction", type=float, default=0.05,
                 help="validation fraction, as in train (default: 0.05)")
  p.add_argument("--max-bytes", type=int, default=0,
                 help="score only the first N bytes (default: 0, all)")
  p.add_argument("--seq-len", type=int, default=None,
                 help="context per window (default: the run's training --seq-len; for --hf "
                      "the model's max_len)")
  p.add_argument("--batch-size", type=int, default=8, help="windows per step (default: 8)")
  kv = p.add_argument_group("compressed KV cache")
  kv.add_argument("--kv-ratio", type=float, default=None, metavar="R",
                  help="score through a latent KV cache R times smaller than a 16-bit one "
                       "(rank and bits together)")
  kv.add_argument("--kv-alloc", default="uniform", choices=("uniform", "greedy", "loss"),
                  help="rank allocation across heads and layers (default: uniform)")
  kv.add_argument("--kv-bits", type=int, default=16, choices=(16, 8, 4),
                  help="bits per stored coefficient (default: 16)")
  kv.add_argument("--calibration", metavar="PATH", default=None,
                  help="calibration text (default: the training split of the run's data)")
  kv.add_argument("--kv-calibrate-steps", type=int, default=0, metavar="N",
                  help="fit the projections to the uncompressed model by N Adam steps on the "
                       "calibration text (default: 0, the SVD bases)")
  kv.add_argument("--kv-post-rope", action="store_true",
                  help="compress a RoPE model's keys after the rotation (default: before)")
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
    extra = {}
    logits_fn = model_logits
    if args.kv_ratio is not None:
      logits_fn, extra = _kv_setup(args, params, cfg, encode, seq_len)
    result = evaluate(params, cfg, tokens, n_bytes=n_bytes, seq_len=seq_len,
                      batch_size=args.batch_size, show_progress=True, logits_fn=logits_fn)
    if args.kv_ratio is not None:
      full = evaluate(params, cfg, tokens, n_bytes=n_bytes, seq_len=seq_len,
                      batch_size=args.batch_size)
      extra.update(loss_uncompressed=full.loss, kv_loss_rise=result.loss / full.loss - 1)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"{source} on {args.data} ({args.split}): {result.loss:.4f} nats/byte = "
        f"{result.bits_per_byte:.4f} bits/byte; {result.loss_per_token:.4f} nats/token, "
        f"perplexity {result.perplexity:.2f}; {result.tokens:,} tokens, {result.bytes:,} bytes")
  if extra:
    print(f"compressed KV cache: {extra['kv_compression']:.2f}× smaller than 16-bit K/V "
          f"(target {args.kv_ratio:g}, {args.kv_alloc}, {args.kv_bits}-bit); loss "
          f"{extra['kv_loss_rise']:+.2%} vs uncompressed {extra['loss_uncompressed']:.4f}")
  print(jsonio.dumps_line({**result.to_dict(), "source": source, "data": args.data,
                           "split": args.split, **extra}))
  return 0


def _kv_setup(args, params, cfg: transformer.Config, encode, seq_len):
  """`(logits_fn, json fields)` of `--kv-ratio`: calibration text, bases, measured ratio."""
  from analysis import kv as kv_lib
  from transformer import latent

  if not args.kv_ratio >= 1:
    raise ValueError(f"--kv-ratio {args.kv_ratio:g} must be >= 1 (bytes of a 16-bit cache over "
                     "ours). Fix: e.g. --kv-ratio 8.")
  if args.kv_calibrate_steps < 0:
    raise ValueError(f"--kv-calibrate-steps {args.kv_calibrate_steps} must be >= 0.")
  T = cfg.max_len if seq_len is None else seq_len
  scored = text_segments(args.data, args.split, args.val_fraction)
  if args.calibration is not None:
    shared = overlap(text_segments(args.calibration, "all"), scored)
    what = f"--calibration {args.calibration}"
  else:
    run_data = None
    if args.checkpoint is not None:
      run_data = checkpoint.read_config(args.checkpoint).get("train", {}).get("data")
    if not run_data or str(run_data).startswith("task:"):
      raise ValueError("this model has no calibration text (a Hugging Face folder, or a run "
                       "trained on a synthetic task). Fix: pass --calibration PATH.")
    shared = overlap(text_segments(run_data, "train", args.val_fraction), scored)
    what = f"the training split of {run_data}"
  if shared:
    raise ValueError(f"the calibration text ({what}) overlaps the scored text (--data "
                     f"{args.data} --split {args.split}) in {len(shared)} file(s), e.g. "
                     f"{shared[0]}. Fix: score held-out text (--split val) or pass --calibration "
                     "text disjoint from --data.")
  if args.calibration is not None:
    raw, _ = read_text(args.calibration, "all")
  else:
    raw = data.load_corpus(run_data, args.val_fraction).train.tobytes()
  ids, _ = encode(raw[: 64 * (T + 1) * 32])
  cal = calibration_windows(np.asarray(ids), T)
  comp = kv_lib.compress(params, cfg, cal, args.kv_ratio, args.kv_alloc, args.kv_bits,
                         pre_rope=False if args.kv_post_rope else None)
  comp = kv_lib.calibrate(params, cfg, comp, cal, args.kv_calibrate_steps)
  cache = jax.eval_shape(lambda: latent.init_cache(cfg, comp, 1, T))
  ratio = latent.full_cache_bytes(cfg, 1, T) / sum(
      int(np.prod(a.shape)) * a.dtype.itemsize for a in (*cache.k, *cache.v))
  print(f"kv: calibration from {what} ({len(cal)} windows of {T + 1}, "
        f"{args.kv_calibrate_steps} Adam steps)", file=sys.stderr)
  return latent_logits_fn(comp), {"kv_compression": ratio, "kv_ratio": args.kv_ratio,
                                  "kv_alloc": args.kv_alloc, "kv_bits": args.kv_bits,
                                  "kv_pre_rope": comp.pre_rope and cfg.positions == "rope",
                                  "kv_calibrate_steps": args.kv_calibrate_steps,
                                  "kv_basis_bytes": latent.basis_bytes(comp)}
