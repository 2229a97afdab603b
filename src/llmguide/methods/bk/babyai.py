"""BK's ground truth for its BabyAI-Text go-to tasks (``llm=oracle``): the BK-Code oracle program (reads
the mission from the observation, Φ = 0.5 − distance/12 to the target when visible, −1 when not), the
same Φ from a caption (BK-Pref's progress), and BK-Goal's goal library for a go-to mission."""

from __future__ import annotations

import re

from minigrid.core.constants import COLOR_NAMES, COLOR_TO_IDX


def oracle_potential_program(vocab: list[str], swap: tuple[str, str] | None = None) -> str:
    """BK-Code's oracle program: reads the mission ("go to the red ball") from ``obs['vector']``'s bag of
    words, finds that object in the egocentric one-hot image; Φ = 0.5 − distance/12 when it is visible
    (agent at row 6, column 3), −1 when not (the visibility bonus).  ``swap=("red ball", "blue box")`` is
    the wrong-knowledge control (``llm.target``): where the mission names the task's target the program
    values the other object instead."""
    words = {w: 4 + i for i, w in enumerate(vocab)}
    colors = {c: words[c] for c in COLOR_NAMES}
    kinds = {"key": (words["key"], 5), "ball": (words["ball"], 6), "box": (words["box"], 7)}
    channels = {c: 11 + COLOR_TO_IDX[c] for c in COLOR_NAMES}
    return f'''import numpy as np

COLORS = {colors!r}          # colour word -> index in obs["vector"]
KINDS = {kinds!r}       # type word -> (index in obs["vector"], object-type channel)
COLOR_CHANNEL = {channels!r}   # colour word -> colour channel of obs["image"]
SWAP = {({tuple(swap[0].split()): tuple(swap[1].split())} if swap else {})!r}   # mission target -> valued object


def potential(obs, caption):
    image, vector = np.asarray(obs["image"]), np.asarray(obs["vector"])
    color = next((c for c, i in COLORS.items() if vector[i] > 0), None)
    kind = next((k for k, (i, _) in KINDS.items() if vector[i] > 0), None)
    color, kind = SWAP.get((color, kind), (color, kind))
    if kind is None:
        return 0.0
    mask = image[KINDS[kind][1]] > 0.5
    if color is not None:
        mask = mask & (image[COLOR_CHANNEL[color]] > 0.5)
    rows, cols = np.nonzero(mask)
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
    """"go to the red ball" -> "red ball" (None for other missions)."""
    m = re.match(r"go to (?:the|a) (\w+ \w+)$", mission.strip().lower())
    return m.group(1) if m else None


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
