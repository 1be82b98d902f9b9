"""`make docs` covers every public name of `transformer`, `analysis` and `optim`.

Builds the API reference as `make docs` does (Sphinx, warnings as errors) and reads its
inventory (`objects.inv`): every name in a package's `__all__` must be documented, under
the package's own name (`optim.newton_schulz`) or where it is defined
(`transformer.linalg.polar.newton_schulz`); a module must have its page section.
"""

import importlib
import importlib.util
import inspect
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("transformer", "analysis", "optim")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
  pytest.importorskip("sphinx", reason="needs the docs extra: pip install -e '.[docs]'")
  from sphinx.util.inventory import InventoryFile

  out = tmp_path_factory.mktemp("docs")
  run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                        "html", str(ROOT / "docs"), str(out)], capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[-4000:]
  with open(out / "objects.inv", "rb") as f:
    inv = InventoryFile.load(f, "", lambda base, uri: uri)
  return {name for entries in inv.values() for name in entries}


def _documented_as(package: str, name: str) -> set[str]:
  """The names under which `package.name` may appear in the reference."""
  obj = getattr(importlib.import_module(package), name)
  names = {f"{package}.{name}"}
  if inspect.ismodule(obj):
    names.add(obj.__name__)
  elif getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):
    names.add(f"{obj.__module__}.{obj.__qualname__}")
  else:  # data (a dict, a tuple): documented in a module that holds it
    names |= {f"{m}.{name}" for m, mod in list(sys.modules.items())
              if m.split(".")[0] in PACKAGES and getattr(mod, name, None) is obj}
  return names


@pytest.mark.slow
@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_in_the_reference(inventory, package):
  public = [n for n in importlib.import_module(package).__all__ if not n.startswith("__")]
  assert public, package
  missing = [n for n in public if not _documented_as(package, n) & inventory]
  assert not missing, f"{package}: not in the built reference: {missing}"


def test_the_reference_pages_name_the_modules_of_the_issue():
  """Without building: the pages that must hold them name them (a fast guard)."""
  analysis_rst = (ROOT / "docs" / "analysis.rst").read_text()
  for module in ("analysis.curvature", "analysis.powerlaw", "analysis.edge_of_stability"):
    assert f".. automodule:: {module}" in analysis_rst
  assert ".. autofunction:: optim.newton_schulz" in (ROOT / "docs" / "optim.rst").read_text()


# ------------------------------------------------ every code block of the docs runs (issue 48)
#
# Each `python` block of README.md and docs/*.rst runs on its own, in a fresh namespace (as a
# reader copies it), unless marked to continue the block before it in the same file:
#
#   README.md:  <!-- docs: continues -->              docs/*.rst:  .. docs: continues
#               <!-- docs: not run (why) -->                       .. docs: not run (why)
#
# on the line(s) just before the block. Every other language (`bash`, `console`, ...) must say
# why it is not run; `text` blocks are output or file trees, not code.

import re  # noqa: E402
import textwrap  # noqa: E402

_MARK = re.compile(r"(?:<!--|\.\.)\s*docs:\s*(continues|not run \(.+\))\s*(?:-->)?\s*$")


def _markdown_blocks(text):
  lines, i = text.splitlines(), 0
  while i < len(lines):
    m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
    if not m:
      i += 1
      continue
    indent, lang, start = m.group(1), m.group(2), i
    j = i + 1
    while not re.match(rf"^{indent}```\s*$", lines[j]):
      j += 1
    yield start + 1, lang, textwrap.dedent("\n".join(lines[i + 1:j])), _mark_before(lines, i)
    i = j + 1


def _rst_blocks(text):
  lines = text.splitlines()
  for i, line in enumerate(lines):
    m = re.match(r"^(\s*)\.\. code-block::\s*(\w+)\s*$", line)
    if not m:
      continue
    j, body = i + 1, []
    while j < len(lines) and (not lines[j].strip() or lines[j].startswith(m.group(1) + " ")):
      body.append(lines[j])
      j += 1
    yield i + 1, m.group(2), textwrap.dedent("\n".join(body)).strip("\n"), _mark_before(lines, i)


def _mark_before(lines, i):
  """The marker on the nearest non-blank line above line `i`, if it is one."""
  k = i - 1
  while k >= 0 and not lines[k].strip():
    k -= 1
  m = _MARK.search(lines[k]) if k >= 0 else None
  return m.group(1) if m else None


def _blocks():
  files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]
  for path in files:
    parse = _markdown_blocks if path.suffix == ".md" else _rst_blocks
    for line, lang, code, mark in parse(path.read_text()):
      yield path.relative_to(ROOT), line, lang, code, mark


BLOCKS = list(_blocks())


def test_the_docs_have_code_blocks_and_every_unrun_one_says_why():
  assert sum(lang == "python" for _, _, lang, _, _ in BLOCKS) >= 8
  for path, line, lang, _, mark in BLOCKS:
    if lang in ("python", "text"):
      continue
    assert mark and mark.startswith("not run"), (
        f"{path}:{line}: a {lang or 'plain'} block must run or be marked "
        f"'docs: not run (why)'")


