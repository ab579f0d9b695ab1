"""What stops a training run on its own evidence (importable without torch, for the CLI)."""


class TrainingStopped(RuntimeError):
    """A training run that cannot go on, said in a sentence (the CLI prints it, not a traceback)."""


class RolloutErrors(TrainingStopped):
    """A training step whose negotiations errored (at least ``max_rollout_errors`` of them): nothing to learn from."""


class TrainingFailed(TrainingStopped):
    """A training run in processes of its own (several ranks) that exited with an error."""
