"""Are the heads redundant? Ablation (what a head is worth) and pattern similarity (what it does).

Two views of redundancy that the weights alone cannot give. `head_ablation` zeroes each head's
output and measures the rise of the next-token loss, then removes heads cumulatively, cheapest
first, to count how many can go at a given loss cost (Michel et al., 2019). `pattern_similarity`
correlates the heads' attention maps. Neither follows from the subspaces of `W_Q^h`, `W_K^h`:
two heads whose projections are exactly orthogonal can still attend identically when the
residual stream does not fill the space (tests/analysis/test_heads.py builds such a pair).

Layout, as in `transformer`: `blocks/attn/w_o` is `(L, H·dh, d)`; head `h` writes through the
row block `h·dh : (h+1)·dh`, so zeroing that block removes the head (and nothing else: the bias
`b_o` is shared by all heads and stays).
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from analysis.inputs import check_choice, check_int, check_tol
from analysis.properties import principal_angles
from transformer import loss as transformer_loss
from transformer.config import Config
from transformer.model import Transformer, param_tree
from transformer.names import split_heads


def _without_heads(params, cfg: Config, keep_LH: jax.Array):
  """`params` with the `w_o` rows of every head where `keep_LH == 0` zeroed."""
  params = param_tree(params)
  w_o = params["blocks"]["attn"]["w_o"]
  keep_rows = jnp.repeat(keep_LH, cfg.d_head, axis=-1).astype(w_o.dtype)  # (L, H·dh)
  attn = {**params["blocks"]["attn"], "w_o": w_o * keep_rows[:, :, None]}
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


def next_token_loss(params, cfg: Config, tokens_BT1: jax.Array) -> jax.Array:
  """Mean next-token cross-entropy (nats) of `tokens_BT1[:, 1:]` given the prefixes: the
  model's `transformer.next_token_loss`."""
  logits_BTV = Transformer(cfg).apply({"params": param_tree(params)}, tokens_BT1[:, :-1])
  return transformer_loss.next_token_loss(logits_BTV, tokens_BT1)


@functools.partial(jax.jit, static_argnames=("cfg", "parallel"))
def _ablated_losses(params, cfg: Config, tokens_BT1, keep_NLH, parallel: int):
  """`next_token_loss` with the heads of each mask in `keep_NLH` removed, `(N,)`."""
  loss = lambda keep_LH: next_token_loss(_without_heads(params, cfg, keep_LH), cfg, tokens_BT1)
  return jax.lax.map(loss, keep_NLH, batch_size=parallel)


