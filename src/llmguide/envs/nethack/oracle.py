"""NetHack's and MiniHack's ground truth: the event vocabulary read from game messages, the tasks'
goals in the ONI/Motif reference's words (``task_goal(env_id)``, :func:`goal_events`) and the goal
oracle, which also says how much progress towards a goal a message reports (``message_progress``: the
message-label answerers of the methods read it)."""

from __future__ import annotations

import re

from llmguide.envs.base import Oracle

EVENTS = ["find the staircase", "descend the stairs", "open a door", "pick up an item",
          "kill a monster", "collect gold", "eat food", "gain a level", "take damage", "hear gold",
          "start levitating", "fill a pool", "freeze a pool"]
# An inventory line ``x - <item>.`` reports an item gained (picked up, bought, given), except when its
# parenthesis names the slot an equipping command put an owned item in: wielded, swapped, quivered, worn,
# put on.  NetHack prints the same line for ammo picked up into the quiver stack; that is mostly the
# agent's own fired ammo coming back, not a new item, so it is not counted either.
_EQUIPPED = r"being worn|weapon in hands?|wielded|alternate weapon|in quiver|at the ready|on (?:left|right) \w+"
MESSAGE_EVENTS = [  # (cheap keywords, pattern on the message, event)
    (("You kill", "You destroy"), re.compile(r"\bYou (kill|destroy)\b"), "kill a monster"),
    (("door", "WHAMM", "unlocking", "picking the lock"),
     re.compile(r"\bThe door opens\b|\bThe door crashes open\b|\bWHAMM!!|\bYou succeed in unlocking\b|"
                r"\bThe door unlocks\b|\bYou succeed in picking the lock\b"),
     "open a door"),
    ((" - ",), re.compile(r"(?:^|[.!?]\s+)[a-zA-Z] - (?![^.]*\((?:" + _EQUIPPED + r"))"), "pick up an item"),
    (("eating", "delicious", "hits the spot"),
     re.compile(r"\bYou finish eating\b|\bThis .* is delicious\b|\bThis food really hits the spot\b"),
     "eat food"),
    (("experience level",), re.compile(r"\bWelcome to experience level\b"), "gain a level"),
    (("staircase down",), re.compile(r"\bThere is a staircase down here\b"), "find the staircase"),
    (("gold piece",), re.compile(r"(^|\s)\$ - \d+ gold pieces?\b"), "collect gold"),
    (("counting money",), re.compile(r"\bYou hear someone counting money\b"), "hear gold"),
    # A new ability or a new path: levitation starting (potion, ring, boots, spell), a boulder filling a
    # pool of water or lava ("... Now you can cross it!") or a pit, water or lava frozen by cold (wand, horn, spell).
    (("float",), re.compile(r"\bYou start to float in the air\b|\bYou float up\b"), "start levitating"),
    (("cross it", "fills"), re.compile(r"\bNow you can cross it\b|\bfills (?:a|the) pit\b"), "fill a pool"),
    (("freezes", "solidifies", "bridged with ice"),
     re.compile(r"\b(?:water|moat|pool) freezes\b|\bcools and solidifies\b|\bis bridged with ice\b"),
     "freeze a pool"),
]


PROGRESS_EVENTS = frozenset({"kill a monster", "open a door", "pick up an item", "eat food", "gain a level",
                             "find the staircase", "descend the stairs", "collect gold", "start levitating",
                             "fill a pool", "freeze a pool"})
_KEYWORDS = re.compile("|".join(re.escape(k) for keys, _, _ in MESSAGE_EVENTS for k in keys))

# The goal of each NLE task, in the words of the ONI/Motif reference's goal strings (facebookresearch/oni
# rlaif/prompts.py ``ranking_goal_strings``: "defaultgoal" for Score, the positive part of "stairs" and
# "gold"); the LM labelling prompts (``*_goal`` templates) and the oracle both read it.  MiniHack tasks
# have no entry: their labels stay task-agnostic (a message is helpful when it reports any progress).
SCORE_GOAL = ("maximize the score in the game, for instance by killing monsters, collecting gold or going down "
              "the stairs in the dungeon.")
