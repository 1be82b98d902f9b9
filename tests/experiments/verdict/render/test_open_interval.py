"""An axis point whose interval is open at one end (a censored median's infinite bound, stored
as null in strict JSON) is tested, written and drawn as open, not as missing.

condition-lr's budget axis at 4x on pico-20 (2026-12-07) gave steps-to-target 1.333 N with 95%
interval [1.169, ∞): two of six seeds never reached AdamW's loss by the 1.5 N cap. Its report
crashed on the null upper end (`holds` took it for a number).
"""

import math
import os

from experiments.claims import CLAIMS
from experiments.verdict.arithmetic import rule
from experiments.verdict.arithmetic.stats import interval_text, open_interval
from experiments.verdict.render import figures, section

CLAIM = CLAIMS["condition-lr"]
BLOCK = {"model": "pico-20",
         "rows": [{"multiple": 1, "train_tokens": 327680, "tokens_per_param": 22.16,
                   "effect": 0.9401, "ci": [0.6799, 1.2484], "verdict": "inconclusive",
                   "failed_controls": []},
                  {"multiple": 4, "train_tokens": 1310720, "tokens_per_param": 88.66,
                   "effect": 1.3331, "ci": [1.16875, None], "verdict": "refuted",
                   "failed_controls": [],
                   "excluded": "censored: a seed's condition.steps_frac >= 1.5"}],
         "slope": None, "slope_ci": [None, None], "dof": 0, "trend": "not measured",
         "points": 1, "excluded": [[4, "censored: a seed's condition.steps_frac >= 1.5"]]}


def test_a_null_end_is_open_and_a_null_pair_is_one_seed():
  assert open_interval([1.16875, None]) == (1.16875, math.inf)
  assert open_interval([None, -0.5]) == (-math.inf, -0.5)
  assert open_interval([None, None]) is None
  assert interval_text(None, -0.5) == "(−∞, -0.5]"


def test_the_threshold_reads_an_open_upper_end_as_above_every_value():
  th = CLAIM.primary  # steps to AdamW's loss / N: supported below 0.95, refuted at 0.95 or more
  outcome, why = rule.size_test(th, BLOCK["rows"][1])
  assert outcome == "refuted" and "[1.169, ∞)" in why
  # The same point with a finite upper end far above reads the same; one below the margin
  # cannot be refuted, open or not.
  assert rule.size_test(th, {**BLOCK["rows"][1], "ci": [1.16875, 9.0]})[0] == "refuted"
  assert rule.size_test(th, {**BLOCK["rows"][1], "ci": [0.5, None]})[0] == "inconclusive"


def test_the_report_section_and_the_figure_show_the_open_end(tmp_path):
  axis = CLAIM.axis("budget")
  results = {"axes": {"budget": BLOCK}, "config": {"sizes": CLAIM.FULL.to_dict()}}
  text = "\n".join(section.axis_markdown(axis, CLAIM, results, BLOCK, "##"))
  assert "| 1.333 | [1.169, ∞) | refuted: its 95% interval [1.169, ∞) meets" in text
  assert "4× (88.66): 1.333 [1.169, ∞)" in axis.cell(BLOCK)
  name = figures.axis_figure(axis, CLAIM, BLOCK, str(tmp_path), CLAIM.FULL)
  assert os.path.getsize(tmp_path / name) > 0