def head_ablation(params, cfg: Config, tokens, *, tol: float = 0.01,
                  parallel: int = 4) -> dict[str, np.ndarray]:
  r"""Loss rise when each head is removed, and how many heads can go at a relative cost `tol`.

  With `ℒ(S)` the next-token loss with the heads in `S` removed (their `W_O` rows zeroed):

  .. math::
    r_{lh} = ℒ(\{(l,h)\}) - ℒ(\emptyset), \qquad
    n_\text{prunable} = \max\{k : ℒ(\{o_1..o_j\}) \le (1+\text{tol})\,ℒ(\emptyset)
      \ \forall j \le k\}

  where `o_1, o_2, …` orders the heads by `r_lh`, smallest first. The cumulative loss is
  re-measured after every removal (removing two heads is not the sum of removing each), but
  the order is fixed after the single-head pass — `2·L·H` forward passes in all, where a full
  greedy search (re-ranking after each removal) would need `≈ (L·H)²/2`. The count stops at
  the first removal that breaks the tolerance, so a later removal that happens to lower the
  loss does not rescue it.

  Args:
    params: the model's parameters (bare or `{"params": ...}`).
    cfg: its `Config`.
    tokens: `(B, T+1)` int token ids; the loss scores `tokens[:, 1:]`.
    tol: relative loss rise allowed for pruned heads (`0.01` = 1%).
    parallel: ablations evaluated together in one vmapped pass (memory × `parallel`).

  Returns:
    numpy: `base_loss` `()`, `rise_LH` (absolute rise per head), `order` `(L·H, 2)` the
    `(layer, head)` removal order, `loss_removed` `(L·H + 1,)` the loss with the first `k`
    heads of `order` removed, and `n_prunable` `()` int.

  Example:
    >>> import jax, jax.numpy as jnp, transformer, analysis
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (2, 17), 0, cfg.vocab_size)
    >>> out = analysis.head_ablation(params, cfg, tokens)
    >>> out["rise_LH"].shape, out["loss_removed"].shape
    ((2, 4), (9,))
  """
  check_tol(tol, "tol", "analysis.head_ablation", allow_none=False, example="0.01")
  check_int(parallel, 1, "parallel", "analysis.head_ablation")
  tokens = jnp.asarray(tokens)
  if tokens.ndim != 2 or tokens.shape[1] < 2:
    raise ValueError(f"head_ablation: tokens must be (B, T+1) with T >= 1, got {tokens.shape=}")
  if tol < 0:
    raise ValueError(f"head_ablation: {tol=} must be >= 0 (a relative loss rise)")
  L, H = cfg.n_layers, cfg.n_heads
  params = param_tree(params)
  eye = np.eye(L * H, dtype=np.float32)
  keep = np.concatenate([np.ones((1, L * H), np.float32), 1 - eye])  # none removed, then each
  losses = np.asarray(_ablated_losses(params, cfg, tokens, jnp.asarray(keep.reshape(-1, L, H)),
                                      parallel), np.float64)
  base, rise = losses[0], losses[1:] - losses[0]
  order = np.argsort(rise, kind="stable")
  removed = np.cumsum(eye[order], axis=0)  # row k-1: the first k heads of `order`
  keep = np.concatenate([np.ones((1, L * H), np.float32), 1 - removed])
  curve = np.asarray(_ablated_losses(params, cfg, tokens, jnp.asarray(keep.reshape(-1, L, H)),
                                     parallel), np.float64)
  within = curve[1:] <= (1 + tol) * base
  n_prunable = L * H if within.all() else int(np.argmin(within))
  return {"base_loss": np.asarray(base), "rise_LH": rise.reshape(L, H),
          "order": np.stack([order // H, order % H], -1), "loss_removed": curve,
          "n_prunable": np.asarray(n_prunable)}


@functools.partial(jax.jit, static_argnames="center")
def pattern_similarity(weights: jax.Array, valid: jax.Array | None = None, *,
                       center: Literal["row", "global"] = "row") -> jax.Array:
  r"""Mean pairwise correlation of the heads' attention maps.

  Each head's map is flattened over batch, queries and keys, keeping only the valid entries
  (default: the causal ones, `s ≤ t`); masked entries are exact zeros in every head and would
  inflate the correlation. With `ρ_{hg}` the correlation of heads `h` and `g`:

  .. math::
    ρ_{hg} = \frac{\sum (a^h_{bts} - \bar a^h)(a^g_{bts} - \bar a^g)}
      {\sqrt{\sum (a^h_{bts} - \bar a^h)^2 \sum (a^g_{bts} - \bar a^g)^2}}, \qquad
    \text{similarity} = \frac{1}{H(H-1)} \sum_{h \ne g} ρ_{hg}

  `center="global"` is Pearson's: `ā^h` is the head's mean over all valid entries. It is
  dominated by what every causal map shares — row `t` of any map has mean `1/(t+1)`, so the
  first rows are large in every head — and scores near 1 even for heads that all attend
  uniformly (a freshly initialized model). `center="row"` (default) subtracts each query
  row's mean instead (exactly `1/n_t` for a softmax row over `n_t` valid keys): the pooled
  within-row correlation of the heads' departures from uniform attention, about `0` for
  unrelated heads and `1` for identical ones. A head with a constant (uniform) map correlates
  `0` with every other head.

  Args:
    weights: `(..., B, H, T, S)` attention maps (rows sum to 1), e.g. one layer's sown
      `weights` `(B, H, T, S)` or all layers' `(L, B, H, T, S)`.
    valid: which entries count, broadcastable to `(B, T, S)`; default causal `s ≤ t`.
    center: `"row"` (per query row) or `"global"` (per head; plain Pearson).

  Returns:
    `(...,)` mean off-diagonal correlation (e.g. `()` for one layer, `(L,)` stacked).

  Example:
    >>> import jax, analysis
    >>> w = jax.nn.softmax(jax.random.normal(jax.random.key(0), (2, 4, 8, 8)), -1)
    >>> analysis.pattern_similarity(w).shape
    ()
  """
  check_choice(center, ("row", "global"), "center", "analysis.pattern_similarity")
  if weights.ndim < 4:
    raise ValueError(f"pattern_similarity: weights must be (..., B, H, T, S), got {weights.ndim=}")
  if center not in ("row", "global"):
    raise ValueError(f"pattern_similarity: {center=} is unknown; use 'row' or 'global'")
  B, H, T, S = weights.shape[-4:]
  if H < 2:
    raise ValueError(f"pattern_similarity: needs at least 2 heads, got {weights.shape=}")
  if valid is None:
    valid = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
  valid_BTS = jnp.broadcast_to(valid, (B, T, S)).astype(jnp.float32)
  w_BTSH = jnp.moveaxis(weights.astype(jnp.float32), -3, -1)
  mask = jnp.broadcast_to(valid_BTS[..., None], w_BTSH.shape)
  if center == "row":
    total = jnp.sum(w_BTSH * mask, -2, keepdims=True)  # (..., B, T, 1, H)
    n = jnp.maximum(jnp.sum(valid_BTS, -1), 1)[..., None, None]  # (B, T, 1, 1)
    mean = total / jnp.broadcast_to(n, total.shape)
  else:
    mean = (jnp.sum(w_BTSH * mask, (-4, -3, -2)) / jnp.sum(valid_BTS))[..., None, None, None, :]
  c_BTSH = (w_BTSH - mean) * mask
  cov_HH = jnp.einsum("...btsh,...btsg->...hg", c_BTSH, c_BTSH)
  std_H = jnp.sqrt(jnp.diagonal(cov_HH, axis1=-2, axis2=-1))
  denom = std_H[..., :, None] * std_H[..., None, :]
  rho_HH = jnp.where(denom > 0, cov_HH / jnp.where(denom > 0, denom, 1), 0)
  off = jnp.broadcast_to(1 - jnp.eye(H, dtype=rho_HH.dtype), rho_HH.shape)
  return jnp.sum(rho_HH * off, (-2, -1)) / (H * (H - 1))


# ---------------------------------------------------------------- all views of redundancy


def _max_pair_cosine(blocks_LNdk: jax.Array) -> jax.Array:
  """Per layer, the largest principal cosine over all pairs of the `N` head blocks, `(L,)`."""
  N = blocks_LNdk.shape[1]
  a, b = np.triu_indices(N, 1)
  angles = principal_angles(blocks_LNdk[:, a], blocks_LNdk[:, b])  # (L, pairs, dh)
  return jnp.max(jnp.cos(angles[..., 0]), -1)


@functools.partial(jax.jit, static_argnames="cfg")
def _subspace_cosines(params, cfg: Config) -> dict[str, jax.Array]:
  attn = param_tree(params)["blocks"]["attn"]
  out = {"q": _max_pair_cosine(split_heads(attn["w_q"].astype(jnp.float32), cfg.n_heads,
                                           "columns")),
         "o": _max_pair_cosine(jnp.swapaxes(split_heads(attn["w_o"].astype(jnp.float32),
                                                        cfg.n_heads, "rows"), -1, -2))}
  if cfg.n_kv_heads >= 2:
    for name in ("k", "v"):
      out[name] = _max_pair_cosine(split_heads(attn[f"w_{name}"].astype(jnp.float32),
                                               cfg.n_kv_heads, "columns"))
  return out


@functools.partial(jax.jit, static_argnames="cfg")
def _pattern_similarity(params, cfg: Config, tokens_BT):
  model = Transformer(cfg)
  _, state = model.apply({"params": param_tree(params)}, tokens_BT,
                         mutable=["intermediates"])
  return pattern_similarity(state["intermediates"]["blocks"]["attn"]["weights"][0])


def redundancy_summary(params, cfg: Config, tokens, *, tol: float = 0.01) -> dict:
  r"""How redundant a model's heads are, by weights, by patterns and by ablation.

  - `max_cos`: per layer, the largest principal cosine `cos θ_1` between two heads' `W_Q^h`
    column spaces (`analysis.principal_angles`), averaged over layers. `W_Q^h` spans the
    column space of `W_QK^h = W_Q^h W_K^{g(h)⊤}` (when `W_K^{g(h)}` has full column rank;
    `g(h) = h // (H/K)` is the key/value head query head `h` reads, `h` itself without
    grouped-query attention), so this is the query side of `W_QK`; `max_cos_k` is its key
    side and `max_cos_v` the values, both between the `K` key/value heads, `max_cos_o` the
    row spaces of `W_O^h` (what the heads write). `1`: two heads share a direction; `0`:
    mutually orthogonal subspaces (the target of `optim.orthogonal_heads`).
  - `pattern_similarity`: `analysis.pattern_similarity` of each layer's attention maps on
    `tokens[:, :-1]`, averaged over layers.
  - `n_prunable`, `base_loss`: `analysis.head_ablation` at relative loss cost `tol`;
    `prunable_fraction = n_prunable / (L·H)`.

  Args:
    params: one model's parameters.
    cfg: its `Config`.
    tokens: `(B, T+1)` int token ids.
    tol: relative loss rise allowed for pruned heads.

  Returns:
    Python floats/ints for the scalars above, and `per_layer`: lists (length `L`) of
    `max_cos`, `max_cos_k`, `max_cos_v`, `max_cos_o`, `pattern_similarity`. `max_cos_k` and
    `max_cos_v` are absent when there is a single key/value head.

  Example:
    >>> import jax, transformer
    >>> from analysis.heads import redundancy_summary
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (2, 17), 0, cfg.vocab_size)
    >>> sorted(redundancy_summary(params, cfg, tokens))[:3]
    ['base_loss', 'max_cos', 'max_cos_k']
  """
  check_tol(tol, "tol", "analysis.redundancy_summary", allow_none=False, example="0.01")
  if cfg.n_heads < 2:
    raise ValueError(f"redundancy_summary: needs n_heads >= 2, got {cfg.n_heads=}")
  tokens = jnp.asarray(tokens)
  cosines = {k: np.asarray(v, np.float64) for k, v in _subspace_cosines(params, cfg).items()}
  patterns = np.asarray(_pattern_similarity(params, cfg, tokens[:, :-1]), np.float64)
  ablation = head_ablation(params, cfg, tokens, tol=tol)
  per_layer = {"max_cos" if k == "q" else f"max_cos_{k}": v for k, v in cosines.items()}
  per_layer["pattern_similarity"] = patterns
  n_prunable = int(ablation["n_prunable"])
  return {**{k: float(v.mean()) for k, v in per_layer.items()},
          "n_prunable": n_prunable, "prunable_fraction": n_prunable / (cfg.n_layers * cfg.n_heads),
          "base_loss": float(ablation["base_loss"]),
          "per_layer": {k: v.tolist() for k, v in per_layer.items()}}
