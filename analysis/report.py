"""The atlas report: markdown tables and PNG figures from the measured results.

The only rendering code of `analysis`. `write_report(results, run_dir)` takes the dict that
`experiments.commands.atlas.run` measures (arrays and numbers, grouped by topic) and writes
`report.md` plus one PNG per figure (experiments.jsonio writes the dict as strict JSON).
Matplotlib runs with the non-interactive Agg backend.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _fmt(x) -> str:
  x = float(x)
  if not np.isfinite(x):
    return str(x)
  return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}"


def _row(cells) -> str:
  return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _table(header, rows) -> list[str]:
  return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def _per_layer(values) -> str:
  return ", ".join(_fmt(v) for v in np.ravel(values))


def _save(fig, run_dir: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(run_dir, name), dpi=110)
  plt.close(fig)
  return name


def plot_spectra(weights: dict, run_dir: str) -> str:
  """Singular values of each stacked weight, one line per layer, with the MP edge."""
  names = [n for n in weights if n.startswith("blocks/")]
  cols = min(4, len(names))
  rows = -(-len(names) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
  for ax, name in zip(axes.flat, names, strict=False):
    spec = weights[name]
    for l, s in enumerate(spec["singular_values"]):
      line, = ax.semilogy(s, label=f"layer {l}")
      ax.axhline(spec["mp_edge"][l], color=line.get_color(), ls="--", lw=0.8)
    ax.set_title(name.rsplit("/", 1)[-1], fontsize=9)
    ax.set_xlabel("index i")
  axes.flat[0].set_ylabel("σ_i  (dashed: MP edge)")
  axes.flat[0].legend(fontsize=7)
  for ax in list(axes.flat)[len(names):]:
    ax.axis("off")
  return _save(fig, run_dir, "spectra.png")


def plot_depth(weights: dict, run_dir: str) -> str:
  """Condition number and stable rank of each stacked weight across depth."""
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
  for name, spec in weights.items():
    if name.startswith("blocks/"):
      label = name.rsplit("/", 1)[-1]
      ax1.semilogy(spec["condition_number"], marker="o", label=label)
      ax2.plot(spec["stable_rank"], marker="o", label=label)
  ax1.set(xlabel="layer", ylabel="κ = σ_max/σ_min", title="condition number")
  ax2.set(xlabel="layer", ylabel="‖W‖_F²/‖W‖₂²", title="stable rank")
  ax2.legend(fontsize=7)
  return _save(fig, run_dir, "depth.png")


def plot_jacobian(jac: dict, run_dir: str) -> str:
  """Top singular values of each layer's Jacobian and of the end-to-end Jacobian."""
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
  for l, s in enumerate(jac["layer_sv"]):
    ax1.plot(s, marker="o", label=f"J_{l}")
  ax1.plot(jac["end_to_end_sv"], marker="s", color="k", label="end to end")
  if "dense_sv_layer0" in jac:
    ax1.plot(jac["dense_sv_layer0"], ls="none", marker="x", color="r", label="dense J_0")
  ax1.axhline(1.0, color="grey", lw=0.8)
  ax1.set(xlabel="index i", ylabel="σ_i", title="Jacobian singular values (Lanczos)")
  ax1.legend(fontsize=7)
  L = len(jac["spectral_radius"])
  ax2.bar(np.arange(L) - 0.2, jac["spectral_radius"], 0.4, label="max |λ|")
  ax2.bar(np.arange(L) + 0.2, jac["dist_from_one"], 0.4, label="max |λ − 1|")
  ax2.set(xlabel="layer", title="layer Jacobian eigenvalues (Arnoldi)", xticks=np.arange(L))
  ax2.legend(fontsize=7)
  return _save(fig, run_dir, "jacobian.png")


def plot_token_dependency(D, run_dir: str) -> str:
  """Heatmap of `log10 ‖∂y_i/∂x_j‖_F` (white: exactly zero)."""
  D = np.asarray(D, np.float64)
  with np.errstate(divide="ignore"):
    logD = np.where(D > 0, np.log10(np.where(D > 0, D, 1)), np.nan)
  fig, ax = plt.subplots(figsize=(4.2, 3.6))
  im = ax.imshow(logD, cmap="viridis")
  fig.colorbar(im, ax=ax, label="log10 ‖∂y_i/∂x_j‖_F")
  ax.set(xlabel="input token j", ylabel="output token i", title="token dependency")
  return _save(fig, run_dir, "token_dependency.png")


def plot_entropy(attn: dict, run_dir: str) -> str:
  """Mean attention entropy per layer and head, against uniform attention."""
  E = np.asarray(attn["entropy"])
  fig, ax = plt.subplots(figsize=(4.2, 3.2))
  im = ax.imshow(E, cmap="magma", aspect="auto")
  fig.colorbar(im, ax=ax, label="nats")
  ax.set(xlabel="head", ylabel="layer",
         title=f"attention entropy (uniform: {float(attn['uniform_entropy']):.2f})")
  return _save(fig, run_dir, "attention_entropy.png")


