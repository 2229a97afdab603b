"""The scripted Crafter / Craftax-Classic expert (``agent.policy=expert``, ``policy=expert`` for datasets):
:mod:`.agent` acts, over a map memory and path finding (:mod:`.nav`), a planner over the requirement tree
(:mod:`.plan`), skills (:mod:`.skills`), survival rules (:mod:`.survival`) and a shelter for the night
(:mod:`.shelter`)."""

from llmguide.envs.crafter.expert.agent import ExpertPolicy, ExpertSettings

__all__ = ["ExpertPolicy", "ExpertSettings"]
