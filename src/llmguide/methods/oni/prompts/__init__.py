"""ONI's and Motif's labelling prompts: the NetHack ones as files in this folder (``oni_label*``,
``motif_pref*``), and those for Crafter and Craftax-Classic (their message line,
:mod:`llmguide.envs.crafter.messages`) below.

They follow the NetHack templates' conventions (a ``Message:`` line; ``A:`` / ``B:`` lines; ``Good:`` for score
mode, ``<answer>`` for generate mode) so the oracle and the knowledge controls answer them unchanged, and give
ONI's task-agnostic goal (make progress in the game), never the task; each has a ``*_goal`` variant whose
``Goal:`` line carries ``method.goal`` when one is set.  :func:`template` looks a name up here first, then in
this folder's files.
"""

from __future__ import annotations

from pathlib import Path

from llmguide.llm.prompts import PromptTemplate, load_template, parse_template

PROMPTS = Path(__file__).parent

_PROGRESS = ("make progress in the game: gather resources (wood, stone, coal, iron, diamonds), place a table and a "
             "furnace, craft tools, eat, drink, sleep and survive.")
_GOOD = ("A message is good if it shows progress: collecting a material, making a tool, placing something, eating, "
         "drinking, defeating a monster, waking up. It is bad if nothing happens, the player is hurt, or it only "
         "describes what the player sees.")
_SHOTS = """Message: You collect wood. You get 1 wood.
Good: yes

Message: Nothing happens.
Good: no

Message: You make a wood pickaxe. You get 1 wood pickaxe. You lose 1 wood.
Good: yes

Message: You see a cow and water.
Good: no

Message: You drink water.
Good: yes

Message: You are hit by a zombie. You feel hurt.
Good: no

Message: ${message}
Good:"""
_JUDGE = "You are a helpful and honest judge of good gameplay and progress in Crafter, a 2D survival and crafting game."
_LABEL_EXAMPLES = """Message: "You collect stone. You get 1 stone."
<answer>yes</answer>

Message: "Nothing happens. You see a skeleton."
<answer>no</answer>

Message: "${message}"
<answer>"""
_PAIR = """Below are two short gameplay descriptions, A and B. Decide which one shows more progress towards the goal.
Reply with one short sentence of analysis, then the answer inside <answer></answer>: A > B, B > A, or A = B if \
neither is better.

A: "${a}"
B: "${b}"
"""


def _text(description: str, body: str) -> str:
    return f"# version: 1\n# description: {description}\n\n{body}\n"


_BODIES = {
    "crafter_label_short": ("ONI helpfulness label of one Crafter/Craftax message for yes/no log-prob scoring "
                            "(score candidates \" yes\" / \" no\" after \"Good:\")",
                            f"Classify messages from the game Crafter. The goal: {_PROGRESS} {_GOOD}\n\n{_SHOTS}"),
    "crafter_label_short_goal": ("ONI helpfulness label of one Crafter/Craftax message towards a goal (${goal}), "
                                 "yes/no log-prob scoring",
                                 "Classify messages from the game Crafter. A message is good if it shows progress "
                                 "towards the goal. It is bad if nothing happens, the player is hurt, it only "
                                 "describes what the player sees, or it is progress that does not serve the goal.\n"
                                 f"Goal: ${{goal}}\n\n{_SHOTS}"),
    "crafter_label": ("ONI yes/no helpfulness label of one Crafter/Craftax message, answer in <answer></answer>",
                      f"{_JUDGE}\nThe goal: {_PROGRESS}\nIs the status described by the message below helpful for "
                      "making progress towards the goal (not merely informative)?\nAnswer yes or no inside "
                      f"<answer></answer>.\n\n{_LABEL_EXAMPLES}"),
    "crafter_label_goal": ("ONI yes/no helpfulness label of one Crafter/Craftax message towards a goal, answer in "
                           "<answer></answer>",
                           f"{_JUDGE}\nGoal: ${{goal}}\nIs the status described by the message below helpful for "
                           "making progress towards the goal (not merely informative)?\nAnswer yes or no inside "
                           f"<answer></answer>.\n\n{_LABEL_EXAMPLES}"),
    "crafter_pref": ("Motif/ONI-ranking preference between two Crafter/Craftax messages; answer \"A > B\", "
                     "\"B > A\" or \"A = B\" in <answer></answer>",
                     f"{_JUDGE}\nThe goal: {_PROGRESS}\n{_PAIR}"),
    "crafter_pref_goal": ("Motif/ONI-ranking preference between two Crafter/Craftax messages towards a goal",
                          f"{_JUDGE}\nGoal: ${{goal}}\n{_PAIR}"),
}
# any other env (your own Gymnasium env, env=gym): its caption is the message; nothing is known of the game but
# the goal, so these templates need one (method.goal)
_ANY_JUDGE = "You are a helpful and honest judge of progress in a game."
_BODIES.update({
    "any_label_short": ("ONI helpfulness label of one message from any game towards a goal (${goal}), yes/no "
                        "log-prob scoring", "Classify messages from a game. A message is good if it shows progress "
                        "towards the goal. It is bad if nothing happens, something fails, or it only describes "
                        "what is there.\nGoal: ${goal}\n\nMessage: ${message}\nGood:"),
    "any_label": ("ONI yes/no helpfulness label of one message from any game towards a goal, answer in "
                  "<answer></answer>",
                  f"{_ANY_JUDGE}\nGoal: ${{goal}}\nIs the status described by the message below helpful for "
                  "making progress towards the goal (not merely informative)?\nAnswer yes or no inside "
                  "<answer></answer>.\n\nMessage: \"${message}\"\n<answer>"),
    "any_pref": ("Motif/ONI-ranking preference between two messages from any game towards a goal",
                 f"{_ANY_JUDGE}\nGoal: ${{goal}}\n{_PAIR}"),
})
TEMPLATES: dict[str, PromptTemplate] = {name: parse_template(name, _text(d, b)) for name, (d, b) in _BODIES.items()}
# the templates a family's labeller gets when method.template is null: (label score, label generate, pair)
FAMILY_TEMPLATES = {"crafter": ("crafter_label_short", "crafter_label", "crafter_pref"),
                    "craftax": ("crafter_label_short", "crafter_label", "crafter_pref"),
                    "gym": ("any_label_short", "any_label", "any_pref")}


def template(name: str | PromptTemplate) -> PromptTemplate:
    """The template ``name``: ONI's Crafter ones (:data:`TEMPLATES`), a file of this folder, or a file by path."""
    if isinstance(name, PromptTemplate):
        return name
    return TEMPLATES[name] if name in TEMPLATES else load_template(name, PROMPTS)


def has_template(name: str) -> bool:
    return name in TEMPLATES
