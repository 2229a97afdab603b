"""BK (Zhang et al. 2024): LM background knowledge as potential-based reward shaping.

Three potentials, each built offline from a collected episode dataset (:mod:`llmguide.data`):

- **BK-Code** (:mod:`llmguide.methods.bk.code`): the LM writes ``def potential(obs, caption)`` in a
  write / run / fix / improve loop; the code only ever runs in :class:`llmguide.sandbox.Sandbox`.
- **BK-Pref** (:mod:`llmguide.methods.bk.pref`): the LM ranks pairs of segments; a Bradley-Terry
  model ``score(segment) = sum_t phi(s_t)`` is fitted and ``Φ(s) = phi(s)``.
- **BK-Goal** (:mod:`llmguide.methods.bk.goal`): the LM grows a goal list; ``Φ(s')`` is the
  similarity of the transition text to the retrieved goals above a calibrated threshold.

Shaping (:class:`llmguide.methods.bk.common.TransitionPotentialShaping`) is
``F = γ(1−terminated)Φ(s') − Φ(s)`` with Φ optionally normalised by the running std of its
discounted sum, as the reference.  A labelling step that yields nothing usable raises
:class:`LabelingFailed`; there is no Φ ≡ 0 stand-in.  This module re-exports all three.
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