def _python_runs():
  """`(id, [code of the blocks it continues from, ..., its own])` per python block to run."""
  runs, chain = [], {}
  for path, line, lang, code, mark in BLOCKS:
    if lang != "python" or (mark and mark.startswith("not run")):
      continue
    prefix = chain.get(path, []) if mark == "continues" else []
    chain[path] = [*prefix, code]
    runs.append((f"{path}:{line}", chain[path]))
  return runs


RUNS = _python_runs()


@pytest.mark.slow
@pytest.mark.parametrize("where, codes", RUNS, ids=[r[0] for r in RUNS])
def test_every_python_block_runs(where, codes, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
  namespace = {"__name__": "__docs__"}
  for code in codes:
    exec(compile(code, where, "exec"), namespace)  # noqa: S102


def test_the_reference_lists_every_public_name_at_its_import_path():
  """Without building: every name of `__all__` has its directive at `package.name` (fast)."""
  text = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.rst"))
  for package in PACKAGES:
    module = importlib.import_module(package)
    for name in module.__all__:
      if name.startswith("__") or inspect.ismodule(getattr(module, name)):
        continue
      pattern = (rf"\.\. (autofunction|autoclass|py:data|autodata)::\s*({package}\.)?{name}\s*$")
      assert re.search(pattern, text, re.MULTILINE), f"{package}.{name}"


@pytest.mark.slow
def test_objects_inv_has_each_public_name_at_its_import_path(inventory):
  assert {"optim.muon", "analysis.spectrum", "optim.MatrixAxes", "transformer.init"} <= inventory
  for package in PACKAGES:
    module = importlib.import_module(package)
    missing = [n for n in module.__all__ if not n.startswith("__")
               and not inspect.ismodule(getattr(module, n))
               and f"{package}.{n}" not in inventory]
    assert not missing, f"{package}: not in objects.inv at the import path: {missing}"


def _prose_files():
  """The pages and every source file of the four packages: where users read our names."""
  files = [ROOT / "README.md", ROOT / "results" / "README.md", *(ROOT / "docs").glob("*.rst")]
  for package in ("transformer", "analysis", "optim", "experiments"):
    files += (ROOT / package).rglob("*.py")
  return files


def _named_commands():
  """Every `python -m pkg.mod` written in a docstring, comment or page of the project."""
  command = re.compile(r"python -m ((?:transformer|analysis|optim|experiments)"
                       r"(?:\.[a-z_][a-z0-9_]*)*)\b(?!\.[A-Z])")  # not `benchmarks.NAME`
  names = set()
  for path in _prose_files():
    for m in command.finditer(path.read_text()):
      names.add((m.group(1).rstrip("."), str(path.relative_to(ROOT))))
  return sorted(names)


@pytest.mark.parametrize("module,where", _named_commands())
def test_every_named_command_exists(module, where):
  """A `python -m X` the project tells its users to run names a module that exists."""
  spec = importlib.util.find_spec(module)
  assert spec is not None, f"{where} names `python -m {module}`, which is no module"
  if spec.submodule_search_locations is not None:  # a package runs its __main__
    assert importlib.util.find_spec(f"{module}.__main__") is not None, (
        f"{where} names `python -m {module}`, a package without __main__")


# GPT-2 checkpoints name their tensors `transformer.h.0.attn...`: Hugging Face's keys, not ours.
_HF_KEY = re.compile(r"^transformer\.(h|wte|wpe|ln_f)(\.|$)")
# File names (`optim.html`) and the `NAME` slot of a command template are not Python names.
_FILE_OR_PLACEHOLDER = re.compile(r"\.(py|html|md|json|png|NAME)$")


def _resolves(name: str) -> bool:
  """`name` is an importable module, or one followed by attributes it has."""
  parts = name.split(".")
  for i in range(len(parts), 0, -1):
    try:
      obj = importlib.import_module(".".join(parts[:i]))
    except ImportError:
      continue
    for attr in parts[i:]:
      if not hasattr(obj, attr):
        return False
      obj = getattr(obj, attr)
    return True
  return False


def test_every_dotted_name_in_backticks_resolves():
  """A `package.module.name` in backticks, in a docstring, comment or page, names something
  that exists: a refactor that moves a module updates the prose that points at it."""
  dotted = re.compile(r"`((?:transformer|analysis|optim|experiments)(?:\.[A-Za-z_]\w*)+)")
  stale = sorted({f"{m.group(1)} ({path.relative_to(ROOT)})" for path in _prose_files()
                  for m in dotted.finditer(path.read_text())
                  if not _HF_KEY.match(m.group(1)) and not _FILE_OR_PLACEHOLDER.search(m.group(1))
                  and not _resolves(m.group(1))})
  assert not stale, "names that no longer exist:\n" + "\n".join(stale)
