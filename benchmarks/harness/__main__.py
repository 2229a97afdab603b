"""``python benchmarks/harness --index`` / ``--reproduce benchmarks/results/<study>/<variant>`` (:func:`harness.command`).

Run as a folder, this file is not part of the package: the folder's parent, ``benchmarks/``, takes the folder's
place on sys.path (the package's module names, ``run``, ``paths``, ``report`` ..., stay off it), and the package
is imported from there."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [str(HERE.parent) if Path(p or ".").resolve() == HERE else p for p in sys.path]

import harness  # noqa: E402

sys.exit(harness.command())