def _spectra_section(weights: dict) -> list[str]:
  rows = []
  for name, s in weights.items():
    rows.append([f"`{name}`", _per_layer(s["condition_number"]), _per_layer(s["stable_rank"]),
                 _per_layer(s["effective_rank"]), _per_layer(s["numerical_rank"]),
                 _per_layer(s["alpha"]), _per_layer(s["n_outliers"])])
  header = ["matrix", "κ", "stable rank", "effective rank", "numerical rank", "α (Hill)",
            "σ > MP edge"]
  return ["## Spectra of the weights", "",
          "One value per layer (comma-separated). Numerical rank at `max(m,n)·eps·σ_1`; α is "
          "the Hill estimator of the power-law exponent of the eigenvalue density of `WᵀW` "
          "(top half); the Marchenko–Pastur edge uses the fitted noise scale "
          "`‖W‖_F²/(mn)`.", "", *_table(header, rows),
          "![spectra](spectra.png)", "", "![depth](depth.png)", ""]


def _circuit_section(c: dict) -> list[str]:
  L = c["qk_symmetry"].shape[0]
  rows = [[l, _per_layer(c["qk_sv"][l].max(-1)), _per_layer(c["ov_sv"][l].max(-1)),
           _per_layer(c["qk_symmetry"][l]), _per_layer(c["qk_sym_negative_share"][l]),
           _fmt(c["q_head_redundancy"][l]), _fmt(c["ov_head_redundancy"][l])] for l in range(L)]
  header = ["layer", "‖W_QK^h‖₂ per head", "‖W_OV^h‖₂ per head", "W_QK symmetry",
            "W_QK sym. part: share of λ<0", "W_Q head redundancy", "W_O head redundancy"]
  return ["## Head circuits: definiteness and orthogonality", "",
          f"Symmetry score 1 = symmetric, 0 = no preference. Head redundancy is the largest "
          f"mean cos² of principal angles between two heads' subspaces (chance ≈ "
          f"{_fmt(c['chance_overlap'])}, identical = 1).", "", *_table(header, rows)]


def _flags(j: dict, name: str):
  """The `*_converged` flags of `j[name]` (all true when the results predate the flags)."""
  return np.broadcast_to(np.asarray(j.get(f"{name}_converged", True), bool),
                         np.shape(j[name]))


def _marked(value, converged) -> str:
  """`_fmt(value)`, with a `*` when the value did not converge (see the section's footnote)."""
  return _fmt(value) + ("" if bool(converged) else "\\*")


def _jacobian_section(j: dict) -> list[str]:
  sv_ok, rho_ok = _flags(j, "layer_sv"), _flags(j, "spectral_radius")
  dist_ok, e2e_ok = _flags(j, "dist_from_one"), _flags(j, "end_to_end_sv")
  rows = [[l, _marked(j["layer_sv"][l][0], sv_ok[l][0]),
           _marked(j["spectral_radius"][l], rho_ok[l]),
           _marked(j["dist_from_one"][l], dist_ok[l])] for l in range(len(j["spectral_radius"]))]
  e2e = ", ".join(_marked(v, ok) for v, ok in zip(np.ravel(j["end_to_end_sv"]),
                                                   np.ravel(e2e_ok), strict=True))
  lines = ["## Jacobians: eigenvalues near 1, conditioning, gradient flow", "",
           *_table(["layer", "top σ(J_l)", "max |λ(J_l)|", "max |λ(J_l) − 1|"], rows),
           f"End-to-end Jacobian (all layers, matrix-free) top singular values: {e2e}.", ""]
  if not all(np.all(f) for f in (sv_ok, rho_ok, dist_ok, e2e_ok)):
    lines += ["\\* Not converged: the Krylov space reached its cap before the value's error "
              "bound met the tolerance. The value is reported with its bound (`*_bound` in "
              "`results.json`); raise the atlas's Krylov dimension to resolve it.", ""]
  if "dense_sv_layer0" in j:
    lines += [f"Dense cross-check on layer 0 ({j['dense_bytes'] / 2**20:.1f} MiB): "
              f"Lanczos vs dense SVD max relative error "
              f"{_fmt(j['lanczos_vs_dense_rel_err'])}; dense max |λ| "
              f"{_fmt(j['dense_spectral_radius_layer0'])}, max |λ − 1| "
              f"{_fmt(j['dense_dist_from_one_layer0'])}, κ(J_0) "
              f"{_fmt(j['dense_condition_number_layer0'])}.", ""]
  else:
    lines += [f"Dense cross-check skipped: J_0 would need {j['dense_bytes'] / 2**20:.0f} MiB.",
              ""]
  return lines + ["![jacobian](jacobian.png)", ""]


