"""The tests that ``make test`` leaves to ``make test-slow`` (CI runs both) for what they cost, each with why.

Each one is an end-to-end check that pays a fixed cost the rest of the suite does not: several ``llmguide``
processes (each imports torch, JAX and Hydra, ~4 s of CPU before it does anything), a Craftax step compiled for
an env count no other test uses, or a Hugging Face model loaded and run in float32. Their assertions are unchanged;
they are marked ``slow`` at collection (``conftest.py``), as if decorated with ``@pytest.mark.slow``. Seconds: the
test alone, one process, on an idle 2-core box (``tests/README.md`` has the whole table).
"""

from __future__ import annotations

COSTLY: dict[str, str] = {
    "test_harness.py::test_tiny_study_end_to_end":
        "37 s: a whole study, 3 arms x 2 seeds of real training runs, each its own process, then --resume",
    "test_harness.py::test_the_rate_matched_control_takes_the_oracle_arms_rate":
        "19 s: trains the oracle arm, then the control at its measured rate (two sweeps of processes)",
    "test_glam.py::test_npae_keeps_pretrained_embeddings_and_scores_with_action_heads":
        "36 s: loads Gemma 3 270M in float32 twice (pretrained and NPAE) and compares their embeddings",
    "test_glam.py::test_bc_only_run_then_eval_verb_runs_generalisation_tests":
        "21 s: a GLAM run through the CLI, then the eval verb's generalisation episodes with the LM policy",
    "test_glam.py::test_device_check_passes_bfloat16_and_catches_a_distribution_that_differs":
        "17 s: scores the action distribution of the LM policy in float32 and bfloat16",
    "test_reliability.py::test_a_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over":
        "32 s: five training processes (the holder, three refused writers, the one that takes the lock over)",
    "test_runner.py::test_sweep_runs_every_combination_reports_failures_and_prints_the_report_command":
        "30 s: a multirun sweep of four training processes and its report",
    "test_runner.py::test_eval_verb_rewrites_eval_json_from_the_checkpoint":
        "16-24 s per method: a training process, then the eval verb's process",
    "test_runner.py::test_a_new_reward_is_one_file_and_one_yaml_trained_through_the_cli":
        "12 s: a training process with a reward written in a temporary file",
    "test_envs_craftax.py::test_optimistic_reset_gives_fresh_worlds_and_sane_lengths":
        "26 s: compiles and steps Craftax with optimistic resets over many episodes",
    "test_envs_craftax.py::test_no_retrace_on_second_call_or_new_env_of_same_size":
        "18 s: compiles Craftax's step for two env sizes to count the traces",
    "test_seen_map.py::test_the_map_is_the_experts_own_memory_and_forgets_at_episode_end":
        "26 s: the scripted expert plays Craftax episodes to their end, its map checked at each step",
    "test_distractors.py::test_the_do_nothing_action_shows_a_new_sight_and_nothing_else_changes":
        "24 s on Craftax: compiles the distractor variant of the step and compares every state field",
    "test_bk_craftax.py::test_one_batched_sandbox_call_gives_the_per_state_potentials":
        "22 s: compiles an 8-env Craftax for its rollout, then runs the program in the sandbox per state",
    "test_answer_table.py::test_answers_verb_builds_a_table_from_a_collection_and_a_run_reads_only_it":
        "16 s: a collection run, the answers verb and a training run, each its own process",
    "test_scripted_agent.py::test_the_expert_plays_a_sparse_task_through_the_runner_and_random_does_not":
        "16 s: two Craftax runs of the expert and of a random policy to a sparse achievement",
    "test_llm_backends.py::test_hf_cached_score_equals_naive_and_gradients_flow":
        "15 s: Gemma 3 270M through transformers, cached and uncached scoring, with a backward pass",
    "test_llm_backends.py::test_http_score_matches_embedded":
        "14 s: starts a llama.cpp server and scores the same prompts through it and in-process",
    "test_stop_signals.py::test_ctrl_c_to_a_sweep_is_not_retried_and_starts_no_further_run":
        "14 s: a sweep launcher and its training processes, stopped by a real SIGINT",
    "test_stop_signals.py::test_sigterm_to_a_sweep_stops_every_run_and_leaves_no_orphan":
        "14 s: a sweep launcher and its training processes, stopped by a real SIGTERM",
    "test_stop_signals.py::test_one_ctrl_c_with_async_workers_saves_a_checkpoint_without_worker_tracebacks":
        "13 s: a training process with async env worker processes, stopped by a real SIGINT",
    "test_eval_limits.py::test_lm_guided_evaluation_against_a_slow_server_takes_env_time":
        "14 s: an evaluation that waits on a deliberately slow LM server",
    "test_ellm.py::test_guided_exploration_with_a_pretrained_dqn":
        "12 s: pretrains a DQN, then ELLM-guided exploration from it",
    "test_lm_freshness.py::test_embedded_batched_scoring_matches_one_at_a_time_and_reuses_the_prefix":
        "scores every candidate with the embedded LM twice, batched and one at a time",
}


def costly_reason(nodeid: str) -> str | None:
    """Why the test ``nodeid`` (``tests/test_x.py::test_y[param]``) is left to ``make test-slow``, or None."""
    base = nodeid.split("[", 1)[0].removeprefix("tests/")
    return COSTLY.get(base)
