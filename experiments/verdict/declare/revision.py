"""Why a claim was registered again: `Revision`, one per version after the first.

A new registration either fixes a defect (then it names the test that fails on the old code)
or changes the protocol (steps, model, metric, margin, grid, rule...). Versions registered
before this record existed keep their one-line strings (`"v2: <why>"`); a version registered
after it is a `Revision`, and `--keep` refuses a new version without one
(`experiments.verdict.running.history.check_fresh`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

REVISION_KINDS = ("defect", "protocol")


@dataclasses.dataclass(frozen=True)
class Revision:
  """The registration of `version` and why it was made.

  Attributes:
    version: the version it registers (2 or more).
    kind: `defect` (the old code was wrong) or `protocol` (the question or its reading changed).
    why: what changed and why, written before the run.
    test: for a defect, the test that fails on the old code (`path.py::test_name`).

  Example:
    >>> from experiments.verdict.declare.revision import Revision
    >>> print(Revision(4, "protocol", "read on seeds 10-14, verdict on the test split"))
    v4 (protocol): read on seeds 10-14, verdict on the test split
  """

  version: int
  kind: Literal["defect", "protocol"]
  why: str
  test: str | None = None

  def __post_init__(self):
    where = f"Revision(version={self.version!r})"
    if not (isinstance(self.version, int) and self.version >= 2):
      raise ValueError(f"{where}: version must be an integer >= 2 (version 1 is the first "
                       "registration, which revises nothing). Fix: give the version it registers.")
    if self.kind not in REVISION_KINDS:
      raise ValueError(f"{where}: kind={self.kind!r} is unknown. Fix: 'defect' (a bug fixed; "
                       "name the test that fails on the old code) or 'protocol' (a change).")
    if not (isinstance(self.why, str) and self.why.strip()):
      raise ValueError(f"{where}: why is empty. Fix: say what changed and why.")
    if self.kind == "defect" and not self.test:
      raise ValueError(f"{where}: kind='defect' needs test, the test that fails on the old "
                       "code. Fix: test='tests/experiments/claims/test_x.py::test_name'.")
    if self.test is not None and not re.fullmatch(r"tests/\S+\.py::\w+", self.test):
      raise ValueError(f"{where}: test={self.test!r} is not a test id. Fix: "
                       "'tests/<path>.py::<test function>'.")

  def __str__(self) -> str:
    fails = f"; fails on the old code: {self.test}" if self.test else ""
    return f"v{self.version} ({self.kind}{fails}): {self.why}"

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Revision:
    return cls(version=d["version"], kind=d["kind"], why=d["why"], test=d.get("test"))


def check_revisions(claim_id: str, version, revisions) -> None:
  """`revisions` has exactly `version − 1` entries, in order: `"vN: <why>"` strings (versions
  registered before `Revision`) or `Revision(N, ...)`; raises `ValueError` naming the fix."""
  ok = isinstance(version, int) and version >= 1 and len(revisions) == version - 1
  for i, r in enumerate(revisions if ok else ()):
    ok = ok and (r.version == i + 2 if isinstance(r, Revision)
                 else isinstance(r, str) and r.startswith(f"v{i + 2}: "))
  if not ok:
    raise ValueError(f"Claim {claim_id!r}: version={version!r} needs exactly "
                     f"{max(version - 1, 0) if isinstance(version, int) else '?'} revisions, "
                     f"one per version from 2, in order; got {[str(r) for r in revisions]}. Fix: "
                     "add Revision(version, 'defect' | 'protocol', why, test=...) for each new "
                     "registration, written before the run.")


def revision_from_json(r) -> str | Revision:
  """A revision as `claim.json` froze it: a legacy string, or a `Revision`'s dict."""
  return Revision.from_dict(r) if isinstance(r, dict) else r
