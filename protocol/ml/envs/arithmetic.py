"""Multi-digit arithmetic: `37+58=` → `95`; the reward is an exact match of the answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from protocol.ml.envs.base import Environment, Problem
from protocol.ml.seeds import SeedStream


class ArithmeticParams(BaseModel):
    """What the problems look like."""

    min_digits: int = Field(1, ge=1, le=9, description="Fewest digits of an operand.")
    max_digits: int = Field(2, ge=1, le=9, description="Most digits of an operand.")
    operators: list[Literal["+", "-", "*"]] = Field(["+"], min_length=1, description="Operators drawn from.")

    model_config = {"extra": "forbid"}

    @model_validator(mode="after")
    def _digits_ordered(self) -> ArithmeticParams:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits {self.min_digits} is above max_digits {self.max_digits}")
        return self


class Arithmetic(Environment):
    """Two operands, one operator; the answer is the exact integer result."""

    name = "arithmetic"
    description = "two-operand integer arithmetic, exact-match reward"
    params_model = ArithmeticParams
    params: ArithmeticParams

    def _operand(self, stream: SeedStream) -> int:
        digits = stream.between(self.params.min_digits, self.params.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return stream.between(low, 10**digits - 1)

    def draw(self, stream: SeedStream) -> Problem:
        left, right = self._operand(stream), self._operand(stream)
        operator = self.params.operators[stream.below(len(self.params.operators))]
        result = left + right if operator == "+" else left - right if operator == "-" else left * right
        return Problem(prompt=f"{left}{operator}{right}=", answer=str(result))

    def reward(self, problem: Problem, completion: str) -> float:
        return 1.0 if completion.strip() == problem.answer else 0.0

    def alphabet(self) -> str:
        return "0123456789+-*="

    def max_answer_chars(self) -> int:
        return 2 * self.params.max_digits + 1
