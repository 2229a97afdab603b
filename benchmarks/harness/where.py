"""Where the harness is and what it reads: the benchmarks folder, the results, the checkout runs start in.

The package re-exports :data:`ROOT` and :data:`REPO` (``harness.ROOT``, ``harness.REPO``), and every function of
the harness reads them from there, through :func:`root` and :func:`repo`, at call time: a caller (a test) that sets
``harness.ROOT`` or ``harness.REPO`` moves them for every module of the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]   # benchmarks/
RESULTS = HERE / "results"
ROOT = HERE.parent   # the checkout: runs start here, with no folder of benchmarks/ on their import path
REPO = ROOT          # the checkout whose code a study trains with (provenance.tree_state)


def _package() -> object:
    return sys.modules[__package__]


def root() -> Path:
    """``harness.ROOT`` as the package holds it now."""
    return _package().ROOT


def repo() -> Path:
    """``harness.REPO`` as the package holds it now."""
    return _package().REPO
