"""``import _path`` first in a script of this folder: benchmarks/ and its folders by kind go on sys.path (at its
end: an installed package always comes first), so that ``from harness import ...`` finds benchmarks/harness/ and
a script imports another by its name, whichever folder holds it (``from ellm_crafter import COMMON``)."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
for folder in (BENCHMARKS, *(BENCHMARKS / kind for kind in ("studies", "costs", "analyses"))):
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
