"""The house's rules, read from the source with `ast` (nothing is imported).

- no import cycle among the modules of `transformer`, `analysis`, `optim`, `experiments`;
- `transformer` imports no other package of ours; `analysis` and `optim` import only
  `transformer` (never each other, never `experiments`);
- inside `experiments`: `claims/` holds the claims and their registry only; no claim imports
  another claim, no claim imports a benchmark, no benchmark imports a claim, and nothing below
  the claims (`verdict`, `lab`, `train`, `models`, `data`) imports `experiments.claims`;
  the commands are leaves: nothing but `experiments.__main__` and other commands imports
  `experiments.commands`;
- no module is over `MAX_LINES` lines, and no claim module over `MAX_CLAIM_LINES`; no test
  file over `MAX_LINES` either;
- `tests/` mirrors the packages: every folder under `tests/` is a package folder of ours
  (`tests/experiments/verdict/` tests `experiments/verdict/`), and a test file directly in
  `tests/experiments/` names a top-level module of `experiments` (`test_jsonio.py`).

Every import counts, also those inside functions, and those of a docstring's example
(`>>> from ... import ...`): a deferred import is still a dependency, and so is a doctest's,
since `--doctest-modules` runs it.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("transformer", "analysis", "optim", "experiments")
BELOW_CLAIMS = ("experiments.verdict", "experiments.lab", "experiments.train", "experiments.data",
                "experiments.models", "experiments.model_store", "experiments.jsonio",
                "experiments.console")
MAX_LINES = 500  # STYLE.md: files of 100-400 lines, split by topic well before 1,000
MAX_CLAIM_LINES = 400  # a claim's measurements beyond its protocol go to experiments.lab
MAX_CLAIM_DOC = 40  # question, operationalisation, protocol; results and timings: results/


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
  """`{dotted module name: path}` of every `.py` file of `packages` (the four, or `("tests",)`)."""
  out = {}
  for pkg in packages:
    for folder, _, names in os.walk(os.path.join(ROOT, pkg)):
      for name in names:
        if name.endswith(".py"):
          rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
          out[rel.removesuffix(".__init__")] = os.path.join(folder, name)
  return out


def imports_of(path: str, module: str, known: set[str], doctests: bool = False) -> set[str]:
  """The modules of ours that `module` imports (`from a import b` counts `a.b` if a module);
  with `doctests`, also those its docstrings' examples import."""
  tree = ast.parse(open(path).read(), path)
  package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
  found = set()
  nodes = [*ast.walk(tree), *(doctest_imports(tree, path) if doctests else ())]
  for node in nodes:
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
      names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
      continue
    for name in names:
      while name and name not in known:  # `import a.b.c` of a module: count it
        name = name.rpartition(".")[0]
      if name and name != module:
        found.add(name)
  return found


def doctest_imports(tree: ast.Module, path: str) -> list[ast.stmt]:
  """The import statements of the examples in `tree`'s docstrings (module, classes, functions):
  the `>>> ` lines (with their `... ` continuations) that parse as `import` or `from`."""
  out = []
  for node in ast.walk(tree):
    if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    doc = ast.get_docstring(node, clean=True) or ""
    statement: list[str] = []
    for line in [*doc.splitlines(), ""]:
      text = line.strip()
      if text.startswith("... ") and statement:
        statement.append(text[4:])
        continue
      if statement:
        for lines in (statement, statement[:1]):  # `... ` may be the example's output
          try:
            out += [n for n in ast.parse("\n".join(lines), path).body
                    if isinstance(n, (ast.Import, ast.ImportFrom))]
            break
          except SyntaxError:
            pass
        statement = []
      if text.startswith(">>> ") and text[4:].lstrip().startswith(("import ", "from ")):
        statement = [text[4:].lstrip()]
  return out


