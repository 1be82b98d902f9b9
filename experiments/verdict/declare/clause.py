"""`Clause`: one clause of the preface's sentence and the primary thresholds that decide it.

A sentence such as "the causal mask lets GPT see the past but not the future, and keeps every
attention matrix invertible" makes several assertions; a verdict on the whole sentence read
from one of them answers a narrower question. A claim that declares `clauses` splits its
primary thresholds among them: each clause is decided by the verdict rule on its own
thresholds (and the controls they need), and the headline is their conjunction (`conjunction`).

A clause settled by mathematics carries its `proof` (the argument in words); its thresholds
are then the exact verification of that argument (e.g. a float64 leak of exactly 0), and it
reads "supported (proof, verified exactly)" or "refuted (proof)". What could come out either way
beside a proof belongs in a clause of its own or an extension.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from experiments.verdict.arithmetic.rule import conjunction, settled_label

__all__ = ["Clause", "check_clauses", "conjunction", "settled_label"]


@dataclasses.dataclass(frozen=True)
class Clause:
  """One clause of the preface's sentence.

  Attributes:
    text: the clause, quoted or closely paraphrased from the preface.
    thresholds: the names of the primary (non-control) thresholds that decide it.
    proof: where mathematics settles the clause, the argument in words (its thresholds verify
      it exactly, in float64); None where the clause could come out either way.
  """

  text: str
  thresholds: tuple[str, ...]
  proof: str | None = None

  def __post_init__(self):
    object.__setattr__(self, "thresholds", tuple(self.thresholds))
    if not self.text.strip():
      raise ValueError("Clause.text is empty. Fix: quote the clause of the preface it tests.")
    if not self.thresholds:
      raise ValueError(f"Clause {self.text!r} names no threshold. Fix: name the primary "
                       "thresholds that decide it (Clause(text, thresholds=('name', ...))).")

  def to_dict(self) -> dict:
    return {"text": self.text, "thresholds": list(self.thresholds), "proof": self.proof}

  @classmethod
  def from_dict(cls, d: dict) -> Clause:
    return cls(d["text"], tuple(d["thresholds"]), d.get("proof"))


def check_clauses(claim_id: str, clauses: Sequence[Clause], thresholds) -> None:
  """Each primary threshold decides exactly one clause, and each clause names only primaries.

  Example:
    >>> from experiments.verdict.declare.thresholds import Threshold
    >>> a = Threshold.beyond("a", "x", "m", margin=0.1)
    >>> try:
    ...   check_clauses("toy", [Clause("one", ("a",)), Clause("two", ("b",))], [a])
    ... except ValueError as e:
    ...   print(str(e).split(". Fix")[0])
    Claim 'toy': clause 'two' names ['b'], which are not primary thresholds
  """
  if not clauses:
    return
  primary = [th.name for th in thresholds if not th.control]
  seen: dict[str, str] = {}
  for clause in clauses:
    unknown = [n for n in clause.thresholds if n not in primary]
    if unknown:
      raise ValueError(f"Claim {claim_id!r}: clause {clause.text!r} names {unknown}, which are "
                       f"not primary thresholds. Fix: name one of {primary}.")
    for name in clause.thresholds:
      if name in seen:
        raise ValueError(f"Claim {claim_id!r}: threshold {name!r} decides two clauses "
                         f"({seen[name]!r} and {clause.text!r}). Fix: give it to one.")
      seen[name] = clause.text
  missing = [n for n in primary if n not in seen]
  if missing:
    raise ValueError(f"Claim {claim_id!r}: primary thresholds {missing} decide no clause. Fix: "
                     "name each in the clause it decides, or make it an extension.")
  texts = [c.text for c in clauses]
  if len(set(texts)) != len(texts):
    raise ValueError(f"Claim {claim_id!r}: clause texts repeat. Fix: state each clause once.")
