"""ELLM (Du, Watkins et al. 2023): an LM suggests goals from a caption of the state; the agent is paid
for successful actions that match them.

The story, in the order a run meets it:

1. :mod:`.signature` reduces a caption to what the prompt shows; a new signature is a new LM question.
2. :mod:`.suggester` asks the run's LM service for goals (``generate`` bullets or ``score`` over a closed
   vocabulary: the 22 achievement goals, or all 139 action strings with ``method.vocabulary=actions``),
   never blocking the learner; :mod:`.warm_start` preloads answers earlier runs cached.
3. :mod:`.reward` pays a goal when the transition's event (or executed action) matches it, once per episode.
4. :mod:`.wrapper` puts suggestions into ``info`` and the goal embedding into the observation.
5. :mod:`.recipe` assembles it for the Runner (pretrain, finetune or guided, :mod:`.transfer`).

Knowledge controls run unchanged: ``llm=random|shuffled|constant`` (:mod:`llmguide.llm.backends.counterfactual`)
and ``method=ellm_all_goals``.
"""
