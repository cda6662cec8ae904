"""A model directory's tokenizer, read without transformers and so without torch.

The `tokenizers` library loads `tokenizer.json` (the file a Hugging Face fast tokenizer is
saved as) and jinja2 renders the chat template in the sandbox transformers renders it in.
`TokenizerFile` answers what `ChatTokenizer` asks of a Hugging Face tokenizer, so the view tells
token kinds apart and decodes each token as the REPL does, in a server a tenth the size of one
that imports transformers."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["TokenizerFile", "TokenizerFileError"]

_NAMED = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_EXTRA = ("additional_special_tokens", "extra_special_tokens")


class TokenizerFileError(ValueError):
    """A model directory whose tokenizer cannot be read without transformers."""


class TokenizerFile:
    """The tokenizer saved in a model directory: `chat_template`, `eos_token_id`,
    `all_special_ids`, `apply_chat_template(..., tokenize=False)`, `encode`, `decode` and
    `batch_decode` as a transformers fast tokenizer has them."""

    def __init__(self, backend: Any, config: Mapping[str, Any], chat_template: str | None) -> None:
        self.backend = backend
        self.chat_template = chat_template
        named = {key: _content(config.get(key)) for key in _NAMED}
        self.special_tokens_map = {k: v for k, v in named.items() if v is not None}
        extra = [_content(t) for key in _EXTRA for t in _listed(config.get(key))]
        special = dict.fromkeys([*self.special_tokens_map.values(), *filter(None, extra)])
        self.all_special_ids = [i for t in special if (i := backend.token_to_id(t)) is not None]
        eos = named["eos_token"]
        self.eos_token_id = None if eos is None else backend.token_to_id(eos)
        # transformers 5 leaves BPE output as it is: the clean-up is for WordPiece's spaces.
        bpe = type(backend.model).__name__ == "BPE"
        self._clean_up = bool(config.get("clean_up_tokenization_spaces")) and not bpe

    @classmethod
    def load(cls, directory: Path) -> TokenizerFile:
        """The tokenizer in `directory`; `TokenizerFileError` when it has no `tokenizer.json`
        or a file there does not read, ImportError without the `tokenizers` library."""
        from tokenizers import Tokenizer

        path = directory / "tokenizer.json"
        if not path.is_file():
            raise TokenizerFileError(
                f"{directory} has no tokenizer.json (only a slow tokenizer, which needs "
                "transformers); save the model's tokenizer with a fast tokenizer to decode tokens"
            )
        config: dict[str, Any] = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            if (directory / name).is_file():
                config.update(_read_json(directory / name))
        try:
            backend = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust library raises its own untyped Exception
            raise TokenizerFileError(f"{path} does not load: {exc}") from exc
        return cls(backend, config, _chat_template(directory, config))

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
    ) -> str:
        if tokenize or self.chat_template is None:
            raise ValueError("only rendering a chat template to text is supported here")
        return str(
            _compiled(self.chat_template).render(
                **self.special_tokens_map,
                messages=list(conversation),
                tools=None if tools is None else list(tools),
                documents=None,
                add_generation_prompt=add_generation_prompt,
            )
        )

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return _clean_up(text) if self._clean_up else str(text)

    def batch_decode(
        self, batch: Iterable[Sequence[int]], *, skip_special_tokens: bool = False
    ) -> list[str]:
        texts = self.backend.decode_batch(
            [list(ids) for ids in batch], skip_special_tokens=skip_special_tokens
        )
        return [_clean_up(t) if self._clean_up else str(t) for t in texts]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerFileError(f"{path} does not read as JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TokenizerFileError(f"{path} holds {type(value).__name__}, not a JSON object")
    return value


def _chat_template(directory: Path, config: Mapping[str, Any]) -> str | None:
    """The template as transformers picks it: `chat_template.jinja` first, then the config's
    (a list of named templates gives its `default`)."""
    file = directory / "chat_template.jinja"
    if file.is_file():
        return file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def _content(token: Any) -> str | None:
    """A special token as the config writes it: a string, or an AddedToken's dict."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _listed(tokens: Any) -> list[Any]:
    if isinstance(tokens, dict):  # transformers 5's named extra tokens
        return list(tokens.values())
    return list(tokens) if isinstance(tokens, list) else []


def _clean_up(text: str) -> str:
    """transformers' `clean_up_tokenization`: no space before punctuation and contractions."""
    for spaced, joined in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(spaced, joined)
    return text


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    """The template in transformers' environment: sandboxed, trimmed blocks, loop controls,
    a `tojson` that does not escape HTML, `raise_exception`, `strftime_now`, and a
    `{% generation %}` block that renders its body."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = frozenset({"generation"})  # type: ignore[assignment]  # jinja2 types it a set

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