def graph(doctests: bool = False) -> dict[str, set[str]]:
  """`{module: the modules of ours it imports}`. An example runs once every module is imported,
  so it cannot close an import cycle: only the direction rules read `doctests=True`."""
  mods = modules()
  known = set(mods)
  return {m: imports_of(p, m, known, doctests) for m, p in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
  """One cycle of `g` as a list of modules, or None. A package importing its own submodules
  (its `__init__` re-exporting) is not a cycle unless a submodule imports the package back."""
  WHITE, GREY, BLACK = 0, 1, 2
  color = dict.fromkeys(g, WHITE)
  stack: list[str] = []

  def visit(u):
    color[u] = GREY
    stack.append(u)
    for v in sorted(g[u]):
      if color[v] == GREY:
        return stack[stack.index(v):] + [v]
      if color[v] == WHITE:
        found = visit(v)
        if found:
          return found
    stack.pop()
    color[u] = BLACK
    return None

  for u in sorted(g):
    if color[u] == WHITE:
      found = visit(u)
      if found:
        return found
  return None


def top(module: str) -> str:
  return module.split(".")[0]


def is_claim(module: str) -> bool:
  return module.startswith("experiments.claims.")


def is_benchmark(module: str) -> bool:
  return module.startswith("experiments.benchmarks")


def is_command(module: str) -> bool:
  return module == "experiments.commands" or module.startswith("experiments.commands.")


def below_claims(module: str) -> bool:
  return any(module == b or module.startswith(b + ".") for b in BELOW_CLAIMS)


def violations(g: dict[str, set[str]]) -> list[str]:
  """Every broken rule of the house, one line each."""
  out = []
  allowed = {"transformer": {"transformer"}, "analysis": {"analysis", "transformer"},
             "optim": {"optim", "transformer"}, "experiments": set(PACKAGES)}
  for m, deps in sorted(g.items()):
    for d in sorted(deps):
      if top(d) not in allowed[top(m)]:
        out.append(f"{m} imports {d}: {top(m)} may import only {sorted(allowed[top(m)])}")
      if is_claim(m) and is_claim(d):
        out.append(f"claim {m} imports claim {d}: move the shared part to experiments.lab")
      if is_claim(m) and is_benchmark(d):
        out.append(f"claim {m} imports benchmark {d}: move the measurement to experiments.lab")
      if is_benchmark(m) and d.startswith("experiments.claims"):
        out.append(f"benchmark {m} imports {d}: benchmarks sit beside the claims, not above")
      if below_claims(m) and d.startswith("experiments.claims"):
        out.append(f"{m} imports {d}: the claims' support must not depend on the claims")
      if is_command(d) and not (is_command(m) or m == "experiments.__main__"):
        out.append(f"{m} imports {d}: commands are leaves; move what it needs below them")
  return out


def oversized(lengths: dict[str, int]) -> list[str]:
  """Every module over its limit, one line each: `lengths` is `{module: lines}`."""
  out = []
  for m, n in sorted(lengths.items()):
    if n > MAX_LINES:
      out.append(f"{m} has {n} lines, over {MAX_LINES}: split it by concern")
    elif is_claim(m) and n > MAX_CLAIM_LINES:
      out.append(f"claim {m} has {n} lines, over {MAX_CLAIM_LINES}: move its measurements "
                 "to experiments.lab")
  return out


def claims_folder_strays(g: dict[str, set[str]]) -> list[str]:
  """Modules in `experiments/claims/` that are neither a claim (a module defining `CLAIM`,
  registered) nor the registry: the machinery belongs in `experiments.verdict`."""
  from_registry = g.get("experiments.claims", set())
  return sorted(m for m in g if is_claim(m) and m not in from_registry)


def test_the_real_house_has_no_cycle_and_keeps_every_rule():
  g = graph()
  assert len(g) > 80, f"only {len(g)} modules found: is ROOT={ROOT} right?"
  assert "experiments.claims.causal_mask" in g and "experiments.lab.stability" in g
  assert find_cycle(g) is None, " -> ".join(find_cycle(g))
  assert violations(graph(doctests=True)) == []
  assert claims_folder_strays(g) == []


def long_claim_docstrings(sources: dict[str, str]) -> list[str]:
  """Claim modules whose docstring runs over `MAX_CLAIM_DOC` lines: `sources` is
  `{module: source}`."""
  out = []
  for m, src in sorted(sources.items()):
    doc = ast.get_docstring(ast.parse(src), clean=False) or ""
    n = len(doc.splitlines())
    if is_claim(m) and n > MAX_CLAIM_DOC:
      out.append(f"claim {m}'s docstring has {n} lines, over {MAX_CLAIM_DOC}: keep the question, "
                 "operationalisation and protocol; results and timings belong in results/")
  return out


def test_claim_docstrings_state_the_protocol_within_their_limit():
  sources = {m: open(p).read() for m, p in modules().items() if is_claim(m)}
  assert len(sources) >= 14
  assert long_claim_docstrings(sources) == []
  long = '"""' + "line\n" * (MAX_CLAIM_DOC + 1) + '"""\n'
  assert len(long_claim_docstrings({"experiments.claims.x": long,
                                    "experiments.lab.x": long})) == 1


def test_no_module_is_over_its_line_limit():
  lengths = {m: len(open(p).read().splitlines()) for m, p in modules().items()}
  assert len(lengths) > 80
  assert oversized(lengths) == []


def test_no_test_file_is_over_the_line_limit():
  lengths = {m: len(open(p).read().splitlines()) for m, p in modules(("tests",)).items()}
  assert len(lengths) > 80 and "tests.test_house" in lengths
  assert oversized(lengths) == []


def unmirrored(root: str) -> list[str]:
  """Where `root/tests/` does not mirror the packages, one line each: a folder under `tests/`
  that is not a package folder at the same place under `root` (`tests/experiments/verdict/`
  for `experiments/verdict/`), and a test file directly in `tests/experiments/` that names no
  top-level module of `experiments` (`test_jsonio.py` for `experiments/jsonio.py`)."""
  out = []
  tests = os.path.join(root, "tests")
  for folder, dirs, _ in os.walk(tests):
    dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
    rel = os.path.relpath(folder, tests)
    if rel != "." and not os.path.isfile(os.path.join(root, rel, "__init__.py")):
      out.append(f"tests/{rel}/ mirrors no package folder {rel}/: move its tests to the folder "
                 "of the module they test")
  for name in sorted(os.listdir(os.path.join(tests, "experiments"))):
    if (name.startswith("test_") and name.endswith(".py")
        and not os.path.isfile(os.path.join(root, "experiments", name.removeprefix("test_")))):
      out.append(f"tests/experiments/{name} names no module experiments/"
                 f"{name.removeprefix('test_')}: move it to the folder of the module it tests")
  return out


def test_tests_mirror_the_packages(tmp_path):
  assert os.path.isdir(os.path.join(ROOT, "tests", "experiments", "verdict"))
  assert unmirrored(ROOT) == []
  for folder in ("experiments/verdict", "tests/experiments/verdict", "tests/experiments/misc",
                 "tests/experiments/verdict/old", "tests/__pycache__"):
    os.makedirs(tmp_path / folder)
  (tmp_path / "experiments" / "__init__.py").write_text("")
  (tmp_path / "experiments" / "verdict" / "__init__.py").write_text("")
  (tmp_path / "experiments" / "jsonio.py").write_text("")
  for name in ("test_jsonio.py", "test_claims_rank.py"):
    (tmp_path / "tests" / "experiments" / name).write_text("")
  assert unmirrored(str(tmp_path)) == [
      "tests/experiments/misc/ mirrors no package folder experiments/misc/: move its tests to "
      "the folder of the module they test",
      "tests/experiments/verdict/old/ mirrors no package folder experiments/verdict/old/: move "
      "its tests to the folder of the module they test",
      "tests/experiments/test_claims_rank.py names no module experiments/claims_rank.py: move it "
      "to the folder of the module it tests"]


def test_the_checks_catch_what_they_claim_to():
  g = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b": set()}
  assert find_cycle(g) == ["a.x", "a.y", "a.z", "a.x"]
  bad = {"transformer.model": {"analysis.spectra"},
         "analysis.spectra": {"optim.roles"},
         "experiments.claims.muon": {"experiments.claims.lora", "experiments.benchmarks.optim"},
         "experiments.benchmarks.optim": {"experiments.claims.muon"},
         "experiments.lab.arms": {"experiments.claims.lora"},
         "experiments.data.tasks": {"experiments.claims.lora"},
         "experiments.verdict.running.runner": {"experiments.claims.muon"},
         "experiments.lab.tuning": {"experiments.commands.table"},
         "experiments.commands.tour": {"experiments.commands.table"},
         "experiments.__main__": {"experiments.commands.tour"},
         "experiments.claims.lora": set(), "analysis.x": set(), "optim.roles": set()}
  lines = violations(bad)
  assert any(line.startswith("transformer.model imports analysis.spectra") for line in lines)
  assert any(line.startswith("analysis.spectra imports optim.roles") for line in lines)
  assert any("claim experiments.claims.muon imports claim" in line for line in lines)
  assert any("imports benchmark experiments.benchmarks.optim" in line for line in lines)
  assert any(line.startswith("benchmark experiments.benchmarks.optim imports") for line in lines)
  assert any(line.startswith("experiments.lab.arms imports") for line in lines)
  assert any(line.startswith("experiments.data.tasks imports") for line in lines)
  assert any(line.startswith("experiments.verdict.running.runner imports") for line in lines)
  assert any(line.startswith("experiments.lab.tuning imports experiments.commands.table: "
                             "commands are leaves") for line in lines)
  assert not any(line.startswith(("experiments.commands.tour", "experiments.__main__"))
                 for line in lines)
  assert oversized({"experiments.train.loop": 501, "experiments.claims.lora": 401,
                    "experiments.lab.tuning": 450, "experiments.claims.sliding_window": 400}) == [
      "claim experiments.claims.lora has 401 lines, over 400: move its measurements to "
      "experiments.lab",
      "experiments.train.loop has 501 lines, over 500: split it by concern"]
  assert oversized({"tests.experiments.verdict.test_scale": 908,
                    "tests.experiments.claims.test_lora": 450}) == [
      "tests.experiments.verdict.test_scale has 908 lines, over 500: split it by concern"]
  registry = {"experiments.claims": {"experiments.claims.muon"}, "experiments.claims.muon": set(),
              "experiments.claims.runner": set()}
  assert claims_folder_strays(registry) == ["experiments.claims.runner"]


@pytest.mark.parametrize("source, expected", [
    ("from experiments.lab import stability\n", {"experiments.lab.stability"}),
    ("import analysis\n", {"analysis"}),
    ("def f():\n  from experiments.claims import lora\n", {"experiments.claims.lora"}),
    ("from . import claim\n", {"experiments.claims.claim"}),
])
def test_imports_are_read_also_inside_functions_and_relative(tmp_path, source, expected):
  path = tmp_path / "mod.py"
  path.write_text(source)
  known = {"experiments.lab.stability", "experiments.lab", "analysis", "experiments.claims",
           "experiments.claims.lora", "experiments.claims.claim", "experiments.claims.muon"}
  assert imports_of(str(path), "experiments.claims.muon", known) == expected


DOCTESTS = '''"""A module of the verdict.

Example:
  >>> from experiments.claims import muon
  >>> muon.FULL  # the example goes on: not an import
"""


def f():
  """A function.

  >>> from experiments.lab import (
  ...     stability)
  >>> import analysis  # doctest: +SKIP
  """
  from experiments import jsonio
'''


def test_doctest_imports_count_for_the_direction_rules_not_for_cycles(tmp_path):
  path = tmp_path / "mod.py"
  path.write_text(DOCTESTS)
  known = {"experiments.claims", "experiments.claims.muon", "experiments.lab",
           "experiments.lab.stability", "experiments.jsonio", "experiments", "analysis"}
  module = "experiments.verdict.running.results"
  assert imports_of(str(path), module, known) == {"experiments.jsonio"}
  got = imports_of(str(path), module, known, doctests=True)
  assert got == {"experiments.jsonio", "experiments.claims.muon", "experiments.lab.stability",
                 "analysis"}
  assert violations({module: got}) == [
      "experiments.verdict.running.results imports experiments.claims.muon: the claims' support "
      "must not depend on the claims"]
