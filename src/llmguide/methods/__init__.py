"""The paper methods, one package each, over the method-free kernel.

A method package holds everything of its paper: its recipe (a :class:`llmguide.pipelines.runner.Recipe`
subclass the Runner builds and drives), its reward modules, env wrappers and learner parts, its offline
steps (collect / label / codebook / pretrain: CLI verbs that read and write run directories), its
config rules (registered when the recipe module is imported) and its answers for the oracle LM
(answerers given to ``llm=oracle`` and the counterfactual LMs).  Its package docstring tells the
method's story once; its modules say only their part.

- :mod:`.ellm`: ELLM, LM-suggested goals.
- :mod:`.bk`: BK-Code / BK-Pref / BK-Goal, LM knowledge as potential-based shaping.
- :mod:`.oni`: ONI and Motif, LM labels of the agent's messages as intrinsic reward.
- :mod:`.glam`: GLAM (and NPAE, DRRN), the LM as the policy.
- :mod:`.ptgm`: PTGM, pretrained goal-conditioned skills and a goal prior.

Below them (imports point down): ``pipelines`` (the Runner, ``services``: the run's LM service,
``collect``: the exploring collector), then the kernel, which names no method: ``learners`` (PPO, DQN,
networks, callbacks), ``rewards`` (RND, ICM, APT, NovelD, shaping, normalisation), ``llm`` (backends,
cache, service, oracle, counterfactual LMs), ``envs`` (one registry of env families), ``sandbox`` and
``core``.  ``tests/test_layout.py`` checks the rules.

Adding a method: a folder here with a ``recipe.py`` (subclass ``Recipe``; override ``build`` for reward
modules and wrappers, ``steps`` for offline verbs), a ``conf/method/<name>.yaml`` naming the recipe as
``recipe: llmguide.methods.<name>.recipe:<Class>`` (the pipelines name no method's recipe), and tests
under ``tests/``.  A method that only adds a reward module needs no recipe: ``reward: package.module:Class``
in its YAML (the standard recipe builds it).

A method's own config options live in its package: ``<package>/conf/<group>/<option>.yaml`` (e.g. GLAM's and
DRRN's learner settings, ``glam/conf/agent/``, selected by ``method=glam`` / ``method=drrn`` or as ``agent=glam``).
Importing this package adds every such folder to the config search path (:func:`config_dirs`), after the
kernel's ``conf/``; the pipelines import it before composing any config.
"""

from __future__ import annotations

from pathlib import Path

from llmguide.core.config import add_config_dir


def config_dirs() -> list[Path]:
    """The method packages' own config folders (``<package>/conf/``), in package-name order."""
    here = Path(__file__).resolve().parent
    return [p / "conf" for p in sorted(here.iterdir()) if (p / "__init__.py").is_file() and (p / "conf").is_dir()]


for folder in config_dirs():
    add_config_dir(folder)
