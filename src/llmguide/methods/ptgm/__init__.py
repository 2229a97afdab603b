"""PTGM (Yuan et al. 2024): pretrain goal-conditioned skills on a dataset of play, then learn a
high-level policy over a small codebook of goals with a KL term towards a learned goal prior.

Offline steps (:mod:`.steps`): ``collect`` (the BabyAI bot, or an exploring agent on Crafter/Craftax) →
``codebook`` (hindsight goals, :mod:`.goals`, clustered by KMeans) → ``pretrain`` (the goal-conditioned
low level by behavioural cloning and the goal priors, :mod:`.models`).  ``train`` (:mod:`.recipe`) runs
PPO over the codebook's options (:mod:`.options`; on a batched env each env runs its own option,
:mod:`.smdp`) with the KL-to-prior reward.
"""
