"""Red-team strategies for devnets: ways a trainer can cheat, to test that validators catch each one.

`crucible node run --adversary NAME` runs a node that cheats this way and otherwise behaves like an
honest node. The node refuses to cheat on any chain but the local devnet unless forced.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from eth_utils import keccak

from protocol.ml.envs.spec import EnvSpec
from protocol.ml.generation import Generated, generate
from protocol.ml.inference import prefill
from protocol.ml.model import LoadedModel
from protocol.ml.tokenizer import completion_text, prompt_ids
from protocol.runtime.journal import RoundRecord
from protocol.runtime.participant import red_team_of
from protocol.work.rollouts import RolloutFile
from protocol.work.round import RoundContext, Slot

if TYPE_CHECKING:
    import torch

POISON_SCALE = 20.0  # how much the poisoned-update adversary amplifies its reversed update
STEADY_PUSH_SCALE = 1.9  # the steady pusher's size, in multiples of its honest update's (under a 2 x clip)


class Adversary:
    """An honest node: every hook returns what it is given."""

    name: ClassVar[str] = "honest"
    description: ClassVar[str] = "no cheating"
    stores_artifacts: ClassVar[bool] = True

    def generation_model(self, model: Any) -> Any:
        """The model completions are sampled with."""
        return model

    def rework(
        self, slots: list[Slot], generated: list[Generated], loaded: LoadedModel, spec: EnvSpec, batch_size: int
    ) -> list[Generated]:
        """The completions (and the hidden states proofs are built from) to report."""
        return generated

    def rescore(self, rollouts: RolloutFile) -> RolloutFile:
        """The rollout file to publish."""
        return rollouts

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        """The update to publish."""
        return update

    def base_round(self, round_index: int, newest_agreed: int, max_staleness: int) -> int:
        """The round whose checkpoint it builds on (honest: the newest agreed one)."""
        return newest_agreed

    def choose_submission(
        self, prepared: RoundRecord, others: Callable[[], list[dict[str, Any]]], earlier: list[RoundRecord]
    ) -> RoundRecord | None:
        """What to submit: `others()` lists this round's other submissions, `earlier` this node's own
        earlier ones. None: nothing to submit yet (ask again)."""
        return prepared


class WrongModel(Adversary):
    name = "wrong-model"
    description = "samples with other weights (the checkpoint plus noise) and proves those"

    def generation_model(self, model: Any) -> Any:
        import torch

        other = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for parameter in other.parameters():
                noise = torch.randn(parameter.shape, generator=generator).to(parameter.device, parameter.dtype)
                parameter.add_(noise * parameter.detach().float().std().clamp(min=1e-3) * 0.5)
        return other


class LowPrecision(Adversary):
    name = "low-precision"
    description = "samples with weights rounded to 8-bit floats (per-tensor scaled e4m3), as a cheap quantised model"

    def generation_model(self, model: Any) -> Any:
        import torch

        rounded = copy.deepcopy(model)
        with torch.no_grad():
            for parameter in rounded.parameters():
                scale = parameter.detach().abs().max().clamp(min=1e-12) / 448.0  # e4m3's largest finite value
                parameter.copy_((parameter / scale).to(torch.float8_e4m3fn).to(parameter.dtype) * scale)
        return rounded


class ForgedTokens(Adversary):
    name = "forged-tokens"
    description = "replaces wrong completions by the correct answers, proving them with a real prefill pass"

    def rework(
        self, slots: list[Slot], generated: list[Generated], loaded: LoadedModel, spec: EnvSpec, batch_size: int
    ) -> list[Generated]:
        tokenizer = loaded.tokenizer
        environment = spec.env()
        forged = list(generated)
        targets = []
        for index, (slot, out) in enumerate(zip(slots, generated, strict=True)):
            if environment.reward(slot.problem, completion_text(tokenizer, out.completion_ids)) < 1.0:
                ids = [*tokenizer.encode(slot.problem.answer), tokenizer.eos_id][: spec.sampling.max_new_tokens]
                targets.append((index, prompt_ids(tokenizer, slot.problem), ids))
        passes = prefill(loaded.model, [(p, c) for _, p, c in targets], tokenizer.pad_id, batch_size)
        for (index, _, ids), recomputed in zip(targets, passes, strict=True):
            forged[index] = Generated(ids, recomputed.activations.float().cpu())
        return forged


class CherryPick(Adversary):
    name = "cherry-pick"
    description = "samples four completions per slot with other seeds and reports the best-rewarded (ties: a re-roll)"
    tries: ClassVar[int] = 4

    def rework(
        self, slots: list[Slot], generated: list[Generated], loaded: LoadedModel, spec: EnvSpec, batch_size: int
    ) -> list[Generated]:
        tokenizer = loaded.tokenizer
        environment = spec.env()

        def reward(slot: Slot, out: Generated) -> float:
            return environment.reward(slot.problem, completion_text(tokenizer, out.completion_ids))

        best = list(generated)
        prompts = [prompt_ids(tokenizer, slot.problem) for slot in slots]
        for attempt in range(1, self.tries):
            seeds = [keccak(slot.seed + attempt.to_bytes(4, "big")) for slot in slots]
            tries = generate(
                loaded.model, prompts, seeds, spec.sampling, tokenizer.eos_id, tokenizer.pad_id, batch_size
            )
            for index, (slot, out) in enumerate(zip(slots, tries, strict=True)):
                # Ties go to the re-roll, so the cheat shows even when no try scores better.
                if reward(slot, out) >= reward(slot, best[index]):
                    best[index] = out
        return best


class PastEos(Adversary):
    name = "past-eos"
    description = "keeps sampling past the end token, with the same seeded sampler, to max_new_tokens: more work units"

    def rework(
        self, slots: list[Slot], generated: list[Generated], loaded: LoadedModel, spec: EnvSpec, batch_size: int
    ) -> list[Generated]:
        # An end id no token has: every completion runs to max_new_tokens, each token still its seed's sample
        # of the logits before it (the end tokens it passes included), so every replay agrees.
        tokenizer = loaded.tokenizer
        prompts = [prompt_ids(tokenizer, slot.problem) for slot in slots]
        seeds = [slot.seed for slot in slots]
        return generate(loaded.model, prompts, seeds, spec.sampling, -1, tokenizer.pad_id, batch_size)


class Truncated(Adversary):
    name = "truncated"
    description = "cuts every completion of more than one token to its first half, before the sampler stopped"

    def rework(
        self, slots: list[Slot], generated: list[Generated], loaded: LoadedModel, spec: EnvSpec, batch_size: int
    ) -> list[Generated]:
        # Each kept token is its seed's sample and its proofs are the generation's own: only where the
        # completion stops is not the sampler's, and the reward (and so the update) is read off the cut text.
        def cut(out: Generated) -> Generated:
            keep = max(1, len(out.completion_ids) // 2)
            return Generated(out.completion_ids[:keep], out.activations[:keep].clone())

        return [cut(out) for out in generated]


class InflatedRewards(Adversary):
    name = "inflated-rewards"
    description = "reports the full reward for every completion"

    def rescore(self, rollouts: RolloutFile) -> RolloutFile:
        return rollouts.model_copy(update={"samples": [s.model_copy(update={"reward": 1.0}) for s in rollouts.samples]})


class GarbageUpdate(Adversary):
    name = "garbage-update"
    description = "publishes honest rollouts with a garbage update (noise on even rounds, zeros on odd)"

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        import torch

        if context.round_index % 2 == 1:
            return {name: torch.zeros_like(value) for name, value in update.items()}
        generator = torch.Generator().manual_seed(context.round_index)
        return {name: torch.randn(value.shape, generator=generator) * 1e-2 for name, value in update.items()}


class Copied(Adversary):
    name = "copied"
    description = "waits for another node's submission in the round and submits its CIDs as its own"

    def choose_submission(
        self, prepared: RoundRecord, others: Callable[[], list[dict[str, Any]]], earlier: list[RoundRecord]
    ) -> RoundRecord | None:
        found = others()
        if not found:
            return None
        first = found[0]
        return replace(
            prepared,
            rollout_cid=str(first["rolloutCid"]),
            update_cid=str(first["updateCid"]),
            work_units=int(first["workUnits"]),
        )


class Replay(Adversary):
    name = "replay"
    description = "resubmits its own submission of an earlier round (honest in its first round)"

    def choose_submission(
        self, prepared: RoundRecord, others: Callable[[], list[dict[str, Any]]], earlier: list[RoundRecord]
    ) -> RoundRecord | None:
        return earlier[0] if earlier else prepared


class TooStale(Adversary):
    name = "too-stale"
    description = "builds on a checkpoint one round older than the task's staleness bound allows (the chain refuses it)"

    def base_round(self, round_index: int, newest_agreed: int, max_staleness: int) -> int:
        return max(round_index - max_staleness - 1, 0)


class Withheld(Adversary):
    name = "withheld"
    description = "submits the CIDs of its work but never stores or uploads the bytes"
    stores_artifacts = False


def _steered(
    update: dict[str, torch.Tensor], change: Callable[[str, torch.Tensor], torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`update` with `change` applied to the tensors that set the direction and size of the model's change: every
    tensor of a full update, only the `lora_B` factors of a LoRA one (the change is B A: flipping both factors
    would leave it as it was, scaling both would square the factor)."""
    lora = any(name.endswith(".lora_B") for name in update)
    return {
        name: change(name, value) if not lora or name.endswith(".lora_B") else value for name, value in update.items()
    }


