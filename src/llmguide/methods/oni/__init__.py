"""ONI (Zheng et al. 2024) and Motif (Klissarov et al. 2023): an LM labels the agent's messages, and the
labels become an intrinsic reward.

- ONI labels online and asynchronously (:mod:`.annotator`, through the run's LM service, never blocking
  the learner) and distils the labels (:mod:`.reward`) into a retrieval table (``oni_retrieval``), a
  message classifier (``oni_classification``, :mod:`.charcnn`, trained in the background by
  :mod:`.trainer`) or a ranking model (``oni_ranking``, :mod:`.ranking`); the reward is counted per
  message (episodic or global counts).  :mod:`.recipe` assembles it for the Runner.
- Motif labels pairs of messages offline (``collect`` → ``label`` → ``train``, :mod:`.motif_recipe`)
  and fits a Bradley-Terry reward model on them (:mod:`.motif`).
- ``ellm_bow`` (:mod:`.bow`) is the ONI paper's no-LM baseline: bag-of-words similarity to the goal.

With ``llm=oracle`` the env's ground truth answers (:mod:`.oracle`: a message is helpful when it reports
progress towards the goal); ``llm=random|shuffled|constant`` are the knowledge controls.
"""
