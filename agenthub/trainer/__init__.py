"""The learner side: the training run (`Trainer`) and its parts, advantage estimators,
off-policy correction and the policy loss.

Importing this package imports torch; the core and the environments never do.
"""

from agenthub.trainer._advantages import ESTIMATORS, advantages, filter_groups, gae, whiten
from agenthub.trainer._batch import TrainBatch, token_logprobs
from agenthub.trainer._control import RunSummary, StopReason
from agenthub.trainer._critic import CriticConfig
from agenthub.trainer._importance import IMPORTANCE_MODES, ImportanceWeights, importance_weights
from agenthub.trainer._learner import Learner, LearnerConfig
from agenthub.trainer._loop import Trainer
from agenthub.trainer._loss import KL_ESTIMATORS, PolicyLoss, kl_divergence, policy_loss
from agenthub.trainer._metrics import StepReport
from agenthub.trainer._queue import TrajectoryQueue
from agenthub.trainer._rundir import CheckpointState, RunDirectory

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
