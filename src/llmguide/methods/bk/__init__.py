"""BK (Zhang et al. 2024): LM background knowledge as potential-based reward shaping.

Three steps, each a CLI verb that reads and writes run directories (:mod:`.recipe`):
``collect`` (an exploring agent's episodes, :mod:`llmguide.pipelines.collect`) → ``label`` (the LM turns
the dataset into a potential, :mod:`.label`) → ``train`` (PPO with ``F = γ(1−terminated)Φ(s') − Φ(s)``,
Φ optionally normalised by the running std of its discounted sum, as the reference; :mod:`.common`).
Three potentials:

- **BK-Code** (:mod:`.code`): the LM writes ``def potential(obs, caption)`` in a write / run / fix /
  improve loop; the code only ever runs in :class:`llmguide.sandbox.Sandbox`.
- **BK-Pref** (:mod:`.pref`): the LM ranks pairs of segments; a Bradley-Terry model
  ``score(segment) = sum_t phi(s_t)`` is fitted and ``Φ(s) = phi(s)``.
- **BK-Goal** (:mod:`.goal`): the LM grows a goal list; ``Φ(s')`` is the similarity of the transition
  text to the retrieved goals above a calibrated threshold.

With ``llm=oracle`` the questions are answered by ground truth (:mod:`.oracle`: BabyAI in :mod:`.babyai`,
Crafter/Craftax in :mod:`.crafter`), for the task's mission, or for ``llm.target``'s (wrong knowledge).
A labelling step that yields nothing usable raises :class:`LabelingFailed`; there is no Φ ≡ 0 stand-in.
This package re-exports the parts the steps use.
"""

from llmguide.methods.bk.code import (  # noqa: F401
    BABYAI_NOTES,
    BATCH_FUNCTION,
    CRAFTER_NOTES,
    ZERO_PROGRAM,
    CodePotential,
    CodeResult,
    check_batch_function,
    describe_obs,
    env_notes,
    extract_code,
    sample_states,
    stack_states,
    write_potential_code,
)
from llmguide.methods.bk.common import (  # noqa: F401
    LabelingFailed,
    TransitionPotential,
    TransitionPotentialShaping,
    action_name,
    flat_features,
    transition_text,
    window_text,
    write_failure,
)
from llmguide.methods.bk.goal import (  # noqa: F401
    GoalPotential,
    build_goal_library,
    calibrate_threshold,
    dataset_transition_texts,
)
from llmguide.methods.bk.pref import (  # noqa: F401
    PREF_LABEL,
    PreferenceNet,
    PreferencePotential,
    Segment,
    fit_preference_model,
    label_preferences,
    read_labels,
    sample_segment,
    segment_text,
)
