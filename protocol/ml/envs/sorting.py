"""Sorting a short sequence: `sort:3142=` → `1234`; the reward is the share of places right."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from protocol.ml.envs.base import Environment, Problem
from protocol.ml.seeds import SeedStream


class SortingParams(BaseModel):
    """What the sequences look like."""

    min_length: int = Field(3, ge=1, le=32, description="Shortest sequence.")
    max_length: int = Field(5, ge=1, le=32, description="Longest sequence.")
    symbols: str = Field("0123456789", min_length=2, description="The symbols, in their sort order.")

    model_config = {"extra": "forbid"}

    @model_validator(mode="after")
    def _check(self) -> SortingParams:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length {self.min_length} is above max_length {self.max_length}")
        if len(set(self.symbols)) != len(self.symbols) or any(s in ":=" or s.isspace() for s in self.symbols):
            raise ValueError("symbols must be distinct and must not contain ':', '=' or spaces")
        return self


class Sorting(Environment):
    """A sequence of symbols to put in order; partial credit per place, zero for a wrong length."""

    name = "sorting"
    description = "sort a short sequence of symbols, reward = share of places right"
    params_model = SortingParams
    params: SortingParams

    def draw(self, stream: SeedStream) -> Problem:
        symbols = self.params.symbols
        length = stream.between(self.params.min_length, self.params.max_length)
        sequence = "".join(symbols[stream.below(len(symbols))] for _ in range(length))
        return Problem(prompt=f"sort:{sequence}=", answer="".join(sorted(sequence, key=symbols.index)))

    def reward(self, problem: Problem, completion: str) -> float:
        guess = completion.strip()
        if len(guess) != len(problem.answer):
            return 0.0
        return sum(a == b for a, b in zip(guess, problem.answer, strict=True)) / len(problem.answer)

    def alphabet(self) -> str:
        return "sort:=" + self.params.symbols

    def max_answer_chars(self) -> int:
        return self.params.max_length
