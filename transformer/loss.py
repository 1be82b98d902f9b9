"""The one next-token loss: what training, evaluation, KV compression, LoRA and the analyses
all score a model by.

`next_token_nll(logits_BTV, tokens_BT1)` is the cross-entropy (nats) of each target
`tokens_BT1[:, 1:]` given the logits of its prefix `tokens_BT1[:, :-1]`; `next_token_loss`
its mean over the scored targets (every target, or those with weight). Everything else in the
library that reports a loss goes through these two, so "loss" means one thing everywhere.
"""

from __future__ import annotations

import jax
import optax


def next_token_nll(logits_BTV: jax.Array, tokens_BT1: jax.Array) -> jax.Array:
  """Per-position next-token cross-entropy, `(B, T)` nats, of `tokens_BT1[:, 1:]`.

  Args:
    logits_BTV: the model's logits on `tokens_BT1[:, :-1]`, `(..., T, V)`.
    tokens_BT1: `(..., T + 1)` token ids; the last `T` are the targets.

  Example:
    >>> import jax.numpy as jnp, numpy as np
    >>> from transformer.loss import next_token_nll
    >>> logits = jnp.zeros((1, 2, 4))  # uniform over 4 tokens
    >>> np.allclose(next_token_nll(logits, jnp.array([[0, 1, 2]])), np.log(4))
    True
  """
  return optax.softmax_cross_entropy_with_integer_labels(logits_BTV, tokens_BT1[..., 1:])


def next_token_loss(logits_BTV: jax.Array, tokens_BT1: jax.Array,
                    weights_BT: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy (nats) over the scored targets.

  Args:
    logits_BTV: the model's logits on `tokens_BT1[:, :-1]`.
    tokens_BT1: `(B, T + 1)` token ids.
    weights_BT: `(B, T)` weights of the targets (0: not scored, e.g. padding or a prompt);
      None scores every target alike.

  Example:
    >>> import jax.numpy as jnp
    >>> from transformer.loss import next_token_loss
    >>> logits = jnp.array([[[0.0, 9.0], [9.0, 0.0]]])  # right, then wrong, by 9 logits
    >>> round(float(next_token_loss(logits, jnp.array([[0, 1, 1]]), jnp.array([[1.0, 0.0]]))), 4)
    0.0001
  """
  nll_BT = next_token_nll(logits_BTV, tokens_BT1)
  if weights_BT is None:
    return nll_BT.mean()
  return (nll_BT * weights_BT).sum() / weights_BT.sum()
