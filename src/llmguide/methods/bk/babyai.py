"""BK's ground truth for its BabyAI-Text go-to tasks (``llm=oracle``): the BK-Code oracle program (Φ = 0.5 −
distance/12 to the mission's object when visible, −1 when not, read from the image only), the same Φ from a
caption (BK-Pref's progress), and BK-Goal's goal library for a go-to mission."""

from __future__ import annotations

import re

from minigrid.core.constants import COLOR_NAMES, COLOR_TO_IDX, IDX_TO_OBJECT, OBJECT_TO_IDX

# obs["image"]: one-hot object-type planes (minigrid's OBJECT_TO_IDX), then colour planes, then door state
OBJECT_CHANNEL = {kind: OBJECT_TO_IDX[kind] for kind in ("key", "ball", "box", "door")}
COLOR_CHANNEL = {color: len(IDX_TO_OBJECT) + COLOR_TO_IDX[color] for color in COLOR_NAMES}


def oracle_potential_program(target: str) -> str:
    """BK-Code's oracle program for ``target`` ("red ball", the mission's object, fixed when the oracle writes
    it): reads only ``obs['image']``, as the reference's programs do (they never see the mission), finds that
    object in the egocentric one-hot image; Φ = 0.5 − distance/12 when it is visible (agent at row 6,
    column 3), −1 when not (the visibility bonus).  The wrong-knowledge control (``llm.target``) is the same
    program written for the other task's object."""
    color, kind = target.split()
    return f'''import numpy as np

TYPE_CHANNEL = {OBJECT_CHANNEL[kind]}    # obs["image"] channel of a {kind}
COLOR_CHANNEL = {COLOR_CHANNEL[color]}   # obs["image"] channel of the colour {color}


def potential(obs, caption):
    image = np.asarray(obs["image"])
    rows, cols = np.nonzero((image[TYPE_CHANNEL] > 0.5) & (image[COLOR_CHANNEL] > 0.5))
    if len(rows) == 0:
        return -1.0
    distance = int(np.min(np.abs(rows - 6) + np.abs(cols - 3)))
    return 0.5 - distance / 12.0
'''


_SEE = re.compile(r"You see an? (?:(?:open|closed|locked) )?(\w+ \w+) (.*)")
_OFFSET = re.compile(r"(\d+) steps? (left|right|forward)")


def caption_potential(caption: str, target: str) -> float:
    """The oracle program's Φ computed from a caption: 0.5 − distance/12 to ``target`` ("red ball")
    if the caption mentions it, else −1."""
    best = None
    for sentence in caption.split(","):
        m = _SEE.match(sentence.strip())
        if not m or m.group(1) != target:
            continue
        dist = sum(int(n) for n, _ in _OFFSET.findall(m.group(2)))
        best = dist if best is None else min(best, dist)
    return -1.0 if best is None else 0.5 - best / 12.0


def mission_target(mission: str) -> str | None:
    """"go to the red ball" -> "red ball" (None for other missions, or an object the oracle does not know)."""
    m = re.match(r"go to (?:the|a) (\w+) (\w+)$", mission.strip().lower())
    return f"{m.group(1)} {m.group(2)}" if m and m.group(1) in COLOR_CHANNEL and m.group(2) in OBJECT_CHANNEL else None


def oracle_goals(mission: str) -> list[str]:
    """BK-Goal's oracle library for a go-to mission."""
    target = mission_target(mission)
    if target is None:
        return []
    return [f"go to the {target}", f"approach the {target}", f"you see a {target} 1 step forward"]


def window_progress(captions: list[str], mission: str) -> float:
    """Ground-truth progress of a window: Φ(last caption) − Φ(first caption) towards the mission's target."""
    target = mission_target(mission)
    if target is None or not captions:
        return 0.0
    return caption_potential(captions[-1], target) - caption_potential(captions[0], target)
