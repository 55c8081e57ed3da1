"""Held-out evaluation: greedy answers to the environment's held-out problems, scored by its reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.envs.spec import EnvSpec, SamplingSettings
from protocol.generation import generate
from protocol.tokenizer import Tokenizer, completion_text, prompt_ids


@dataclass(frozen=True)
class Evaluation:
    """Held-out figures: accuracy (share of full-reward answers) and mean reward."""

    accuracy: float
    mean_reward: float
    problems: int


def evaluate(
    model: Any, tokenizer: Tokenizer, spec: EnvSpec, count: int | None = None, batch_size: int = 128
) -> Evaluation:
    """Answers `count` (default: the spec's eval_size) held-out problems greedily and scores them."""
    environment = spec.env()
    problems = environment.held_out(count or spec.eval_size)
    settings = SamplingSettings(max_new_tokens=environment.max_answer_chars() + 1)
    prompts = [prompt_ids(tokenizer, problem.prompt) for problem in problems]
    outputs = generate(
        model,
        prompts,
        [bytes(32)] * len(prompts),
        settings,
        tokenizer.eos_id,
        tokenizer.pad_id,
        batch_size,
        greedy=True,
    )
    rewards = [
        environment.reward(problem, completion_text(tokenizer, out.completion_ids))
        for problem, out in zip(problems, outputs, strict=True)
    ]
    return Evaluation(
        accuracy=sum(r >= 1.0 for r in rewards) / len(rewards),
        mean_reward=sum(rewards) / len(rewards),
        problems=len(rewards),
    )
