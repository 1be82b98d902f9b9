"""Throughput of the jitted train step, against a plain Flax GPT and the machine's matmul rate.

    python -m experiments.benchmarks.train_step [--rounds 5] [--only small|mid]

About a minute on 2 CPU cores. For each shape it compiles two AdamW train steps of the same
model, same loss and same optimizer settings, one device:

- `ours`: `experiments.train.build` on `transformer.Transformer` (named matrices, the blocks
  one `nn.scan` over stacked weights);
- `peer`: `PeerGPT`, written here the way a plain `flax.linen` GPT is written (`nn.Dense`,
  `nn.LayerNorm`, `nn.dot_product_attention`, the blocks unrolled), with the same parameter
  count (checked);

and times them in interleaved rounds (`experiments.lab.timing.interleaved`) together
with a jitted float32 `(n, n) @ (n, n)`, so the matmul rate is this machine's in this run.
It prints per shape each step's median time, ours/peer, and each one's model FLOP/s as a
share of the measured matmul rate. Shapes: d=256, L=4, T=256, B=16 (the `tiny` family
widened) and d=512, L=8, T=512, B=2. Expected: ours/peer below 1 at d=256 and about 1 at
d=512 (measured on 2 shared cores: 0.89 and 0.97; 1.14 and 1.10 before the layer scan
recomputed its element-wise work, see `transformer.model`), each above 60% of the matmul rate.
The ratios move by a few percent from run to run on a loaded machine.

FLOPs per step are counted by hand for the matmuls of the forward pass and tripled for the
backward pass (``6 N`` per token for the weights, plus ``12 L T d`` per token for the scores
and mixing, counting the full square although half of it is masked). XLA's `cost_analysis` is
no substitute: it counts the body of the layer scan once, not `L` times.
"""

from __future__ import annotations

import argparse
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import transformer
from experiments import train
from experiments.lab.timing import interleaved
from experiments.train import sharding


def matmul_fn(n: int = 1024, count: int = 8):
  """A zero-argument call of `count` jitted float32 `(n, n) @ (n, n)`, and its FLOPs.

  Several products per call, so that one timed call lasts long enough to be measured on a
  loaded machine; the FLOPs are ``2 n^3`` per product.
  """
  a, b = (jax.random.normal(k, (n, n), jnp.float32) for k in jax.random.split(jax.random.key(0)))
  matmul = jax.jit(jnp.matmul)
  return (lambda: [matmul(a, b) for _ in range(count)]), 2 * n**3 * count


def model_flops_per_step(cfg: transformer.Config, batch: int, seq_len: int) -> float:
  """Forward + backward matmul FLOPs of one step: ``3 x`` the forward count.

  Forward, per token: ``2`` FLOPs per weight of every matrix used as `x @ W` (embedding lookup
  excluded, the output matrix included) and ``4 L T d_h H`` for `Q Kᵀ` and `A V`.
  """
  d, L, H, K, dh, F, V = (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head,
                          cfg.d_ff, cfg.vocab_size)
  n_ffn = 3 if cfg.activation == "swiglu" else 2
  weights = L * (d * H * dh + 2 * d * K * dh + H * dh * d + n_ffn * d * F) + d * V
  forward_per_token = 2 * weights + 4 * L * seq_len * H * dh
  return 3 * forward_per_token * batch * seq_len


# ------------------------------------------------------------------------------ the peer


PEER_FAMILY = dict(norm="layernorm", norm_position="pre", activation="gelu_tanh",
                   positions="learned", tie_embeddings=True, use_bias=True, residual=True,
                   causal=True, attention="softmax", qk_tied=False, remat=False,
                   dtype="float32", param_dtype="float32")


def _dense(n: int, std: float, name: str) -> nn.Dense:
  return nn.Dense(n, kernel_init=nn.initializers.normal(std), name=name)


