"""Errors raised by the policy side."""

from __future__ import annotations

from agenthub._errors import AgentHubError

__all__ = ["ChatTemplateError", "EngineError"]


class EngineError(AgentHubError):
    """An inference engine could not produce a generation (server down, bad answer, dead
    engine). The episode runner records it on the trajectory as `generation_error`."""


class ChatTemplateError(AgentHubError):
    """The tokenizer's chat template cannot be used token-in-token-out (it has none, or it
    renders earlier turns differently once a new message is added)."""
