"""WordBonus, a toy method in a package of its own: PPO paid ``bonus`` on every step whose caption holds
``method.word``; ``llmguide answers`` asks an LM for a hint per caption (``prompts/hint.txt``); ``llmguide tally``
counts a dataset's caption words; ``llmguide collect`` plays random actions into a dataset.  Its recipe is
``recipe.py``, its options ``conf/method/wordbonus.yaml``; ``pyproject.toml``'s entry point is all llmguide needs."""
