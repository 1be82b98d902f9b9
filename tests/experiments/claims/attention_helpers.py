"""What the tests of the three attention claims share: a tiny config, the shapes each size must
build, the committed results."""

import math
import os

import jax
import numpy as np

import transformer
from experiments import jsonio
from experiments.verdict.declare import axes
from experiments.verdict.running import folders

TINY = transformer.Config(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32,
                          positions="learned", init_std=0.1)
RNG = np.random.default_rng(21)


def llama_count_by_hand(d, L, H, K, F, V):
  """Parameters of a Llama-family model from the matrix catalog: no biases, no positions,
  untied output, RMSNorm scales only, SwiGLU's three matrices."""
  dh = d // H
  attn = d * H * dh + 2 * d * K * dh + H * dh * d
  return V * d + L * (attn + 3 * d * F + 2 * d) + d + d * V


# size: family, d, L, K, d_ff, positions
SHAPE = {"micro": ("gpt", 32, 2, 4, 128, "learned"), "small": ("gpt", 128, 4, 4, 512, "learned"),
         "llama-micro": ("llama", 32, 2, 2, 96, "rope"),
         "llama-small": ("llama", 128, 4, 2, 384, "rope")}


def check_shape(cfg, size, T):
  """`cfg` has `size`'s declared shape, reading `T` tokens, and the parameters counted by hand."""
  fam, d, L, K, F, positions = SHAPE[size]
  max_len = max(256, T)
  assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff,
          cfg.positions, cfg.max_len) == (d, L, 4, K, d // 4, F, positions, max_len)
  assert (cfg.norm, cfg.activation) == (("layernorm", "gelu_tanh") if fam == "gpt"
                                        else ("rmsnorm", "swiglu"))
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  n = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
  want = (count_by_hand(d, L, 4, 256, max_len, tied=False) if fam == "gpt"
          else llama_count_by_hand(d, L, 4, K, F, 256))
  assert n == want
  if max_len == 256:  # the card the scale axis reports is this shape's
    assert axes.model_card(size)["params"] == want


def init_params(cfg, seeds):
  return {s: transformer.init(cfg, jax.random.key(s)) for s in seeds}


def committed(claim_id):
  return jsonio.load_strict(os.path.join(folders.RESULTS_DIR, claim_id, "results.json"))


def count_by_hand(d, L, H, V, max_len, tied):
  """Parameters of a GPT-family model from the matrix catalog; tied: no `w_k`, no `b_k`."""
  dh, F = d // H, 4 * d
  attn = (3 - tied) * (d * H * dh + H * dh) + H * dh * d + d
  ffn = 2 * d * F + F + d
  return V * d + max_len * d + L * (attn + ffn + 2 * 2 * d) + 2 * d