def _causality_section(c: dict) -> list[str]:
  lines = ["## Full rank and causality", "",
           f"Token dependency of the whole stack is block lower-triangular: "
           f"**{c['block_lower_triangular']}** (largest block above the diagonal, relative: "
           f"{_fmt(c['leak'])}).", ""]
  rank32, rank64 = np.asarray(c["attention_rank_float32"]), np.asarray(c["attention_rank_float64"])
  T = np.asarray(c["token_dependency"]).shape[0]
  lines.append(f"Attention matrices (T={T}): numerical rank by float32 SVD min "
               f"{rank32.min()}, by float64 SVD min {rank64.min()}; condition number up to "
               f"{_fmt(np.max(c['attention_condition_number']))}.")
  if "attention_full_rank" in c:
    lines.append(f" Certified from the diagonal (causal, so `det A = Π A_ii`): full rank in "
                 f"{int(np.sum(c['attention_full_rank']))}/{np.size(c['attention_full_rank'])} "
                 f"heads, min diagonal {_fmt(np.min(c['attention_min_diag']))}, log|det| from "
                 f"{_fmt(np.min(c['attention_logdet']))} to {_fmt(np.max(c['attention_logdet']))}.")
  return lines + ["", "![token dependency](token_dependency.png)", ""]


def _attention_section(a: dict) -> list[str]:
  n = np.size(a["kernel_is_psd"])
  rows = [[l, _per_layer(a["entropy"][l]), _per_layer(a["top4_mass"][l]),
           _per_layer(a["local8_mass"][l]), _per_layer(a["attention_rank90"][l]),
           _per_layer(a["k_cache_rank90"][l]), _per_layer(a["v_cache_rank90"][l]),
           _fmt(a["ffn_activation_sparsity"][l])] for l in range(len(a["entropy"]))]
  header = ["layer", "entropy per head", "top-4 mass", "local-8 mass", "rank 90% of A",
            "rank 90% of K", "rank 90% of V", "FFN near-zero frac."]
  return ["## Positive definiteness of attention (measured, not assumed)", "",
          f"Softmax kernel `exp(q_i·k_j/√dh)` per head: symmetric in "
          f"{int(np.sum(a['kernel_is_symmetric']))}/{n} heads, symmetric part PSD in "
          f"{int(np.sum(a['kernel_is_psd']))}/{n} (min eigenvalue "
          f"{_fmt(np.min(a['kernel_min_eig']))}, asymmetry ‖M−Mᵀ‖/‖M‖ up to "
          f"{_fmt(np.max(a['kernel_asymmetry']))}). Attention matrix `A`: symmetric part PSD "
          f"in {int(np.sum(a['attention_is_psd']))}/{n} heads (min eigenvalue "
          f"{_fmt(np.min(a['attention_min_eig']))}). A kernel Gram matrix must be symmetric "
          f"and PSD.", "",
          "## Decomposition and sparsity of attention", "", *_table(header, rows),
          "![attention entropy](attention_entropy.png)", ""]


def _structure_section(s: dict) -> list[str]:
  rows = [[f"`{name}`", _per_layer(v["rank_for_energy"]), _per_layer(v["orthogonality_error"])]
          for name, v in s.items()]
  return ["## Decomposition and orthogonality of the weights", "",
          *_table(["matrix", "rank for 90% energy", "‖G/c − I‖_F/√r"], rows)]


def write_report(results: dict, run_dir: str) -> str:
  """Write `report.md` and its figures into `run_dir`; returns the report's path."""
  os.makedirs(run_dir, exist_ok=True)
  plot_spectra(results["weights"], run_dir)
  plot_depth(results["weights"], run_dir)
  plot_jacobian(results["jacobian"], run_dir)
  plot_token_dependency(results["causality"]["token_dependency"], run_dir)
  plot_entropy(results["attention"], run_dir)
  m = results["model"]
  lines = ["# Matrix atlas", "",
           f"Model: {results['source']}; L={m['n_layers']}, d={m['d_model']}, "
           f"H={m['n_heads']}, Hkv={m['n_kv_heads']}, dh={m['d_head']}, d_ff={m['d_ff']}, "
           f"norm={m['norm']}, activation={m['activation']}, causal={m['causal']}. "
           f"Input: {results['seq_len']} tokens of real text.", "",
           *_spectra_section(results["weights"]), *_circuit_section(results["circuits"]),
           *_jacobian_section(results["jacobian"]), *_causality_section(results["causality"]),
           *_attention_section(results["attention"]), *_structure_section(results["structure"])]
  path = os.path.join(run_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path
