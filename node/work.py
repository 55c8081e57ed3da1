"""A trainer's work for one round: generate, prove, score, train. No chain, no network here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.ml.envs.spec import EnvSpec
from protocol.ml.generation import Generated, generate
from protocol.ml.model import LoadedModel
from protocol.ml.proofs import build_proofs
from protocol.ml.tokenizer import completion_text, prompt_ids
from protocol.work.rollouts import RolloutFile, Sample, encode_proofs
from protocol.work.round import RoundContext, Slot, assigned_slots, round_update

if TYPE_CHECKING:
    import torch

    from node.adversary import Adversary


@dataclass
class RoundWork:
    """What a round's submission is made of: the rollout file and the pseudo-gradient Δ."""

    rollouts: RolloutFile
    update: dict[str, torch.Tensor]
    generate_s: float = 0.0
    prove_s: float = 0.0
    train_s: float = 0.0


@dataclass
class Progress:
    """Callbacks for long work: completions generated, training steps done."""

    generated: Callable[[int], None] | None = None
    trained: Callable[[int, float], None] | None = None


def produce_work(
    loaded: LoadedModel,
    spec: EnvSpec,
    context: RoundContext,
    batch_size: int = 64,
    progress: Progress | None = None,
    adversary: Adversary | None = None,
) -> RoundWork:
    """Generates the completions the node owes, proves and scores them, and computes its update."""
    import time

    progress = progress or Progress()
    tokenizer = loaded.tokenizer
    slots = assigned_slots(spec, context)
    started = time.perf_counter()
    model = adversary.generation_model(loaded.model) if adversary else loaded.model
    generated = generate(
        model,
        [prompt_ids(tokenizer, slot.problem) for slot in slots],
        [slot.seed for slot in slots],
        spec.sampling,
        tokenizer.eos_id,
        tokenizer.pad_id,
        batch_size,
        progress.generated,
    )
    if adversary:
        generated = adversary.rework(slots, generated, loaded, spec, batch_size)
    generate_s = time.perf_counter() - started
    started = time.perf_counter()
    proofs = [build_proofs(out.activations, spec.toploc) for out in generated]
    prove_s = time.perf_counter() - started
    rollouts = _rollout_file(loaded, context, slots, generated, proofs, spec)
    if adversary:
        rollouts = adversary.rescore(rollouts)
    started = time.perf_counter()
    update = round_update(loaded, rollouts, spec, context, progress.trained)
    if adversary:
        update = adversary.corrupt_update(update, context)
    train_s = time.perf_counter() - started
    return RoundWork(rollouts, update, generate_s, prove_s, train_s)


def _rollout_file(
    loaded: LoadedModel,
    context: RoundContext,
    slots: list[Slot],
    generated: list[Generated],
    proofs: list[list[bytes]],
    spec: EnvSpec,
) -> RolloutFile:
    environment = spec.env()
    tokenizer = loaded.tokenizer
    samples = []
    for slot, out, slot_proofs in zip(slots, generated, proofs, strict=True):
        text = completion_text(tokenizer, out.completion_ids)
        samples.append(
            Sample(
                prompt_index=slot.prompt_index,
                sample_index=slot.sample_index,
                prompt=slot.problem.prompt,
                prompt_ids=prompt_ids(tokenizer, slot.problem),
                completion=text,
                completion_ids=out.completion_ids,
                reward=environment.reward(slot.problem, text),
                seed="0x" + slot.seed.hex(),
                proofs=encode_proofs(slot_proofs),
            )
        )
    return RolloutFile(
        chain_id=context.chain_id,
        market=context.market,
        task_id=context.task_id,
        round=context.round_index,
        node=context.node,
        checkpoint_cid=context.checkpoint_cid,
        env_cid=context.env_cid,
        work_seed="0x" + context.work_seed.hex(),
        work_units=sum(len(out.completion_ids) for out in generated),
        samples=samples,
    )
