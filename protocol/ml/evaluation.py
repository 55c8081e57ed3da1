"""Held-out evaluation on the environment's held-out problems, scored by its reward: greedy answers
(the model's best guess) and answers sampled as the task samples (what GRPO optimises, and what
moves first as RL sharpens the policy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.ml.envs.base import Environment, Problem
from protocol.ml.envs.spec import EnvSpec, SamplingSettings
from protocol.ml.generation import generate
from protocol.ml.seeds import label_seed
from protocol.ml.tokenizer import Tokenizer, completion_text, prompt_ids


@dataclass(frozen=True)
class Evaluation:
    """Held-out figures: accuracy (share of full-reward answers) and mean reward, greedy and sampled,
    and each problem's rewards (in held-out order, for paired comparisons)."""

    accuracy: float
    mean_reward: float
    sampled_accuracy: float
    sampled_mean_reward: float
    problems: int
    greedy_rewards: tuple[float, ...] = ()
    sampled_rewards: tuple[float, ...] = ()


@dataclass(frozen=True)
class Gain:
    """A paired difference (after - before) over the same problems: its mean and 95 % interval."""

    mean: float
    low: float
    high: float
    problems: int

    @property
    def real(self) -> bool:
        """Whether the interval excludes zero (above it): a gain whose interval holds zero is none."""
        return self.low > 0

    def as_json(self) -> dict[str, float | int | bool]:
        """The gain as JSON figures."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "problems": self.problems, "real": self.real}


def paired_gain(before: tuple[float, ...], after: tuple[float, ...]) -> Gain:
    """The mean per-problem difference and its 95 % interval (normal approximation, t ≈ 1.96 for the
    hundreds of problems an evaluation holds)."""
    if len(before) != len(after) or len(before) < 2:
        raise ValueError(f"a paired gain needs the same problems twice, got {len(before)} and {len(after)}")
    differences = [b - a for a, b in zip(before, after, strict=True)]
    count = len(differences)
    mean = sum(differences) / count
    variance = sum((d - mean) ** 2 for d in differences) / (count - 1)
    half = 1.96 * (variance / count) ** 0.5
    return Gain(mean, mean - half, mean + half, count)


def evaluate(
    model: Any,
    tokenizer: Tokenizer,
    spec: EnvSpec,
    count: int | None = None,
    batch_size: int = 128,
    on_answers: Callable[[int], None] | None = None,
) -> Evaluation:
    """Answers `count` (default: the spec's eval_size) held-out problems greedily and sampled, and scores them;
    `on_answers(n)` after each batch of n answers (2 x count in all)."""
    held_out = _HeldOut.of(spec, count)
    greedy_rewards = held_out.rewards(model, tokenizer, greedy=True, batch_size=batch_size, on_answers=on_answers)
    sampled_rewards = held_out.rewards(model, tokenizer, greedy=False, batch_size=batch_size, on_answers=on_answers)
    problems = len(greedy_rewards)
    return Evaluation(
        accuracy=accuracy(greedy_rewards),
        mean_reward=sum(greedy_rewards) / problems,
        sampled_accuracy=accuracy(sampled_rewards),
        sampled_mean_reward=sum(sampled_rewards) / problems,
        problems=problems,
        greedy_rewards=greedy_rewards,
        sampled_rewards=sampled_rewards,
    )


def accuracy(rewards: tuple[float, ...]) -> float:
    """The share of full-reward answers."""
    return sum(reward >= 1.0 for reward in rewards) / len(rewards)


def held_out_rewards(
    model: Any, tokenizer: Tokenizer, spec: EnvSpec, count: int | None, greedy: bool, batch_size: int = 128
) -> tuple[float, ...]:
    """The reward of each of the first `count` held-out problems (default: the spec's eval_size), answered
    greedily or sampled as the task samples, each problem with its own fixed seed (so two checkpoints
    are compared on the same problems and the same noise)."""
    return _HeldOut.of(spec, count).rewards(model, tokenizer, greedy, batch_size)


@dataclass(frozen=True)
class _HeldOut:
    """The held-out problems of an evaluation, each with its sampling seed, and the answer length."""

    spec: EnvSpec
    environment: Environment
    problems: list[Problem]
    seeds: list[bytes]
    length: int

    @classmethod
    def of(cls, spec: EnvSpec, count: int | None) -> _HeldOut:
        environment = spec.env()
        problems = environment.held_out(count or spec.eval_size)
        length = min(environment.max_answer_chars() + 1, spec.sampling.max_new_tokens)
        seeds = [label_seed("crucible-held-out-sample", str(index)) for index in range(len(problems))]
        return cls(spec, environment, problems, seeds, length)

    def rewards(
        self,
        model: Any,
        tokenizer: Tokenizer,
        greedy: bool,
        batch_size: int,
        on_answers: Callable[[int], None] | None = None,
    ) -> tuple[float, ...]:
        settings = SamplingSettings(max_new_tokens=self.length) if greedy else self.spec.sampling.model_copy(
            update={"max_new_tokens": self.length})  # fmt: skip
        prompts = [prompt_ids(tokenizer, problem) for problem in self.problems]
        outputs = generate(
            model, prompts, self.seeds, settings, tokenizer.eos_id, tokenizer.pad_id, batch_size, on_answers, greedy
        )
        return tuple(
            self.environment.reward(problem, completion_text(tokenizer, out.completion_ids))
            for problem, out in zip(self.problems, outputs, strict=True)
        )
