"""The explicit-matrix transformer.

Layout, stated once: activations are row vectors and every weight is used as `x @ W`
with `W: (d_in, d_out)` — axis 0 is the reduction axis (the preface's `X × W_Q = Q`, and
optax's Muon convention). Block weights are stacked: `blocks/attn/w_q` is `(L, D, H·Dh)`.

Axis legend, used by every shape suffix in the four packages (`x_BTD`, `q_BTHDh`,
`k_BSKDh`, `w_LDF`, `A_LDR`); one letter (or pair) per axis, never two meanings:

  B batch · T query positions · S key positions · D d_model · H query heads ·
  K key/value heads · Dh head width · F d_ff · L layers · V vocab · R rank

Names (`transformer.names` is the one table of them and their roles):
`embed/embedding (V, D)`, `pos_embed/embedding (max_len, D)`,
`blocks/attn/{w_q, w_k, w_v} (L, D, H·Dh | K·Dh)`, `blocks/attn/w_o (L, H·Dh, D)`,
`blocks/ffn/{w_1, w_gate} (L, D, F)`, `blocks/ffn/w_2 (L, F, D)`,
`unembed/w_out (D, V)` (absent when tied), norms `scale`/`bias (D,)`, projection
biases `b_q, b_k, b_v, b_o, b_1, b_gate, b_2`.

Example:
  >>> import jax, transformer
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> tokens = jax.numpy.array([[72, 101, 108, 108, 111]])  # b"Hello"
  >>> transformer.Transformer(cfg).apply({"params": params}, tokens).shape
  (1, 5, 256)
"""

from transformer import latent, lora, names
from transformer.attention import ATTENTION, make_mask, rope, softmax_attention
from transformer.config import PRESETS, Config, gpt2_config, llama_config, preset
from transformer.decode import (
    cached_logits,
    decode_step,
    generate,
    init_cache,
    prefill,
    sample,
)
from transformer.hf import from_hf, to_hf
from transformer.loss import next_token_loss, next_token_nll
from transformer.matmuls import Entry, catalog
from transformer.model import (
    Block,
    KVCache,
    KVInputs,
    Transformer,
    block_fn,
    dense_kv,
    forward_layerwise,
    init,
    layer,
)
from transformer.version import __version__

__all__ = [
    "__version__",
    "ATTENTION", "Block", "Config", "Entry", "KVCache", "KVInputs", "PRESETS", "Transformer",
    "block_fn", "cached_logits", "catalog", "decode_step", "dense_kv", "forward_layerwise",
    "from_hf", "generate", "gpt2_config", "init",
    "init_cache", "latent", "layer", "llama_config", "lora", "make_mask", "names",
    "next_token_loss", "next_token_nll", "preset",
    "prefill", "rope", "sample", "softmax_attention", "to_hf",
]
