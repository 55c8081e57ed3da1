"""The environment interface: problems drawn from a seed, a deterministic reward, a held-out set."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from eth_utils import keccak
from pydantic import BaseModel

from protocol.ml.seeds import SeedStream, label_seed

# A problem whose prompt hashes below this (of 256) belongs to the held-out set: about 10 %.
HELD_OUT_BELOW = 26


@dataclass(frozen=True)
class Problem:
    """One prompt and the answer its reward is measured against; `system` is the environment's
    instruction to a chat model (answer format), `index` where the problem sits in its dataset."""

    prompt: str
    answer: str
    system: str = ""
    index: int = -1

    def messages(self) -> list[dict[str, str]]:
        """The problem as chat messages: the system instruction (if any), then the prompt as the user's."""
        user = {"role": "user", "content": self.prompt}
        return [{"role": "system", "content": self.system}, user] if self.system else [user]


class Environment(ABC):
    """A verifiable task: problems drawn from a seed, a deterministic reward, a held-out set."""

    name: ClassVar[str]
    description: ClassVar[str]
    params_model: ClassVar[type[BaseModel]]

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @abstractmethod
    def draw(self, stream: SeedStream) -> Problem:
        """Returns the next problem of the stream."""

    @abstractmethod
    def reward(self, problem: Problem, completion: str) -> float:
        """Returns the reward of a completion, in [0, 1]."""

    @abstractmethod
    def alphabet(self) -> str:
        """Every character a prompt or an answer can contain."""

    def max_answer_chars(self) -> int:
        """The longest answer this environment's problems can have."""
        return 16

    def is_held_out(self, problem: Problem) -> bool:
        """Whether the problem belongs to the held-out set (training never sees those)."""
        return keccak(problem.prompt.encode())[0] < HELD_OUT_BELOW

    def problems(self, seed: bytes, count: int) -> list[Problem]:
        """Returns `count` training problems drawn from `seed`."""
        stream = SeedStream(seed)
        drawn: list[Problem] = []
        while len(drawn) < count:
            problem = self.draw(stream)
            if not self.is_held_out(problem):
                drawn.append(problem)
        return drawn

    def held_out(self, count: int) -> list[Problem]:
        """Returns the first `count` problems of the held-out set, the same for every caller."""
        params = json.dumps(self.params.model_dump(mode="json"), sort_keys=True)
        stream = SeedStream(label_seed("crucible-held-out", self.name, params))
        seen: set[str] = set()
        drawn: list[Problem] = []
        for _ in range(count * 200):
            problem = self.draw(stream)
            if self.is_held_out(problem) and problem.prompt not in seen:
                seen.add(problem.prompt)
                drawn.append(problem)
                if len(drawn) == count:
                    break
        return drawn
