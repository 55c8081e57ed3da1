"""reasoning-gym's procedural datasets as environments: `reasoning-gym/<dataset>`.

Each dataset is built once from (configuration, dataset seed, size); a problem is the dataset's item
at an index drawn from the seed stream, so trainers, validators and auditors regenerate the same
problem, and its reward is the dataset's own `score_answer` of the answer extracted from the
completion by the spec's rule. The held-out set is disjoint from training by the prompt hash
(`Environment.is_held_out`), as for every environment.
"""

from __future__ import annotations

import dataclasses
import json
import re
import string
from functools import cache, lru_cache
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from protocol.errors import ConfigError
from protocol.ml.envs.base import Environment, Problem
from protocol.ml.seeds import SeedStream

FAMILY = "reasoning-gym/"
# Items a dataset is drawn from: a tenth are held out, so well over the 500 held-out problems an
# honest evaluation needs, and every dataset of the library accepts it.
DEFAULT_SIZE = 10_000
# Set by the environment, not by a dataset configuration.
OWN_KEYS = ("seed", "size")
# Datasets whose item at an index is not the same in every process (reasoning-gym 0.1.25): they draw
# from the global `random` or iterate sets, whose order follows PYTHONHASHSEED. A validator would
# derive other prompts than its trainer and fail honest work, so they are left out. Found by sweeps
# of up to 64 problems in processes with different hash seeds; tests/unit/test_reasoning_gym.py runs
# the same check on every listed dataset.
NOT_REPRODUCIBLE = frozenset(
    {
        "codeio",
        "intermediate_integration",
        "isomorphic_strings",
        "knight_swap",
        "list_functions",
        "polynomial_multiplication",
        "ransom_note",
        "word_ladder",
    }
)
# Without a tag rule the model is asked for the bare answer; with one, reasoning-gym's own wording.
SYSTEM_PROMPTS = {
    "answer_tag": (
        "Answer the question directly. Provide your answer between <answer> and </answer> tags. "
        "Do not return any preamble, explanation, or reasoning."
    ),
    "whole": "Reply with the final answer only: no words, no working.",
    "first_line": "Reply with the final answer alone on the first line.",
    "last_number": "Solve the problem and end your reply with the final answer as a number.",
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class ReasoningGymParams(BaseModel):
    """Which items, how they are asked, and how an answer is read from a completion."""

    config: dict[str, Any] = Field(default_factory=dict, description="The dataset's own configuration keys.")
    answer: Literal["answer_tag", "whole", "first_line", "last_number"] = Field(
        "answer_tag",
        description=(
            "How the answer is read: the last <answer>…</answer>, the whole completion, its first line, "
            "or its last number (for datasets whose answers are numbers)."
        ),
    )
    system_prompt: str | None = Field(None, description="Instruction to a chat model (default: by answer rule).")
    dataset_seed: int = Field(0, ge=0, lt=2**31, description="Seed of the dataset's items.")
    dataset_size: int = Field(DEFAULT_SIZE, ge=1, le=10_000_000, description="Items the problems are drawn from.")

    model_config = {"extra": "forbid"}


@lru_cache(maxsize=1)
def dataset_names() -> tuple[str, ...]:
    """Every reasoning-gym dataset that stands alone (composite only mixes others) and draws the same
    items in every process."""
    from reasoning_gym.factory import DATASETS

    return tuple(sorted(name for name in DATASETS if name != "composite" and name not in NOT_REPRODUCIBLE))


def _config_keys(dataset: str) -> list[str]:
    from reasoning_gym.factory import DATASETS

    config_class = DATASETS[dataset][1]
    return [field.name for field in dataclasses.fields(config_class) if field.name not in OWN_KEYS]


@lru_cache(maxsize=32)
def _dataset(dataset: str, config_json: str, seed: int, size: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(dataset, seed=seed, size=size, **json.loads(config_json))


def extract_answer(completion: str, rule: str) -> str | None:
    """The answer a completion gives under `rule` (None: it gives none)."""
    if rule == "answer_tag":
        from reasoning_gym.utils import extract_answer as tagged

        return tagged(completion, tag_name="answer")
    if rule == "last_number":
        numbers = _NUMBER.findall(completion)
        return numbers[-1] if numbers else None
    if rule == "first_line":
        lines = completion.strip().splitlines()
        return lines[0].strip() if lines else None
    return completion.strip()


class ReasoningGym(Environment):
    """One reasoning-gym dataset; subclassed per dataset by `environment_class`."""

    dataset: ClassVar[str]
    params_model = ReasoningGymParams
    params: ReasoningGymParams

    def __init__(self, params: BaseModel) -> None:
        super().__init__(params)
        keys = _config_keys(self.dataset)
        unknown = sorted(set(self.params.config) - set(keys))
        if unknown:
            raise ConfigError(
                f"environment {self.name}: unknown configuration key {unknown[0]!r}: one of {', '.join(keys)}"
            )
        config_json = json.dumps(self.params.config, sort_keys=True)
        try:
            self._items = _dataset(self.dataset, config_json, self.params.dataset_seed, self.params.dataset_size)
        except (AssertionError, ValueError, TypeError, KeyError) as error:
            problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"environment {self.name}: the dataset refuses this configuration: {problem}") from None
        self._system = self.params.system_prompt or SYSTEM_PROMPTS[self.params.answer]
        self._entries: dict[int, dict[str, Any]] = {}

    def _entry(self, index: int) -> dict[str, Any]:
        if index not in self._entries:
            self._entries[index] = self._items[index]
        return self._entries[index]

    def draw(self, stream: SeedStream) -> Problem:
        index = stream.below(self.params.dataset_size)
        entry = self._entry(index)
        answer = entry.get("answer")
        return Problem(str(entry["question"]), "" if answer is None else str(answer), self._system, index)

    def reward(self, problem: Problem, completion: str) -> float:
        answer = extract_answer(completion, self.params.answer)
        if answer is None:
            return 0.0
        try:
            score = float(self._items.score_answer(answer, self._entry(problem.index)))
        except Exception:  # a dataset's scorer that chokes on an odd answer: that answer earns nothing
            return 0.0
        return min(max(score, 0.0), 1.0)

    def alphabet(self) -> str:
        return string.printable.replace("\t", "").replace("\r", "").replace("\x0b", "").replace("\x0c", "")

    def max_answer_chars(self) -> int:
        return 4096  # open-ended: the spec's max_new_tokens bounds a completion


def description_of(dataset: str) -> str:
    """The first line of the dataset's own docstring."""
    from reasoning_gym.factory import DATASETS

    doc = (DATASETS[dataset][0].__doc__ or "").strip().splitlines()
    return f"reasoning-gym: {doc[0].strip()}" if doc else "reasoning-gym dataset"


@cache
def environment_class(name: str) -> type[Environment]:
    """The environment class of `reasoning-gym/<dataset>`; ConfigError for an unknown dataset."""
    dataset = name.removeprefix(FAMILY)
    if dataset in NOT_REPRODUCIBLE:
        raise ConfigError(
            f"reasoning-gym dataset {dataset!r} is left out: its problems differ from one process to the next, "
            "so validators could not regenerate a trainer's prompts"
        )
    if dataset not in dataset_names():
        raise ConfigError(f"unknown reasoning-gym dataset {dataset!r} (`crucible env list` names them)")
    attributes = {"name": name, "dataset": dataset, "description": description_of(dataset)}
    return type(f"ReasoningGym_{dataset}", (ReasoningGym,), attributes)
