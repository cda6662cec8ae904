"""Recover the actions of a saved trajectory, one at a time, while replaying it."""

from __future__ import annotations

from agenthub.agents import ChatTokenizer, Generation, SamplingParams, Trajectory
from agenthub.repl._episode import Action, Episode, model_action, reply_end

__all__ = ["Replay"]


class Replay:
    """Walks a saved `Trajectory` in step with a fresh episode of the same task.

    A model's reply is a run of loss-mask-1 tokens and is replayed with its saved tokens and
    logprobs. A typed reply has mask 0 like the env's messages; it is found because the
    replayed episode produces the env's tokens itself: while the replay matches the saved
    tokens, the next reply starts where the replayed session ends and runs to where a sample
    would have ended (its stop string or stop token, as when it was typed). Once the env
    answers differently (another seed, a changed env), only the model's replies (the mask-1
    runs) can still be told apart, and only those are replayed.
    """

    def __init__(self, saved: Trajectory, chat: ChatTokenizer) -> None:
        self.saved = saved
        self.chat = chat
        self.aligned = True
        self.diverged_at: int | None = None
        self._pos = 0

    def next_action(self, episode: Episode, sampling: SamplingParams) -> Action | None:
        """The next saved reply, or None when there is none left; `sampling` (what the episode
        samples under) says where a typed one ends."""
        tokens, mask = self.saved.tokens, self.saved.loss_mask
        have = episode.session.tokens
        if self.aligned and tokens[: len(have)] == have:
            self._pos = len(have)
        elif self.aligned:
            self.aligned = False
            self.diverged_at = _first_difference(tokens, have)
        pos = self._pos
        if not self.aligned:
            while pos < len(tokens) and mask[pos] == 0:
                pos += 1
        if pos >= len(tokens):
            return None
        end = pos
        if mask[pos] == 1:
            while end < len(tokens) and mask[end] == 1:
                end += 1
        else:
            end = pos + (reply_end(self.chat, tokens[pos:], sampling) or len(tokens) - pos)
        self._pos = end
        ids = tuple(tokens[pos:end])
        stopped = reply_end(self.chat, ids, sampling) == len(ids)
        generation = Generation(
            ids,
            tuple(self.saved.logprobs[pos:end]),
            "stop" if stopped else "length",
            self.saved.policy_versions[pos],
        )
        if mask[pos] == 1:
            return model_action(self.chat, generation)
        return Action("human", self.chat.decode(generation.token_ids), generation)

    def compare(self, episode: Episode) -> int | None:
        """The first token where the replayed episode differs from the saved one, or None."""
        have, saved = episode.session.tokens, self.saved.tokens
        if have == saved and episode.session.loss_mask == self.saved.loss_mask:
            return None
        if have == saved:
            return _first_difference(self.saved.loss_mask, episode.session.loss_mask)
        return _first_difference(saved, have)

    def outcome(self, episode: Episode) -> str:
        """What the finished replay of `episode` found, in a line."""
        differs, saved = self.compare(episode), self.saved
        if differs is None:
            return (
                f"replay done: the trajectory matches the saved one token for token "
                f"({len(saved.tokens)} tokens, return {episode.total_return:g})"
            )
        return (
            f"replay done: the trajectory differs from the saved one from token {differs} "
            f"(saved return {saved.reward:g}, now {episode.total_return:g})"
        )


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
