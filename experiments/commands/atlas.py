"""The analysis atlas: every matrix of a model measured against the preface's seven topics.

    python -m experiments atlas [--model tiny] [--checkpoint RUN_DIR [--step N]] [--hf PATH]
                                [--seed 0] [--seq-len 32] [--k 8] [--krylov-dim N]

On a preset (random init) `tiny` takes about 20 seconds on 2 CPU cores, most of it
compilation. The input is real text (bytes of a standard-library file, as in `demo`). It
writes `runs/atlas/<run-id>/{config.json, results.json, report.md, *.png}`:

- spectra of every weight per layer (κ, stable/effective/numerical rank, power-law `α`,
  Marchenko–Pastur edge and outliers) and of the per-head circuits `W_QK^h`, `W_OV^h`;
- layer and end-to-end Jacobian spectra (matrix-free Lanczos/Arnoldi, checked against the dense
  Jacobian of layer 0 when it fits), spectral radius and distance of eigenvalues from 1;
- causality (token-dependency matrix of the whole stack, block-triangularity) and the rank of
  causal attention matrices certified from their diagonal;
- definiteness of `W_QK` and of the softmax kernel, decomposition (rank for 90% energy of
  weights, attention matrices, K/V caches), orthogonality, sparsity.

A random-init model should show: Jacobian eigenvalues within ~1e-2 of 1 (residual stream),
weights with no Marchenko–Pastur outliers, a block lower-triangular token dependency, full-rank
causal attention, and a softmax kernel that is not a symmetric PSD kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from analysis import report
from experiments import console, jsonio
from experiments.commands.demo import sample_text
from experiments.train import checkpoint
from transformer.model import param_tree


@dataclasses.dataclass(frozen=True)
class AtlasConfig:
  """Settings of one atlas run.

  Attributes:
    model: preset name (random init) when neither `checkpoint` nor `hf` is given.
    checkpoint: a training run directory (`experiments.train.checkpoint.load_run`).
    step: its checkpoint step (`None`: the latest intact one).
    hf: a Hugging Face checkpoint directory (`transformer.from_hf`).
    seed: init seed and Lanczos start-vector seed.
    seq_len: tokens of input text `T`.
    k: singular values / eigenvalues per Jacobian.
    krylov_dim: cap on the Lanczos/Arnoldi Krylov dimension (None: the library default, which
      grows the space until every value converges).
    energy: energy fraction for the decomposition ranks.
    dense_max_bytes: budget of the dense Jacobian cross-check.
    out: root folder of the runs.
    run_id: sub-folder name (default: a timestamp).
  """

  model: str = "tiny"
  checkpoint: str | None = None
  step: int | None = None
  hf: str | None = None
  seed: int = 0
  seq_len: int = 32
  k: int = 8
  krylov_dim: int | None = None
  energy: float = 0.9
  dense_max_bytes: int = 2**28
  out: str = "runs"
  run_id: str | None = None


def load_model(acfg: AtlasConfig):
  """`(cfg, params, source)` from a checkpoint, a Hugging Face directory, or a preset."""
  if acfg.checkpoint is not None:
    params, cfg = checkpoint.load_run(acfg.checkpoint, acfg.step)
    at = "" if acfg.step is None else f" step {acfg.step}"
    return cfg, params, f"checkpoint {acfg.checkpoint}{at}"
  if acfg.hf is not None:
    cfg, params = transformer.from_hf(acfg.hf)
    return cfg, params, f"Hugging Face {acfg.hf}"
  cfg = transformer.preset(acfg.model)
  return cfg, transformer.init(cfg, jax.random.key(acfg.seed)), f"preset {acfg.model} (random init)"


def _np(tree):
  return jax.tree.map(lambda a: np.asarray(a), tree)


def _stacked_weights(params) -> dict:
  """`{"blocks/attn/w_q": (L, d_in, d_out), ...}` in float32."""
  blocks = param_tree(params)["blocks"]
  return {f"blocks/{group}/{name}": w.astype(jnp.float32)
          for group in ("attn", "ffn") for name, w in blocks[group].items()
          if name.startswith("w_")}


def weight_spectra(params, cfg) -> dict:
  """`spectrum` of every stacked weight (batched over layers) and of the embeddings/output."""
  mats = {m.path: m.array.astype(jnp.float32)
          for m in analysis.matrices(params, cfg, include_circuits=False)
          if m.layer is None and not m.path.endswith("^T")}  # a tied output repeats E
  mats.update(_stacked_weights(params))
  return _np(jax.jit(lambda ms: {n: analysis.spectrum(w, matrix_axes=(-2, -1))
                                  for n, w in ms.items()})(mats))


def circuit_measures(params, cfg) -> dict:
  """Spectra, symmetry and definiteness of `W_QK^h`; spectra of `W_OV^h`; head redundancy."""

  @jax.jit
  def measure(c):
    qk, ov = c["qk"], c["ov"]
    qk_dense = qk.dense()
    sym_eigs = analysis.symmetric_eigenvalues(qk_dense)
    tol = 1e-6 * jnp.abs(sym_eigs).max(-1, keepdims=True)
    return {
        "qk_sv": analysis.factored_singular_values(qk.left, qk.right),
        "ov_sv": analysis.factored_singular_values(ov.left, ov.right),
        "qk_symmetry": analysis.symmetry_score(qk_dense),
        # Among the non-zero eigenvalues (the symmetric part has rank <= 2 dh).
        "qk_sym_negative_share": jnp.sum(sym_eigs < -tol, -1)
        / jnp.maximum(jnp.sum(jnp.abs(sym_eigs) > tol, -1), 1),
        "q_head_redundancy": analysis.head_redundancy(qk.left),
        "ov_head_redundancy": analysis.head_redundancy(ov.right),
    }

  c = jax.tree.map(lambda a: a.astype(jnp.float32), analysis.circuits(params, cfg))
  return {**_np(measure(c)), "chance_overlap": cfg.d_head / cfg.d_model}


def jacobian_measures(params, cfg, x_TD, acfg: AtlasConfig) -> dict:
  """Depth profile (matrix-free) and the dense cross-check on layer 0 when it fits."""
  blocks = param_tree(params)["blocks"]
  profile = functools.partial(analysis.depth_profile, cfg, k=acfg.k,
                              krylov_dim=acfg.krylov_dim, key=jax.random.key(acfg.seed))
  prof = jax.jit(profile)(blocks, x_TD)
  out = _np(prof)
  f0 = functools.partial(transformer.block_fn(cfg), transformer.layer(param_tree(params),
                                                                      0))
  need = analysis.jacobian_bytes(f0, x_TD)
  out["dense_bytes"] = need
  if need <= acfg.dense_max_bytes:
    J = np.asarray(analysis.jacobian(f0, x_TD, max_bytes=acfg.dense_max_bytes), np.float64)
    s = np.linalg.svd(J, compute_uv=False)
    out["dense_sv_layer0"] = s[: acfg.k]
    out["lanczos_vs_dense_rel_err"] = float(np.max(np.abs(out["layer_sv"][0] - s[: acfg.k]))
                                            / s[0])
    out["dense_condition_number_layer0"] = float(s[0] / s[-1])
    lam = np.linalg.eigvals(J)
    out["dense_spectral_radius_layer0"] = float(np.abs(lam).max())
    out["dense_dist_from_one_layer0"] = float(np.abs(lam - 1).max())
  return out


def causality_measures(params, cfg, x_TD, weights) -> dict:
  """Token dependency of the whole stack, its triangularity, and causal-attention rank."""
  blocks = param_tree(params)["blocks"]
  g = functools.partial(analysis.stack_fn(cfg), blocks)
  D = jax.jit(analysis.token_dependency, static_argnums=0)(g, x_TD)
  out = {"token_dependency": np.asarray(D), "leak": float(analysis.causal_leak(D)),
         "block_lower_triangular": bool(analysis.is_block_lower_triangular(D))}
  A = np.asarray(weights[:, 0], np.float64)  # (L, H, T, T), batch element 0
  cert = analysis.rank_certificate(A)
  out["attention_rank_float32"] = np.asarray(
      analysis.spectrum(jnp.asarray(A, jnp.float32), matrix_axes=(-2, -1))["numerical_rank"])
  out["attention_rank_float64"] = cert["rank"]
  out["attention_condition_number"] = cert["condition_number"]
  if cfg.causal:
    cert = analysis.causal_logdet(A)
    out.update(attention_logdet=cert["logdet"], attention_min_diag=cert["min_diag"],
               attention_full_rank=cert["full_rank"])
  return out


def attention_measures(inter, cfg, acfg: AtlasConfig) -> dict:
  """Definiteness of the softmax kernel; decomposition, sparsity of attention and caches."""
  attn = inter["blocks"]["attn"]
  q, k, v, w = (attn[n][0][:, 0:1] for n in ("q", "k", "v", "weights"))  # batch element 0
  kv_rep = lambda t: jnp.repeat(t, cfg.kv_groups, axis=-2)
  kern = jax.vmap(functools.partial(analysis.softmax_kernel, scale=cfg.d_head**-0.5))(
      q, kv_rep(k))[:, 0]
  kcert = analysis.psd_certificate(kern)
  acert = analysis.psd_certificate(w[:, 0])
  T = w.shape[-1]
  ffn_hidden = inter["blocks"]["ffn"]["ffn_hidden"][0]
  return _np({
      "kernel_is_symmetric": kcert["is_symmetric"], "kernel_is_psd": kcert["is_psd"],
      "kernel_min_eig": kcert["min_eigenvalue"], "kernel_asymmetry": kcert["asymmetry"],
      "attention_is_psd": acert["is_psd"], "attention_min_eig": acert["min_eigenvalue"],
      "attention_rank90": analysis.rank_for_energy(w[:, 0], acfg.energy),
      "k_cache_rank90": analysis.cache_rank(k, acfg.energy)[:, 0],
      "v_cache_rank90": analysis.cache_rank(v, acfg.energy)[:, 0],
      "entropy": analysis.attention_entropy(w[:, 0]),
      "uniform_entropy": jnp.mean(jnp.log(jnp.arange(1, T + 1))) if cfg.causal else jnp.log(T),
      "top4_mass": analysis.top_k_mass(w[:, 0], min(4, T)),
      "local8_mass": analysis.local_mass(w[:, 0], 8),
      "ffn_activation_sparsity": analysis.activation_sparsity(ffn_hidden).mean((-2, -1)),
  })


def weight_structure(params, energy: float) -> dict:
  """Rank for `energy` and orthogonality error of every stacked weight, per layer."""

  @jax.jit
  def measure(ws):
    return {n: {"rank_for_energy": analysis.rank_for_energy(w, energy),
                "orthogonality_error": analysis.orthogonality_error(w)} for n, w in ws.items()}

  return _np(measure(_stacked_weights(params)))


def run(acfg: AtlasConfig) -> tuple[dict, str]:
  """Load, measure, render. Returns `(results, run_dir)`."""
  cfg, params, source = load_model(acfg)
  T = acfg.seq_len
  if not 1 <= T <= cfg.max_len:
    raise ValueError(f"--seq-len {T} must lie in [1, max_len={cfg.max_len}] of the model. Fix: "
                     f"pass --seq-len {cfg.max_len} or less.")
  run_id = acfg.run_id or time.strftime("%Y%m%d-%H%M%S")
  run_dir = os.path.join(acfg.out, "atlas", run_id)
  os.makedirs(run_dir, exist_ok=True)
  tokens_1T = jnp.asarray(sample_text(T) % cfg.vocab_size)[None]
  results = {"source": source, "seq_len": T, "model": cfg.to_dict()}
  apply = jax.jit(functools.partial(transformer.Transformer(cfg).apply,
                                    mutable=["intermediates"]))
  _, state = apply({"params": param_tree(params)}, tokens_1T)
  inter = state["intermediates"]
  x_TD = inter["blocks"]["resid_pre"][0][0, 0].astype(jnp.float32)  # stream entering layer 0
  weights = np.asarray(inter["blocks"]["attn"]["weights"][0])
  stages = {
      "weights": lambda: weight_spectra(params, cfg),
      "circuits": lambda: circuit_measures(params, cfg),
      "jacobian": lambda: jacobian_measures(params, cfg, x_TD, acfg),
      "causality": lambda: causality_measures(params, cfg, x_TD, weights),
      "attention": lambda: attention_measures(inter, cfg, acfg),
      "structure": lambda: weight_structure(params, acfg.energy),
  }
  with console.progress(len(stages) + 1, desc="atlas", unit="stage") as bar:
    for name, fn in stages.items():
      bar.set_postfix_str(name)
      results[name] = fn()
      bar.update()
    bar.set_postfix_str("report")
    report.write_report(results, run_dir)
    bar.update()
  jsonio.dump_strict({"atlas": dataclasses.asdict(acfg), "model": cfg.to_dict()},
                     os.path.join(run_dir, "config.json"))
  jsonio.dump_strict(results, os.path.join(run_dir, "results.json"), indent=None)
  return results, run_dir


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
  """Keeps the module docstring's layout and shows every option's default (once; not `None`)."""

  def _get_help_string(self, action):
    if action.default is None:
      return action.help
    return super()._get_help_string(action)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments atlas", description=__doc__,
                                   formatter_class=_HelpFormatter)
  defaults = AtlasConfig()
  parser.add_argument("--model", default=defaults.model, choices=sorted(transformer.PRESETS),
                      help="preset to analyse at random init")
  parser.add_argument("--checkpoint", default=None, metavar="RUN_DIR",
                      help="a training run folder (python -m experiments train)")
  parser.add_argument("--step", type=int, default=None,
                      help="checkpoint step of --checkpoint (default: the latest intact one)")
  parser.add_argument("--hf", default=None, metavar="PATH",
                      help="a GPT-2 or Llama Hugging Face folder (config.json + *.safetensors)")
  parser.add_argument("--seed", type=int, default=defaults.seed, help="init and Lanczos seed")
  parser.add_argument("--seq-len", type=int, default=defaults.seq_len,
                      help="tokens of input text T")
  parser.add_argument("--k", type=int, default=defaults.k,
                      help="singular values / eigenvalues per Jacobian")
  parser.add_argument("--krylov-dim", type=int, default=None,
                      help="cap on the Lanczos / Arnoldi Krylov dimension (default: grow until "
                           "converged)")
  parser.add_argument("--energy", type=float, default=defaults.energy,
                      help="energy fraction for the decomposition ranks")
  parser.add_argument("--out", default=defaults.out, help="root folder of the runs")
  parser.add_argument("--run-id", default=None, help="sub-folder name (default: a timestamp)")
  args = parser.parse_args(argv)
  if args.checkpoint and args.hf:
    parser.error("pass at most one of --checkpoint and --hf")
  if args.step is not None and not args.checkpoint:
    parser.error("--step needs --checkpoint")
  acfg = AtlasConfig(model=args.model, checkpoint=args.checkpoint, step=args.step, hf=args.hf,
                     seed=args.seed, seq_len=args.seq_len, k=args.k, krylov_dim=args.krylov_dim,
                     energy=args.energy, out=args.out, run_id=args.run_id)
  try:
    _, run_dir = run(acfg)
  except (ValueError, FileNotFoundError, MemoryError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"atlas written to {os.path.join(run_dir, 'report.md')}")
  return 0
