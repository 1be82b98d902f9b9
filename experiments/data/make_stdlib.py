"""Builds the pinned `stdlib` corpus archive from a Python 3.11.7 standard library.

  python -m experiments.data.make_stdlib [--root /path/to/lib/python3.11] [--out FILE]

Prints the archive's size and SHA-256 and whether it is the pinned one (exit status 1 if not);
`experiments.data.pinned` holds the selection rule and the recipe. About a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig

from experiments.data.pinned import SHA256, STDLIB_ARCHIVE, build_stdlib


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.data.make_stdlib",
                              description="Build the pinned `stdlib` corpus archive.")
  p.add_argument("--root", default=sysconfig.get_paths()["stdlib"],
                 help="a Python 3.11.7 standard-library folder (default: this interpreter's)")
  p.add_argument("--out", default=STDLIB_ARCHIVE, help=f"the archive (default: {STDLIB_ARCHIVE})")
  args = p.parse_args(argv)
  digest = build_stdlib(args.root, args.out)
  same = digest == SHA256[STDLIB_ARCHIVE]
  print(f"{args.out}: {os.path.getsize(args.out):,} bytes, sha256 {digest} "
        f"({'the pinned archive' if same else 'NOT the pinned ' + SHA256[STDLIB_ARCHIVE]})")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