TASK_GOALS = (  # (env-id prefix, goal); the first matching prefix wins
    ("NetHackScore", SCORE_GOAL),
    ("NetHackChallenge", SCORE_GOAL),
    ("NetHackStaircase", "go down the stairs in the dungeon as much as possible."),
    ("NetHackOracle", "find the Oracle, going down the stairs in the dungeon to reach her level."),
    ("NetHackGold", "collect as much gold as possible."),
    ("NetHackEat", "eat food."),
    ("NetHackScout", "explore the dungeon."),
)
# What a goal asks for, read from its words (first positive clause: "... But never ..." parts are dropped):
# keyword pattern -> the events that serve it.  NetHack's in-game score is experience points (kills, level
# gains) + gold + 50 per dungeon level below the first, so "score" names those events.
GOAL_KEYWORDS = (
    (re.compile(r"\bscore\b"), ("kill a monster", "gain a level", "collect gold", "descend the stairs")),
    (re.compile(r"\bkill|\bmonsters?\b|\bcombat\b|\bfight"), ("kill a monster", "gain a level")),
    (re.compile(r"\bexperience\b|\blevel up"), ("gain a level",)),
    (re.compile(r"\bgold\b|\bmoney\b"), ("collect gold", "hear gold")),
    (re.compile(r"\bstairs?\b|\bstaircase\b|\bdescend|\bgo(?:ing)? down\b|\bdeeper\b"),
     ("find the staircase", "descend the stairs")),
    (re.compile(r"\bdoors?\b"), ("open a door",)),
    (re.compile(r"\bkeys?\b|\bitems?\b|\bpick(?:ing)? up\b"), ("pick up an item",)),
    (re.compile(r"\beat\b|\bfood\b"), ("eat food",)),
    (re.compile(r"\bexplor"), ("find the staircase", "open a door")),
)
_NEGATION = re.compile(r"\b(?:but\s+)?(?:never|do not|don't|avoid)\b", re.IGNORECASE)


def task_goal(env_id: str | None) -> str | None:
    """The goal of an NLE task (:data:`TASK_GOALS`), or None (MiniHack and unknown ids: no goal)."""
    for prefix, goal in TASK_GOALS:
        if env_id and str(env_id).startswith(prefix):
            return goal
    return None


def goal_events(goal: str | None) -> frozenset[str]:
    """The events that make progress towards ``goal`` (:data:`GOAL_KEYWORDS` on its positive clause);
    :data:`PROGRESS_EVENTS` (any progress) when there is no goal or none of its words is known."""
    if not goal:
        return PROGRESS_EVENTS
    positive = _NEGATION.split(goal, maxsplit=1)[0].lower()
    events = {e for pattern, evs in GOAL_KEYWORDS if pattern.search(positive) for e in evs}
    return frozenset(events) if events else PROGRESS_EVENTS


def message_events(message: str) -> list[str]:
    """Events named by a NetHack message (the regexes run only when a keyword is present)."""
    if not message or not _KEYWORDS.search(message):
        return []
    return [event for _, pattern, event in MESSAGE_EVENTS if pattern.search(message)]


class NetHackOracle(Oracle):
    """A small NetHack/MiniHack goal vocabulary; feasibility from coarse map facts."""

    family = "nethack"
    goals = ["find the staircase", "descend the stairs", "open a door", "pick up an item",
             "kill a monster", "collect gold", "eat food"]
    prerequisites = {"find the staircase": [], "descend the stairs": ["find the staircase"],
                     "open a door": [], "pick up an item": [], "kill a monster": [],
                     "collect gold": [], "eat food": []}
    _needs = {"descend the stairs": "staircase down", "open a door": "closed door",
              "pick up an item": "item", "kill a monster": "monster"}

    def feasible(self, info: dict) -> set[str]:
        """From the map facts in ``info["visible"]`` (env option ``oracle_facts``), else the caption."""
        if "visible" not in info:
            return self.feasible_from_caption(info.get("caption", ""))
        visible = set(info.get("visible") or ())
        out = {g for g, need in self._needs.items() if need in visible}
        if "staircase down" not in visible:
            out.add("find the staircase")
        out.add("eat food")  # the starting inventory always holds food
        return out

    # --- message ground truth: how much progress towards the goal a message reports ---------------------
    def message_progress(self, message: str, goal: str | None = None) -> int:
        """How many events serving ``goal`` (:func:`goal_events`) the message reports; without a goal any
        progress event counts (:data:`PROGRESS_EVENTS`: key or item picked up, door opened, monster killed,
        level gained, staircase found, food eaten, gold picked up).  With the reference's Score goal
        ("maximize the score ... killing monsters, collecting gold or going down the stairs") that is a kill,
        a level gain, gold picked up or heard ("You hear someone counting money."), a staircase down; a door
        opened or an item picked up is not."""
        wanted = goal_events(goal)
        return sum(event in wanted for event in message_events(message))

    def feasible_from_caption(self, caption: str) -> set[str]:
        text = caption.lower()
        visible = []
        if "staircase down" in text:
            visible.append("staircase down")
        if "door" in text and "closed" in text:
            visible.append("closed door")
        if "you see here" in text or "there are several objects here" in text:
            visible.append("item")
        if re.search(r"\b(hits|bites|misses|attacks)\b", text):
            visible.append("monster")
        return self.feasible({"visible": visible})
