"""Core layer: config, run directory, metrics, checkpoints, seeding, errors."""
