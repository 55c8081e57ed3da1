"""Named sets of spec settings a task starts from (`crucible env spec NAME --preset P`, `crucible env list`).

A preset is applied over an environment's defaults and under the user's own `--set`s. `small-model` is what
the demo runs a real model with: the settings under which SmolLM2-135M-Instruct learns on two cores
(docs/benchmarks.md), where the spec's own defaults (8 new tokens, a full update at lr 1e-4, 256 prompts)
buy no learning on a CPU's budget.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ConfigError
from protocol.ml.envs import reasoning_gym


@dataclass(frozen=True)
class Preset:
    """Spec settings for every environment, and more for some, by name."""

    description: str
    settings: dict[str, Any]
    by_environment: dict[str, dict[str, Any]] = field(default_factory=dict)

    def document(self, environment: str) -> dict[str, Any]:
        """The spec document of `environment` under this preset (before any --set)."""
        document = merged({"environment": environment}, self.settings)
        return merged(document, self.by_environment.get(environment, {}))


# LoRA updates and short completions (a CPU's budget); micro-batches of 8 because a forward pass's logits are
# [sequences, tokens, 49,152] floats, four times over in the loss and its gradient, and a demo's five processes
# share the machine's memory.
PRESETS: dict[str, Preset] = {
    "small-model": Preset(
        description="a ~100M-parameter chat model on a CPU (the demo's SmolLM2 settings): LoRA r8, lr 2e-3, "
        "12 new tokens, 12 prompts x 8 samples a round",
        settings={
            "sampling": {"max_new_tokens": 12},
            "training": {
                "prompts_per_round": 12,
                "group_size": 8,
                "minibatch_size": 32,
                "micro_batch_size": 8,
                "learning_rate": 2e-3,
                "adapter": {"kind": "lora", "rank": 8, "alpha": 16},
            },
        },
        # The demo's task: two-term sums of one- and two-digit numbers, the answer read as the last number of the
        # reply (SmolLM2 answers "The final answer is 16."); 100,000 items hold about 1,600 distinct held-out
        # problems.
        by_environment={
            reasoning_gym.FAMILY + "chain_sum": {
                "params": {
                    "answer": "last_number",
                    "dataset_size": 100_000,
                    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
                },
            }
        },
    ),
}


def preset(name: str) -> Preset:
    """The preset called `name`; ConfigError naming the choices."""
    found = PRESETS.get(name)
    if found is None:
        raise ConfigError(f"unknown preset {name!r}: one of {', '.join(sorted(PRESETS))}")
    return found


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` merged in, section by section (new dicts: neither argument changes)."""
    result = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
