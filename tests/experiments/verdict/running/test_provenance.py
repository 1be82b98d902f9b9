"""What a new `results.json` records of its data and interpreter: `corpus_sha256`, `split`,
`env.python`; required in a new run, optional in results kept before them."""

import glob
import os
import platform

import pytest

from experiments import jsonio
from experiments.data import pinned
from experiments.verdict import Claim, Threshold
from experiments.verdict.running import folders, runner, schema
from tests.experiments.verdict.toy_claims import ScaleSizes, valid_results

GAIN = Threshold("gain", "treated", "score", baseline="control", supports="> 0.2")


def _claim(split=None):
  def run(spec):
    runs = {"treated": {s: {"score": 1.0 + 0.1 * s} for s in spec.seeds},
            "control": {s: {"score": 0.5} for s in spec.seeds}}
    return {"runs": runs, **({"split": split} if split else {})}

  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               thresholds=(GAIN,), run=run, seeds=(0, 1, 2), trains=False,
               QUICK=ScaleSizes("mini"), FULL=ScaleSizes("small"))


@pytest.mark.parametrize("split, expected", [(None, "val"), ("test", "test")])
def test_a_new_run_records_the_corpus_the_split_and_python(tmp_path, split, expected):
  _, run_dir = runner.run_claim(_claim(split), root=str(tmp_path), log=lambda s: 0)
  on_disk = jsonio.load_strict(os.path.join(run_dir, "results.json"))
  assert on_disk["corpus_sha256"] == pinned.SHA256[pinned.STDLIB_ARCHIVE]
  assert on_disk["corpus_sha256"] == pinned.sha256_of(pinned.STDLIB_ARCHIVE)
  assert on_disk["split"] == expected
  assert on_disk["env"]["python"] == platform.python_version()
  schema.validate_results(on_disk, ["toy"], new=True)


def test_a_new_run_must_record_them_and_a_kept_one_need_not():
  new = {**valid_results(), "corpus_sha256": folders.corpus_sha256(), "split": "test",
         "env": folders.environment()}
  schema.validate_results(new, new=True)
  schema.validate_results(valid_results())  # kept before the fields existed
  for key in ("corpus_sha256", "split"):
    with pytest.raises(ValueError, match=rf"a new run must record \['{key}'\]"):
      schema.validate_results({k: v for k, v in new.items() if k != key}, new=True)
  with pytest.raises(ValueError, match=r"a new run must record \['env.python'\]"):
    schema.validate_results({**new, "env": {**new["env"], "python": None}}, new=True)
  with pytest.raises(ValueError, match="split: must be one of"):
    schema.validate_results({**new, "split": "holdout"})
  with pytest.raises(ValueError, match="corpus_sha256: must be a hex SHA-256"):
    schema.validate_results({**new, "corpus_sha256": "abc"})


def test_every_kept_result_still_validates():
  kept = glob.glob(os.path.join(folders.RESULTS_DIR, "*", "results.json"))
  assert len(kept) >= 14
  for path in kept:
    schema.load_results(os.path.dirname(path))
