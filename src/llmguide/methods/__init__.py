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

Each package is a plugin, installed as any other method would be: an entry point of ``llmguide.methods`` in
``pyproject.toml`` names its recipe (``ellm = "llmguide.methods.ellm.recipe:ELLMRecipe"``), and the ``conf/``
beside it holds its options: ``conf/method/<name>.yaml`` (naming the recipe as ``module:Class``) and any other
group's (e.g. GLAM's and DRRN's learner settings, ``glam/conf/agent/``, selected by ``method=glam``).  The config
search finds those folders from the entry points (:mod:`llmguide.core.plugins`); nothing imports this package to
register them.  Adding a method: the README's "Adding a method" (``tests/plugin_pkg/`` is a whole one).
"""
