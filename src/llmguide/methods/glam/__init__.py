"""GLAM (Carta et al. 2023): the language model is the policy.  It scores the action strings given a
prompt of the recent observations (:mod:`.policy`), and PPO fine-tunes it with a value head
(:mod:`.learner`); behavioural cloning on bot demonstrations and GLAM's generalisation tests
(:mod:`.generalisation`) come with it.  :mod:`.recipe` is GLAM (and NPAE: the same model with random
weights); :mod:`.drrn` / :mod:`.drrn_recipe` is the DRRN baseline.  What the three text-policy recipes
share is :mod:`.text_policy`.
"""
