"""What a trainer's work for a round is, as a function of chain values: the prompts it must answer,
the seed of each completion, and the sequences its update learns from. Trainers produce work with
these; validators and auditors check it with the same functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.chain.client import Crucible
from protocol.chain.ids import commitment
from protocol.ml.envs.base import Problem
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.model import LoadedModel
from protocol.ml.seeds import label_seed, prompt_seed, sample_seed
from protocol.ml.training import TrainingSequence, group_advantages, grpo_update
from protocol.work.rollouts import RolloutFile

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RoundContext:
    """Where a piece of work belongs: chain, market, task, round, node, what the round fixed, and the
    checkpoint the work started from: the agreed checkpoint of its base round (the round itself unless the
    task pipelines, see `TaskParams.max_staleness`)."""

    chain_id: int
    market: str
    task_id: int
    round_index: int
    node: str
    work_seed: bytes
    checkpoint_cid: str
    env_cid: str
    base_round: int

    @classmethod
    def of(
        cls,
        crucible: Crucible,
        task_id: int,
        round_index: int,
        node: str,
        *,
        work_seed: bytes | None = None,
        checkpoint_cid: str | None = None,
        env_cid: str | None = None,
        base_round: int | None = None,
    ) -> RoundContext:
        """The context of `node`'s work in a round of this deployment, built on `base_round`'s checkpoint
        (default: the round's own). The values not given are read from the chain (a trainer and a validator);
        an auditor passes those it rebuilt from events."""
        base = round_index if base_round is None else base_round
        return cls(
            chain_id=crucible.chain.chain_id,
            market=crucible.deployment.TaskMarket,
            task_id=task_id,
            round_index=round_index,
            node=node,
            work_seed=crucible.round(task_id, round_index).work_seed if work_seed is None else work_seed,
            checkpoint_cid=checkpoint_cid or crucible.checkpoint_cid(task_id, base),
            env_cid=env_cid or crucible.task_cids(task_id)[1],
            base_round=base,
        )

    def commitment(self, proofs_digest: bytes) -> bytes:
        """The commitment `submitWork` emits for this work with these proofs."""
        return commitment(
            self.chain_id, self.market, self.task_id, self.round_index, self.base_round, self.node, proofs_digest
        )

    def prompts_seed(self) -> bytes:
        """The seed of this node's prompts in this round."""
        return prompt_seed(self.task_id, self.round_index, self.node, self.work_seed)

    def adapter_seed(self) -> bytes:
        """The seed of the round's LoRA start (its A matrices), the same for every node of the round:
        their adapters start from one A, so the outer mean of B·A averages the nodes' updates in one
        subspace. With a start per node they lay in different subspaces and their mean was 1/N of a step."""
        return label_seed("crucible-adapter", str(self.task_id), str(self.round_index), "0x" + self.work_seed.hex())


@dataclass(frozen=True)
class Slot:
    """One completion the node owes: which problem, which sample of its group, and its sampling seed."""

    prompt_index: int
    sample_index: int
    problem: Problem
    seed: bytes


def assigned_slots(spec: EnvSpec, context: RoundContext) -> list[Slot]:
    """Every completion a node owes in a round, prompt by prompt, sample by sample."""
    seed = context.prompts_seed()
    problems = spec.env().problems(seed, spec.training.prompts_per_round)
    return [
        Slot(prompt_index, sample_index, problem, sample_seed(seed, prompt_index, sample_index))
        for prompt_index, problem in enumerate(problems)
        for sample_index in range(spec.training.group_size)
    ]


def training_sequences(rollouts: RolloutFile, spec: EnvSpec) -> list[TrainingSequence]:
    """The sequences a rollout file's update learns from, with group-normalised advantages of its rewards."""
    advantages = group_advantages([sample.reward for sample in rollouts.samples], spec.training.group_size)
    return [
        TrainingSequence(sample.prompt_ids, sample.completion_ids, advantage)
        for sample, advantage in zip(rollouts.samples, advantages, strict=True)
    ]


def round_update(
    loaded: LoadedModel,
    rollouts: RolloutFile,
    spec: EnvSpec,
    context: RoundContext,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, torch.Tensor]:
    """The update a rollout file's trainer owes: GRPO from the round's checkpoint on its sequences,
    a LoRA adapter (if the spec asks for one) started from the round's adapter seed."""
    return grpo_update(
        loaded.model,
        training_sequences(rollouts, spec),
        spec.training,
        spec.sampling.temperature,
        loaded.tokenizer.pad_id,
        on_step,
        adapter_seed=context.adapter_seed(),
    )
