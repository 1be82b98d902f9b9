"""Sphinx configuration of the API reference: `make docs` (warnings are errors)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

from transformer.version import __version__  # noqa: E402

project = "Matrices in Transformers"
author = "Matrices in Transformers contributors"
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax",
              "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]
# Docstrings write code in single backticks (Markdown style): render it as code.
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# `Attributes:` sections become fields of their class, so the NamedTuple fields that autodoc
# also lists ("Alias for field number N") are skipped below rather than documented twice.
napoleon_use_ivar = True
html_theme = "alabaster"
html_title = f"Matrices in Transformers {__version__}"
html_theme_options = {"nosidebar": False}
html_static_path = []


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
  doc = getattr(obj, "__doc__", None) or ""
  return True if doc.startswith("Alias for field number") else None


def setup(app):
  app.connect("autodoc-skip-member", _skip_namedtuple_fields)
