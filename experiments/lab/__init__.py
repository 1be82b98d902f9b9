"""The bench the claims share: parts that several claims use, below every claim.

| module | holds | used by |
| --- | --- | --- |
| `optimizers` | optimizer arms: AdamW with one change each (Muon, orthogonal heads, κ-aware rates) | `muon`, `condition-lr`, `orthogonal-heads` |
| `tuning` | the rate grid, tuning on a tuning seed, fixed budgets, steps to a target loss | the optimizer claims |
| `updates` | how far an update is from orthogonal (condition number, singular-value entropy) | `muon`, `orthogonal-heads` |
| `attention_arms` | one small model trained per attention variant over a rate grid | `psd-attention`, `sliding-window`, `dynamic-sparsity` |
| `attention_timing` | attention forward/backward time against sequence length | `sliding-window`, `benchmarks.attention` |
| `stability` | eigenvalues at depth, input conditioning, the logit certificate, tracked training | `residual-eigenvalues`, `layernorm-condition`, `eigenvalue-constrained` |
| `kvcompress` | low-rank KV-cache compression of a model, measured as a loss rise | `kv-compression`, `eval --kv-ratio` |
| `timing` | interleaved timing rounds (medians) | `attention_timing`, the benchmarks |

Nothing here imports a claim or a benchmark; the claims import these, never each other.
"""
