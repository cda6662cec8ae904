"""Policy side: inference engines, token-in-token-out sessions, the episode runner and the
embedded default model. Heavy libraries (torch, transformers, vLLM) are imported only inside the
functions that need them."""

__all__: list[str] = []
