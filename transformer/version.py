"""The version of the distribution `matrices-in-transformers`, in one place.

`setup.py` reads it from this file; `transformer`, `analysis` and `optim` export it as
`__version__`.
"""

__version__ = "0.1.0"
