"""The policy side: inference engines, token-in-token-out sessions and the episode runner.

An `EpisodeRunner` plays episodes of one environment against one `InferenceEngine` (vLLM in
this process, an OpenAI-compatible server, or a fake), many at once, and returns each episode as
a `Trajectory` holding exactly the tokens that were sampled. `OpenAIEndpoint` puts an
OpenAI-compatible server in front of an engine, so agent programs with their own loop are
played (the `agent_program` env) with every call's tokens recorded as sampled. `evaluate`
measures a model's reward on an environment's tasks, as `agenthub eval` and the trainer's
held-out evaluation do.
Nothing here imports torch, vLLM or transformers until an engine or tokenizer is built.
"""

from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig, Timeouts
from agenthub.agents._endpoint_episode import EndpointCall, EndpointEpisode
from agenthub.agents._engine import FinishReason, Generation, InferenceEngine, SamplingParams
from agenthub.agents._errors import ChatTemplateError, EngineError
from agenthub.agents._eval_summary import EvalSummary
from agenthub.agents._evaluate import EvalConfig, EvalRun, aevaluate, evaluate
from agenthub.agents._fake import FakeEngine
from agenthub.agents._openai import OpenAIEngine
from agenthub.agents._openai_endpoint import OpenAIEndpoint
from agenthub.agents._runner import EpisodeRunner, Scorer
from agenthub.agents._session import Session
from agenthub.agents._trajectory import EpisodeError, ErrorCause, Timings, Trajectory
from agenthub.agents._vllm import VLLMEngine

__all__ = [
    "ChatTemplateError",
    "ChatTokenizer",
    "EndpointCall",
    "EndpointEpisode",
    "EngineError",
    "EvalConfig",
    "EvalRun",
    "EvalSummary",
    "EpisodeError",
    "EpisodeRunner",
    "ErrorCause",
    "FakeEngine",
    "FinishReason",
    "Generation",
    "InferenceEngine",
    "OpenAIEndpoint",
    "OpenAIEngine",
    "RolloutConfig",
    "SamplingParams",
    "Scorer",
    "Session",
    "Timeouts",
    "Timings",
    "Trajectory",
    "VLLMEngine",
    "aevaluate",
    "evaluate",
]