class PeerBlock(nn.Module):
  """A pre-LayerNorm GPT-2 block as plain Flax writes it."""

  cfg: transformer.Config

  @nn.compact
  def __call__(self, x_BTD, mask):
    cfg = self.cfg
    B, T, D = x_BTD.shape
    H, std = cfg.n_heads, cfg.init_std
    out_std = std / (2 * cfg.n_layers) ** 0.5
    h = nn.LayerNorm(epsilon=cfg.norm_eps, name="norm_1")(x_BTD)
    q, k, v = (_dense(D, std, n)(h).reshape(B, T, H, D // H) for n in "qkv")
    a = nn.dot_product_attention(q, k, v, mask=mask).reshape(B, T, D)
    x_BTD = x_BTD + _dense(D, out_std, "o")(a)
    h = nn.LayerNorm(epsilon=cfg.norm_eps, name="norm_2")(x_BTD)
    h = nn.gelu(_dense(cfg.d_ff, std, "fc")(h), approximate=True)
    return x_BTD + _dense(D, out_std, "proj")(h)


class PeerGPT(nn.Module):
  """GPT-2 in plain `flax.linen`: token + learned position embeddings, `L` unrolled blocks,
  final LayerNorm, logits tied to the token embedding. Built from a `transformer.Config` of
  that family (`PEER_FAMILY`), with the same parameters as `transformer.Transformer(cfg)`
  (`peer_params` maps ours onto it)."""

  cfg: transformer.Config

  @nn.compact
  def __call__(self, tokens_BT):
    cfg = self.cfg
    wrong = {k: getattr(cfg, k) for k, v in PEER_FAMILY.items() if getattr(cfg, k) != v}
    if wrong or cfg.n_kv_heads != cfg.n_heads or cfg.d_head * cfg.n_heads != cfg.d_model:
      raise ValueError(f"PeerGPT: the peer is a plain GPT-2; {wrong or 'the head sizes'} differ. "
                       "Fix: a `tiny`/`gpt2-*` preset with only sizes overridden.")
    _, T = tokens_BT.shape
    embed = nn.Embed(cfg.vocab_size, cfg.d_model,
                     embedding_init=nn.initializers.normal(cfg.init_std), name="embed")
    pos = self.param("pos_embed", nn.initializers.normal(cfg.init_std),
                     (cfg.max_len, cfg.d_model))
    x = embed(tokens_BT) + pos[None, :T]
    mask = nn.make_causal_mask(tokens_BT)
    for l in range(cfg.n_layers):
      x = PeerBlock(cfg, name=f"block_{l}")(x, mask)
    return embed.attend(nn.LayerNorm(epsilon=cfg.norm_eps, name="norm_f")(x)).astype(
        jnp.float32)


def peer_params(params, cfg: transformer.Config) -> dict:
  """Our `params` in the peer's layout (layer `l` of every stacked weight in `block_l`)."""
  blocks = params["blocks"]
  peer = {"embed": {"embedding": params["embed"]["embedding"]},
          "pos_embed": params["pos_embed"]["embedding"],
          "norm_f": dict(params["norm_f"])}
  dense = {"q": ("attn", "q"), "k": ("attn", "k"), "v": ("attn", "v"), "o": ("attn", "o"),
           "fc": ("ffn", "1"), "proj": ("ffn", "2")}
  for l in range(cfg.n_layers):
    block = {name: {"kernel": blocks[sub][f"w_{w}"][l], "bias": blocks[sub][f"b_{w}"][l]}
             for name, (sub, w) in dense.items()}
    for norm in ("norm_1", "norm_2"):
      block[norm] = {k: v[l] for k, v in blocks[norm].items()}
    peer[f"block_{l}"] = block
  return peer


def peer_optimizer(tc: train.TrainConfig) -> optax.GradientTransformation:
  """`train.optimizer(tc)` for AdamW, for the peer's names: decay on the 2-D leaves."""
  adamw = optax.adamw(train.schedule(tc), b1=0.9, b2=0.95, weight_decay=tc.weight_decay,
                      mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))
  return optax.chain(optax.clip_by_global_norm(tc.grad_clip), adamw)


# ------------------------------------------------------------------------------ the steps


def _batch(cfg: transformer.Config, batch: int, seq_len: int):
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq_len + 1)), jnp.int32)
  return tokens, jnp.ones((batch, seq_len), jnp.float32)


def _compiled(step, state, tokens, weights):
  start = time.perf_counter()
  compiled = step.lower(state, tokens, weights).compile()
  return compiled, time.perf_counter() - start


def _size(tree) -> int:
  return sum(x.size for x in jax.tree.leaves(tree))


def _runner(compiled, state, tokens, weights):
  """A zero-argument call of one step that carries the (donated) state along."""
  box = [state]

  def one_step():
    box[0], metrics = compiled(box[0], tokens, weights)
    return metrics["loss"]

  return one_step


