"""Rendering helpers: markdown tables, figures."""


import numpy as np

from analysis import report


def test_table_escapes_pipes_and_aligns_columns():
  lines = report._table(["x", "max |λ|"], [[1, 2.0]])
  assert lines[0] == "| x | max \\|λ\\| |" and lines[1] == "| --- | --- |"
  assert lines[2] == "| 1 | 2.0 |"
  assert report._per_layer(np.array([1.23456, 12345.0])) == "1.23, 1.23e+04"


def test_figures_are_written(tmp_path):
  D = np.tril(np.random.default_rng(0).uniform(size=(6, 6)))
  assert report.plot_token_dependency(D, str(tmp_path)) == "token_dependency.png"
  weights = {"blocks/attn/w_q": {"singular_values": np.array([[3.0, 2.0], [2.5, 1.0]]),
                                 "mp_edge": np.array([2.0, 2.0]),
                                 "condition_number": np.array([1.5, 2.5]),
                                 "stable_rank": np.array([1.4, 1.2])}}
  report.plot_spectra(weights, str(tmp_path))
  report.plot_depth(weights, str(tmp_path))
  for name in ("token_dependency.png", "spectra.png", "depth.png"):
    assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def _jac(converged: bool):
  j = {"layer_sv": np.array([[1.04, 1.03], [1.05, 1.02]]), "spectral_radius": np.array([1.02, 1.1]),
       "dist_from_one": np.array([0.02, 0.03]), "end_to_end_sv": np.array([1.09, 1.07]),
       "dense_bytes": 2**30}
  for name in ("layer_sv", "spectral_radius", "dist_from_one", "end_to_end_sv"):
    j[f"{name}_converged"] = np.ones(np.shape(j[name]), bool)
  j["dist_from_one_converged"] = np.array([True, converged])
  j["end_to_end_sv_converged"] = np.array([True, converged])
  return j


def test_jacobian_section_marks_unconverged_values():
  text = "\n".join(report._jacobian_section(_jac(converged=False)))
  assert "| 1 | 1.05 | 1.1 | 0.03\\* |" in text
  assert "1.09, 1.07\\*." in text and "\\* Not converged" in text
  clean = "\n".join(report._jacobian_section(_jac(converged=True)))
  assert "\\*" not in clean and "| 1 | 1.05 | 1.1 | 0.03 |" in clean
