"""Held-out evaluation on the environment's held-out problems, scored by its reward: greedy answers
(the model's best guess) and answers sampled as the task samples (what GRPO optimises, and what
moves first as RL sharpens the policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.ml.envs.base import Problem
from protocol.ml.envs.spec import EnvSpec, SamplingSettings
from protocol.ml.generation import generate
from protocol.ml.seeds import label_seed
from protocol.ml.tokenizer import Tokenizer, completion_text, prompt_ids


@dataclass(frozen=True)
class Evaluation:
    """Held-out figures: accuracy (share of full-reward answers) and mean reward, greedy and sampled."""

    accuracy: float
    mean_reward: float
    sampled_accuracy: float
    sampled_mean_reward: float
    problems: int


def evaluate(
    model: Any, tokenizer: Tokenizer, spec: EnvSpec, count: int | None = None, batch_size: int = 128
) -> Evaluation:
    """Answers `count` (default: the spec's eval_size) held-out problems greedily and sampled, and scores them."""
    environment = spec.env()
    problems = environment.held_out(count or spec.eval_size)
    length = environment.max_answer_chars() + 1
    greedy = SamplingSettings(max_new_tokens=length)
    sampled = spec.sampling.model_copy(update={"max_new_tokens": min(length, spec.sampling.max_new_tokens)})
    seeds = [label_seed("crucible-held-out-sample", str(index)) for index in range(len(problems))]
    greedy_rewards = _rewards(model, tokenizer, spec, problems, seeds, greedy, batch_size, greedy=True)
    sampled_rewards = _rewards(model, tokenizer, spec, problems, seeds, sampled, batch_size, greedy=False)
    return Evaluation(
        accuracy=sum(r >= 1.0 for r in greedy_rewards) / len(problems),
        mean_reward=sum(greedy_rewards) / len(problems),
        sampled_accuracy=sum(r >= 1.0 for r in sampled_rewards) / len(problems),
        sampled_mean_reward=sum(sampled_rewards) / len(problems),
        problems=len(problems),
    )


def _rewards(
    model: Any,
    tokenizer: Tokenizer,
    spec: EnvSpec,
    problems: list[Problem],
    seeds: list[bytes],
    settings: SamplingSettings,
    batch_size: int,
    greedy: bool,
) -> list[float]:
    environment = spec.env()
    prompts = [prompt_ids(tokenizer, problem) for problem in problems]
    outputs = generate(model, prompts, seeds, settings, tokenizer.eos_id, tokenizer.pad_id, batch_size, greedy=greedy)
    return [
        environment.reward(problem, completion_text(tokenizer, out.completion_ids))
        for problem, out in zip(problems, outputs, strict=True)
    ]
