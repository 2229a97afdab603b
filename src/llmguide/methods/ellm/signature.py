"""ELLM's state signature: what of a caption makes a new LM request (two states with the same signature
get the same prompt, rendered from :meth:`StateSignature.caption`), and that request (:func:`goal_request`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# --- state signature -----------------------------------------------------------------------
# What enters the signature, per env family (the prompt is rendered from ``StateSignature.caption()``,
# so two states with the same signature get the same prompt, and a caption that differs only in what
# the prompt does not show is not a new request):
#
# * Crafter / Craftax-Classic captions ("You see ... You face ... You have ... You feel ..."): the set
#   of visible objects without ``IGNORED_OBJECTS`` (arrows and sand, as the reference captioner), the
#   inventory with counts capped at ``COUNT_CAP``, the vitals felt low (hungry, thirsty, sleepy, hurt)
#   and sleeping.  Not: the faced object, the order of the objects, counts above the cap.
# * Any other caption format (BabyAI, MiniHack, ...): the caption lower-cased, digits removed,
#   whitespace collapsed.
_SENTENCE = re.compile(r"you (see|face|have|feel|are)\s+([^.]*)\.?", re.IGNORECASE)
_COUNT = re.compile(r"^(\d+)\s+(.+)$")
COUNT_CAP = 4  # item counts above this look the same (no Crafter recipe needs more than 4 of an item)
IGNORED_OBJECTS = frozenset({"arrow", "sand"})  # transient / goal-irrelevant; the reference leaves them out


def _split_list(text: str) -> list[str]:
    parts = re.split(r",\s*|\s+and\s+", text.strip())
    return [p.strip().lower() for p in parts if p.strip() and p.strip().lower() != "nothing"]


@dataclass(frozen=True)
class StateSignature:
    """What the goal suggestions depend on: visible objects, inventory (counts capped), vitals."""

    objects: tuple[str, ...] = ()
    inventory: tuple[str, ...] = ()   # "2 wood", "1 sapling" (counts capped at COUNT_CAP)
    vitals: tuple[str, ...] = ()      # "hungry", "thirsty", ... and "sleeping"
    raw: str = ""  # normalised caption, only when it did not parse into the fields above

    def caption(self) -> str:
        """A canonical caption of the signature (the same signature gives the same prompt)."""
        if self.raw:
            return self.raw
        parts = [f"You see {', '.join(self.objects)}." if self.objects else "You see nothing."]
        parts.append(f"You have {', '.join(self.inventory)}." if self.inventory else "You have nothing.")
        feel = [v for v in self.vitals if v != "sleeping"]
        if feel:
            parts.append(f"You feel {', '.join(feel)}.")
        if "sleeping" in self.vitals:
            parts.append("You are sleeping.")
        return " ".join(parts)


def state_signature(caption: str, count_cap: int = COUNT_CAP) -> StateSignature:
    """Parse an env caption ("You see tree, cow. You face tree. You have 2 wood. You feel thirsty.").

    The faced object is dropped and item counts are capped, so the signature changes only when
    the visible objects, the (capped) inventory or the vitals change.  A caption in another
    format falls back to the lower-cased caption with digits removed.
    """
    fields: dict[str, list[str]] = {"see": [], "have": [], "feel": []}
    found = False
    for verb, body in _SENTENCE.findall(caption or ""):
        verb = verb.lower()
        found = True
        if verb == "face":
            continue
        if verb == "are":
            fields["feel"].extend(["sleeping"] if "sleep" in body.lower() else [])
            continue
        items = _split_list(body)
        if verb == "have":
            capped = []
            for item in items:
                m = _COUNT.match(item)
                capped.append(f"{min(int(m.group(1)), count_cap)} {m.group(2)}" if m else f"1 {item}")
            items = capped
        fields[verb].extend(items)
    if not found:
        raw = re.sub(r"\d+", "", (caption or "").lower())
        return StateSignature(raw=" ".join(raw.split()))
    return StateSignature(
        objects=tuple(sorted(set(fields["see"]) - IGNORED_OBJECTS)),
        inventory=tuple(sorted(set(fields["have"]), key=lambda s: s.split(" ", 1)[-1])),
        vitals=tuple(sorted(set(fields["feel"]))),
    )


# --- suggestion statistics -----------------------------------------------------------------


def goal_request(mode: str, template: Any, caption: str, vocabulary: Sequence[str], *, max_tokens: int = 48,
                 temperature: float = 0.0, normalize: bool = False) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of the LM request for a state whose signature caption is ``caption``: the generate
    prompt, or the score context with the vocabulary as candidates.  Exactly what the service, the cache and
    an answer table see."""
    fields = {"caption": caption, "vocabulary": ", ".join(vocabulary)}
    text = template.render(**{k: v for k, v in fields.items() if k in template.fields})
    if mode == "generate":
        return "generate", {"prompt": text, "max_tokens": max_tokens, "temperature": temperature, "stop": ["\n\n"]}
    context = text
    sep = "" if context.endswith((" ", "\n")) else " "
    return "score", {"context": context, "candidates": [sep + g for g in vocabulary], "normalize": normalize}
