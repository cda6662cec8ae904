"""Wrappers add behaviour to any environment without changing it."""

from agenthub.wrappers._base import Wrapper
from agenthub.wrappers._recorder import EpisodeRecord, Recorder, StepRecord
from agenthub.wrappers._turn_limit import TurnLimit

__all__ = ["EpisodeRecord", "Recorder", "StepRecord", "TurnLimit", "Wrapper"]
