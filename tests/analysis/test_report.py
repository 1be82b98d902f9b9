"""Rendering helpers: JSON conversion, markdown tables, figures."""

import json

import numpy as np

from analysis import report


def test_to_json_converts_arrays_and_scalars():
  tree = {"a": np.arange(3), "b": {"c": np.float32(1.5), "d": (np.int64(2), 3)}, 4: "x"}
  out = report.to_json(tree)
  assert out == {"a": [0, 1, 2], "b": {"c": 1.5, "d": [2, 3]}, "4": "x"}
  json.dumps(out)


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
