"""The one next-token loss against a float64 numpy log-softmax, and its callers against it."""

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from analysis import heads
from experiments.train import step


def _reference_nll(logits_BTV, tokens_BT1):
  x = np.asarray(logits_BTV, np.float64)
  logp = x - x.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  tgt = np.asarray(tokens_BT1)[:, 1:]
  return -np.take_along_axis(logp, tgt[..., None], -1)[..., 0]


def test_nll_and_weighted_mean_match_numpy_float64():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 7)).astype(np.float32) * 4
  tokens = rng.integers(0, 7, size=(3, 6))
  weights = (rng.random((3, 5)) > 0.4).astype(np.float32)
  want = _reference_nll(logits, tokens)
  np.testing.assert_allclose(transformer.next_token_nll(logits, tokens), want, rtol=2e-6,
                             atol=2e-6)
  np.testing.assert_allclose(transformer.next_token_loss(logits, tokens), want.mean(), rtol=2e-6)
  np.testing.assert_allclose(transformer.next_token_loss(logits, tokens, weights),
                             (want * weights).sum() / weights.sum(), rtol=2e-6)


def test_training_analysis_and_eval_score_the_same_loss():
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, cfg.vocab_size)
  logits = transformer.Transformer(cfg).apply({"params": params}, tokens[:, :-1])
  want = _reference_nll(logits, tokens).mean()
  ones = jnp.ones((2, 8))
  np.testing.assert_allclose(step.loss_fn(params, transformer.Transformer(cfg), tokens, ones),
                             want, rtol=1e-5)
  np.testing.assert_allclose(heads.next_token_loss(params, cfg, tokens), want, rtol=1e-5)
  np.testing.assert_allclose(step.eval_metrics(params, transformer.Transformer(cfg), tokens,
                                               ones)["loss"], want, rtol=1e-5)
