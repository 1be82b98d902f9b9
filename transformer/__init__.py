"""The explicit-matrix transformer.

Layout, stated once: activations are row vectors and every weight is used as `x @ W`
with `W: (d_in, d_out)` — axis 0 is the reduction axis (the preface's `X × W_Q = Q`, and
optax's Muon convention). Block weights are stacked: `blocks/attn/w_q` is `(L, d, H·dh)`.

Names: `embed/embedding (vocab, d)`, `pos_embed/embedding (max_len, d)`,
`blocks/attn/{w_q, w_k, w_v} (L, d, H·dh | Hkv·dh)`, `blocks/attn/w_o (L, H·dh, d)`,
`blocks/ffn/{w_1, w_gate} (L, d, d_ff)`, `blocks/ffn/w_2 (L, d_ff, d)`,
`unembed/w_out (d, vocab)` (absent when tied), norms `scale`/`bias (d,)`, projection
biases `b_q, b_k, b_v, b_o, b_1, b_gate, b_2`.

Example:
  >>> import jax, transformer
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> tokens = jax.numpy.array([[72, 101, 108, 108, 111]])  # b"Hello"
  >>> logits = transformer.Transformer(cfg).apply({"params": params}, tokens)  # (1, 5, 256)
"""

from transformer import latent, lora
from transformer.attention import ATTENTION, make_mask, rope, softmax_attention
from transformer.catalog import Entry, catalog
from transformer.config import PRESETS, Config, gpt2_config, llama_config, preset
from transformer.decode import decode_step, generate, init_cache, prefill, sample
from transformer.hf import from_hf, to_hf
from transformer.model import (
    Block,
    KVCache,
    Transformer,
    block_fn,
    init,
    layer,
)

__all__ = [
    "ATTENTION", "Block", "Config", "Entry", "KVCache", "PRESETS", "Transformer",
    "block_fn", "catalog", "decode_step", "from_hf", "generate", "gpt2_config", "init",
    "init_cache", "latent", "layer", "llama_config", "lora", "make_mask", "preset", "prefill",
    "rope", "sample", "softmax_attention", "to_hf",
]