class PoisonedUpdate(Adversary):
    name = "poisoned-update"
    description = "publishes honest rollouts with its update reversed and amplified (-20 x): reward ascent undone"

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        # Model poisoning by a scaled sign flip: in a mean of a few updates this one outweighs the honest
        # ones and pushes the aggregate against the reward. Only the update replay can see it.
        return _steered(update, lambda _, value: value * -POISON_SCALE)


class ScaledUpdate(Adversary):
    name = "scaled-update"
    description = "publishes honest rollouts with its update amplified 100 x: one step far past where the reward leads"

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        return _steered(update, lambda _, value: value * 100.0)


class RandomUpdate(Adversary):
    name = "random-update"
    description = "publishes honest rollouts with a random update of its honest update's size, tensor by tensor"

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        import torch

        generator = torch.Generator().manual_seed(context.round_index)

        def random_like(_: str, value: torch.Tensor) -> torch.Tensor:
            noise = torch.randn(value.shape, generator=generator)
            return (noise * (value.float().norm() / noise.norm().clamp_min(1e-30))).to(value.dtype)

        return _steered(update, random_like)


class SteadyPush(Adversary):
    name = "steady-push"
    description = (
        "publishes honest rollouts with the same random direction every round, at 1.9 x its honest update's size: "
        "under a clip of 2 x the median norm, never clipped"
    )

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        import torch

        def pushed(name: str, value: torch.Tensor) -> torch.Tensor:
            # The same direction each round: seeded by the tensor's name alone.
            seed = int.from_bytes(keccak(text=f"steady-push {name}")[:8], "big") >> 1
            direction = torch.randn(value.shape, generator=torch.Generator().manual_seed(seed))
            return (direction * (STEADY_PUSH_SCALE * value.float().norm() / direction.norm())).to(value.dtype)

        return _steered(update, pushed)


ADVERSARIES: dict[str, type[Adversary]] = {
    kind.name: kind
    for kind in (
        WrongModel,
        LowPrecision,
        ForgedTokens,
        CherryPick,
        PastEos,
        Truncated,
        InflatedRewards,
        Copied,
        Replay,
        GarbageUpdate,
        PoisonedUpdate,
        ScaledUpdate,
        RandomUpdate,
        SteadyPush,
        Withheld,
        TooStale,
    )
}


def adversary_of(name: str | None) -> Adversary | None:
    """The strategy called `name` (None for an honest node); ConfigError for an unknown one."""
    return red_team_of(ADVERSARIES, name, "adversary")