def steps(cfg: transformer.Config, batch: int, seq_len: int) -> dict:
  """Compiled AdamW train steps of ours and the peer on one device, ready to time.

  Returns:
    `{"ours": fn, "peer": fn, "compile_s": {...}, "n_params": {...}}`, each `fn` a
    zero-argument call of one step.
  """
  tc = train.TrainConfig(steps=1000, warmup_steps=10)
  tokens, weights = _batch(cfg, batch, seq_len)
  trainer = train.build(cfg, train.optimizer(tc), sharding.make_mesh({"data": 1}),
                        train.schedule(tc))
  ours, ours_s = _compiled(trainer.step, trainer.init(jax.random.key(0)), tokens, weights)

  peer_model, tx = PeerGPT(cfg), peer_optimizer(tc)
  params = jax.jit(peer_model.init)(jax.random.key(0), tokens[:, :-1])["params"]
  peer_state = train.TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
  peer_step = jax.jit(lambda s, t, w: train.train_step(s, t, w, model=peer_model, tx=tx,
                                                       lr_schedule=train.schedule(tc)),
                      donate_argnums=0)
  peer, peer_s = _compiled(peer_step, peer_state, tokens, weights)

  return {"ours": _runner(ours, trainer.init(jax.random.key(0)), tokens, weights),
          "peer": _runner(peer, peer_state, tokens, weights),
          "compile_s": {"ours": ours_s, "peer": peer_s},
          "n_params": {"ours": _size(trainer.abstract.params), "peer": _size(params)}}


def compare(cfg: transformer.Config, batch: int, seq_len: int, rounds: int,
            matmul_n: int = 1024) -> dict:
  """Ours vs the peer vs the matmul, timed in `rounds` interleaved rounds.

  Returns:
    `{"ours_s", "peer_s", "ratio" (ours / peer), "ours_share", "peer_share" (model FLOP/s
    over the measured matmul FLOP/s), "matmul_flops_per_s", "flops", "compile_s", "n_params"}`.
  """
  s = steps(cfg, batch, seq_len)
  if s["n_params"]["ours"] != s["n_params"]["peer"]:
    raise ValueError(f"compare: the peer has {s['n_params']['peer']} parameters, ours "
                     f"{s['n_params']['ours']}: not the same model. Fix: a GPT-2 family cfg.")
  mm, mm_flops = matmul_fn(matmul_n)
  t = interleaved({"matmul": mm, "ours": s["ours"], "peer": s["peer"]}, rounds)
  rate = mm_flops / t["matmul"]
  flops = model_flops_per_step(cfg, batch, seq_len)
  return {"ours_s": t["ours"], "peer_s": t["peer"], "ratio": t["ours"] / t["peer"],
          "ours_share": flops / t["ours"] / rate, "peer_share": flops / t["peer"] / rate,
          "matmul_flops_per_s": rate, "flops": flops, "compile_s": s["compile_s"],
          "n_params": s["n_params"]["ours"]}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.train_step",
                              description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds (median)")
  p.add_argument("--batch-small", type=int, default=16, help="batch at d=256")
  p.add_argument("--batch-mid", type=int, default=2, help="batch at d=512")
  p.add_argument("--matmul-n", type=int, default=1024, help="size of the reference matmul")
  p.add_argument("--only", choices=("small", "mid"), help="run one of the two shapes")
  args = p.parse_args(argv)

  shapes = {
      "small": ("d=256 L=4", transformer.preset("tiny", d_model=256, n_layers=4),
                args.batch_small, 256),
      "mid": ("d=512 L=8", transformer.preset("tiny", d_model=512, n_layers=8, n_heads=8,
                                              max_len=512), args.batch_mid, 512),
  }
  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}); "
        f"{args.rounds} interleaved rounds of ours / peer / float32 matmul {args.matmul_n}^2")
  print(f"{'model':<10} {'B x T':>8} {'params':>8} {'GFLOP/step':>10} {'matmul GF/s':>11} "
        f"{'ours ms':>8} {'peer ms':>8} {'ours/peer':>9} {'ours %mm':>8} {'peer %mm':>8} "
        f"{'compile s':>10}")
  for key, (name, cfg, batch, seq_len) in shapes.items():
    if args.only not in (None, key):
      continue
    r = compare(cfg, batch, seq_len, args.rounds, args.matmul_n)
    c = r["compile_s"]
    print(f"{name:<10} {f'{batch}x{seq_len}':>8} {r['n_params'] / 1e6:>7.2f}M "
          f"{r['flops'] / 1e9:>10.2f} {r['matmul_flops_per_s'] / 1e9:>11.1f} "
          f"{1e3 * r['ours_s']:>8.1f} {1e3 * r['peer_s']:>8.1f} {r['ratio']:>9.3f} "
          f"{r['ours_share']:>8.1%} {r['peer_share']:>8.1%} "
          f"{c['ours']:>4.1f}/{c['peer']:<4.1f}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
