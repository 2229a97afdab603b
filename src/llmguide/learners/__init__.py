"""Learners on one base (``base``; on-policy: ``on_policy``): PPO (``ppo``), dueling double DQN (``dqn``),
evaluation; networks over Dict observations.

Importing this package registers validation rules for the ``agent.*`` keys of conf/agent/*.yaml.
"""

from llmguide.core.config import in_range, non_negative, one_of, positive, register_rule

for _key, _rule in {
    "agent.hidden": positive, "agent.adam_eps": positive, "agent.ent_coef": non_negative,
    "agent.vf_coef": non_negative, "agent.max_grad_norm": positive, "agent.int_gamma": in_range(0.0, 1.0),
    "agent.recurrent": one_of(None, "gru", "lstm"), "agent.image_encoder": one_of("cnn", "flat"),
    "agent.torch_threads": non_negative,
    "agent.num_steps": positive, "agent.num_minibatches": positive, "agent.update_epochs": non_negative,
    "agent.n_step": positive, "agent.buffer_size": positive, "agent.batch_size": positive,
    "agent.learning_starts": non_negative, "agent.train_every": positive,
    "agent.target_update_every": positive, "agent.eps_start": in_range(0.0, 1.0),
    "agent.eps_end": in_range(0.0, 1.0), "agent.eps_decay_steps": non_negative,
    "agent.eval_eps": in_range(0.0, 1.0), "agent.chunk_steps": positive, "agent.log_interval": positive,
}.items():
    register_rule(_key, _rule)
