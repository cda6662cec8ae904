"""The learner side: the training run (`Trainer`) and its parts, advantage estimators,
off-policy correction and the policy loss.

The names below are imported when first used: a process that needs one part (the trajectory
queue's actor, the admission actor) imports that part alone, not torch with the rest. The core
and the environments never import torch.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from agenthub.trainer._advantages import ESTIMATORS, advantages, filter_groups, gae, whiten
    from agenthub.trainer._batch import TrainBatch, token_logprobs
    from agenthub.trainer._control import RunSummary, StopReason
    from agenthub.trainer._importance import IMPORTANCE_MODES, ImportanceWeights, importance_weights
    from agenthub.trainer._learner import Learner
    from agenthub.trainer._learner_config import CriticConfig, LearnerConfig
    from agenthub.trainer._loop import Trainer
    from agenthub.trainer._loss import KL_ESTIMATORS, PolicyLoss, kl_divergence, policy_loss
    from agenthub.trainer._metrics import StepReport
    from agenthub.trainer._queue import TrajectoryQueue
    from agenthub.trainer._rundir import CheckpointState, RunDirectory

_WHERE = {
    "ESTIMATORS": "_advantages",
    "advantages": "_advantages",
    "filter_groups": "_advantages",
    "gae": "_advantages",
    "whiten": "_advantages",
    "TrainBatch": "_batch",
    "token_logprobs": "_batch",
    "RunSummary": "_control",
    "StopReason": "_control",
    "CriticConfig": "_learner_config",
    "IMPORTANCE_MODES": "_importance",
    "ImportanceWeights": "_importance",
    "importance_weights": "_importance",
    "Learner": "_learner",
    "LearnerConfig": "_learner_config",
    "Trainer": "_loop",
    "KL_ESTIMATORS": "_loss",
    "PolicyLoss": "_loss",
    "kl_divergence": "_loss",
    "policy_loss": "_loss",
    "StepReport": "_metrics",
    "TrajectoryQueue": "_queue",
    "CheckpointState": "_rundir",
    "RunDirectory": "_rundir",
}


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agenthub.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agenthub.trainer.{module}"), name)


__all__ = [
    "ESTIMATORS",
    "IMPORTANCE_MODES",
    "KL_ESTIMATORS",
    "CheckpointState",
    "CriticConfig",
    "ImportanceWeights",
    "Learner",
    "LearnerConfig",
    "PolicyLoss",
    "RunDirectory",
    "RunSummary",
    "StepReport",
    "StopReason",
    "TrainBatch",
    "Trainer",
    "TrajectoryQueue",
    "advantages",
    "filter_groups",
    "gae",
    "importance_weights",
    "kl_divergence",
    "policy_loss",
    "token_logprobs",
    "whiten",
]
