"""The bench below the claims: what they measure and train with, shared or one claim's own.

- `optimizers`: the κ-aware arms' multipliers, and the optimizer arms (AdamW with one change
  each: Muon, orthogonal heads, κ-aware rates) re-exported from `experiments.train.arms`;
  used by `muon`, `condition-lr`, `orthogonal-heads`.
- `tuning`: the rate grid, tuning on tuning seeds (its own loop over `edge.Search`), steps to a
  target loss; the fixed budgets it trains on live in `experiments.train.arms`.
- `edge`: the edge rule every tuner's loop asks which rates to run next (`Search`), and the
  one tuning record (`Tuned`).
- `heads_training`: the `orthogonal-heads` arms (the pull and per-head Muon split by query and
  key/value heads), their rate and strength tuning, and the heads' redundancy per seed.
- `updates`: how far an update is from orthogonal (condition number, singular-value entropy).
- `attention_arms`: one small model trained per attention variant over a rate grid; used by
  `psd-attention`, `sliding-window`, `dynamic-sparsity`.
- `attention_timing`: attention forward/backward time against sequence length; used by
  `sliding-window` and `python -m experiments.benchmarks.attention`.
- `stability`: eigenvalues at depth, input conditioning, the logit certificate, tracked
  training; used by `residual-eigenvalues`, `layernorm-condition`, `eigenvalue-constrained`.
- `norm_training`: training with and without a norm, read for the conditioning of the
  normalized inputs; used by `layernorm-condition` (its stress rate and end loss also by
  `eigenvalue-constrained`).
- `cap_training`: training with and without a spectral cap on the hidden matrices (tuned and
  stress rates, divergence, the logit certificate); used by `eigenvalue-constrained`.
- `kvcompress`: low-rank KV-cache compression measured as a loss rise; used by
  `kv-compression`, `adaptive-rank` and `python -m experiments eval --kv-ratio`.
- `lora`: LoRA and full fine-tuning from shared base models, the texts they adapt on and the
  update's spectra; used by `lora`.
- `kv_arms`: the `kv-compression` arms on one model (calibrate, fit, evaluate) and its goal
  arms on other text (`python -m experiments.commands.kvgoals`).
- `receptive`: a block stack's receptive field by gradient and attention mass within a
  window; used by `sliding-window`.
- `sparsity`: the `dynamic-sparsity` arms (recall with distractors, stdlib, the switch) and
  the keys a query reads.
- `timing`: interleaved timing rounds (medians), for `attention_timing` and the benchmarks.

Nothing here imports a claim or a benchmark; the claims import these, never each other.
"""
