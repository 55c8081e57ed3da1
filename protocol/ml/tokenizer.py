"""Tokenizers: a character tokenizer made locally (the default), or a local Hugging Face one.

The character tokenizer's whole definition is its alphabet; it travels in the model config under
`crucible_tokenizer`, so a checkpoint manifest alone rebuilds it. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import ConfigError

if TYPE_CHECKING:
    from protocol.ml.envs.base import Problem

# Digits, operators, letters and the separators our environments use.
DEFAULT_ALPHABET = "0123456789+-*=:,. abcdefghijklmnopqrstuvwxyz"
PAD, BOS, EOS = 0, 1, 2
SPECIALS = 3


class Tokenizer(Protocol):
    """What generation, scoring and training need of a tokenizer."""

    pad_id: int
    bos_id: int | None
    eos_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, special tokens dropped."""
        ...

    def config(self) -> dict[str, Any]:
        """What the model config records to rebuild this tokenizer."""
        ...

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """A prompt's ids as the model sees them: through the chat template when there is one."""
        ...


class CharTokenizer:
    """One token per character of a fixed alphabet, after three specials (pad, bos, eos)."""

    pad_id = PAD
    bos_id: int | None = BOS
    eos_id = EOS

    def __init__(self, alphabet: str = DEFAULT_ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise ConfigError("a tokenizer alphabet must be non-empty with distinct characters")
        self.alphabet = alphabet
        self._ids = {character: SPECIALS + index for index, character in enumerate(alphabet)}
        self.vocab_size = SPECIALS + len(alphabet)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[character] for character in text]
        except KeyError as error:
            raise ConfigError(f"character {error.args[0]!r} is not in the tokenizer's alphabet") from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.alphabet[i - SPECIALS] for i in ids if SPECIALS <= i < self.vocab_size)

    def config(self) -> dict[str, Any]:
        return {"kind": "char", "alphabet": self.alphabet}

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """No chat template: the start token, then the user's text (a system message has no place in
        a model that only ever saw problems)."""
        start = [self.bos_id] if self.bos_id is not None else []
        return start + self.encode(messages[-1]["content"])


class HuggingFaceTokenizer:
    """A tokenizer loaded from a local folder with `transformers` (never from the hub)."""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        try:
            self._inner = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as error:
            raise ConfigError(f"no usable tokenizer in {folder}: {str(error).splitlines()[0]}") from None
        if self._inner.eos_token_id is None:
            raise ConfigError(f"the tokenizer in {folder} has no end-of-sequence token")
        self.eos_id = int(self._inner.eos_token_id)
        self.pad_id = int(self._inner.pad_token_id if self._inner.pad_token_id is not None else self.eos_id)
        self.bos_id = None if self._inner.bos_token_id is None else int(self._inner.bos_token_id)
        self.vocab_size = len(self._inner)

    def encode(self, text: str) -> list[int]:
        return list(self._inner.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self._inner.decode(ids, skip_special_tokens=True))

    def config(self) -> dict[str, Any]:
        return {"kind": "huggingface"}

    @property
    def chat_template(self) -> str | None:
        """The Jinja chat template, or None for a tokenizer without one (a base model's)."""
        template = getattr(self._inner, "chat_template", None)
        return template if isinstance(template, str) and template else None

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Through the chat template (with the assistant's turn opened) when the tokenizer has one;
        otherwise the start token, then the messages' texts separated by a blank line."""
        if self.chat_template is not None:
            encoded: Any = self._inner.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
            return [int(token) for token in ids]
        start = [self.bos_id] if self.bos_id is not None else []
        return start + self.encode("\n\n".join(message["content"] for message in messages))


def tokenizer_from_config(config: dict[str, Any] | None, folder: Path | None = None) -> Tokenizer:
    """Rebuilds the tokenizer a model config records, or loads the one beside a model folder."""
    recorded = (config or {}).get("crucible_tokenizer")
    if isinstance(recorded, dict) and recorded.get("kind") == "char":
        return CharTokenizer(str(recorded.get("alphabet", "")))
    if folder is not None:
        return HuggingFaceTokenizer(folder)
    raise ConfigError("the model records no tokenizer Crucible can rebuild (publish it from a folder with one)")


def prompt_ids(tokenizer: Tokenizer, problem: Problem) -> list[int]:
    """A problem's prompt as the model sees it: its messages through the tokenizer's chat template,
    or, without one, the start token (if any) and the text."""
    return tokenizer.encode_prompt(problem.messages())


def completion_text(tokenizer: Tokenizer, ids: list[int]) -> str:
    """A completion's text: the tokens before the end token."""
    if tokenizer.eos_id in ids:
        ids = ids[: ids.index(tokenizer.eos_id)]
    return tokenizer.decode(ids)
