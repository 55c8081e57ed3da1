"""A round's work end to end without a chain: the rollout file, its bad forms, and each adversary."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from node.adversary import ADVERSARIES, POISON_SCALE, STEADY_PUSH_SCALE, adversary_of
from node.work import produce_work
from protocol.errors import ArtifactError, ConfigError
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.inference import prefill
from protocol.ml.model import LoadedModel
from protocol.ml.proofs import verify_proofs
from protocol.ml.sampling import replay
from protocol.runtime.journal import RoundRecord
from protocol.work.rollouts import MAX_ROLLOUT_BYTES, RolloutFile, parse_rollouts
from protocol.work.round import RoundContext, assigned_slots


def _honest(tiny: LoadedModel, spec: EnvSpec, context: RoundContext) -> RolloutFile:
    return produce_work(tiny, spec, context).rollouts


def test_rollout_file_round_trips_and_binds_its_proofs(tiny: LoadedModel, spec: EnvSpec, context: RoundContext) -> None:
    work = produce_work(tiny, spec, context)
    data = work.rollouts.to_bytes()
    parsed = parse_rollouts(data, "r")
    assert parsed == work.rollouts and parsed.to_bytes() == data
    assert len(parsed.samples) == spec.training.prompts_per_round * spec.training.group_size
    assert parsed.proofs_digest() == work.rollouts.proofs_digest()
    changed = parsed.model_copy(deep=True)
    changed.samples[0].proofs[0] = (
        changed.samples[1].proofs[-1] if changed.samples[1].proofs[-1] != changed.samples[0].proofs[0] else ""
    )
    assert changed.proofs_digest() != parsed.proofs_digest()
    # Same inputs, same work (the update up to float order; here the same process, so equal).
    again = produce_work(tiny, spec, context)
    assert again.rollouts == work.rollouts
    assert all(torch.equal(again.update[name], work.update[name]) for name in work.update)


def test_bad_rollout_files_are_refused_with_the_reason(tiny: LoadedModel, spec: EnvSpec, context: RoundContext) -> None:
    document = json.loads(_honest(tiny, spec, context).to_bytes())

    def variant(**changes: object) -> bytes:
        return json.dumps(document | changes).encode()

    first = document["samples"][0]
    cases = [
        (b"{not json", "invalid"),
        (variant(schema="other"), "schema"),
        (variant(schema_version=2), "schema_version"),
        (variant(work_units=document["work_units"] + 1), "work_units"),
        (variant(samples=[first, first], work_units=2 * len(first["completion_ids"])), "appears twice"),
        (variant(node="0x123"), "node"),
        (variant(checkpoint_cid="nope"), "checkpoint_cid"),
        (variant(work_seed="0x12"), "work_seed"),
        (variant(samples=[first | {"proofs": ["***"]}, *document["samples"][1:]]), "invalid"),
        (variant(samples=[first | {"completion_ids": []}, *document["samples"][1:]]), "completion_ids"),
        (variant(extra=1), "extra"),
        (b" " * (MAX_ROLLOUT_BYTES + 1), "above the"),
    ]
    for data, fragment in cases:
        with pytest.raises(ArtifactError) as caught:
            parse_rollouts(data, "bad.json")
        assert fragment in str(caught.value), (fragment, str(caught.value))


def test_assigned_slots_follow_the_spec(spec: EnvSpec, context: RoundContext) -> None:
    slots = assigned_slots(spec, context)
    assert [(s.prompt_index, s.sample_index) for s in slots][:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert len({s.seed for s in slots}) == len(slots)


def _replay_mismatches(tiny: LoadedModel, spec: EnvSpec, rollouts: RolloutFile) -> tuple[int, bool]:
    """Sampling mismatches over the file and whether every TOPLOC chunk passes, against the real model."""
    passes = prefill(tiny.model, [(s.prompt_ids, s.completion_ids) for s in rollouts.samples], 0)
    mismatches, proofs_pass = 0, True
    for sample, recomputed in zip(rollouts.samples, passes, strict=True):
        mismatches += len(
            replay(recomputed.logits, bytes.fromhex(sample.seed[2:]), sample.completion_ids, spec.sampling).mismatches
        )
        figures = verify_proofs(recomputed.activations, sample.proof_bytes(), spec.toploc)
        proofs_pass &= all(f.passes(spec.toploc) for f in figures)
    return mismatches, proofs_pass


def test_honest_work_passes_the_checks_the_adversaries_target(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    assert _replay_mismatches(tiny, spec, _honest(tiny, spec, context)) == (0, True)


@pytest.mark.parametrize(
    "name",
    [
        "wrong-model",
        "forged-tokens",
        "cherry-pick",
        "inflated-rewards",
        "garbage-update",
        "poisoned-update",
        "scaled-update",
        "random-update",
        "steady-push",
    ],
)
def test_each_adversary_does_what_it_says(tiny: LoadedModel, spec: EnvSpec, name: str, context: RoundContext) -> None:
    honest = produce_work(tiny, spec, context)
    cheat = produce_work(tiny, spec, context, adversary=adversary_of(name))
    environment = spec.env()
    slots = assigned_slots(spec, context)
    mismatches, proofs_pass = _replay_mismatches(tiny, spec, cheat.rollouts)
    if name == "wrong-model":
        assert not proofs_pass
    if name == "forged-tokens":
        # Every completion is now right, and TOPLOC alone accepts it: only the sampling replay sees it.
        assert all(
            environment.reward(slot.problem, s.completion) == 1.0
            for slot, s in zip(slots, cheat.rollouts.samples, strict=True)
        )
        assert proofs_pass and mismatches > 0
    if name == "cherry-pick":
        picked = [
            i for i, (a, b) in enumerate(zip(honest.rollouts.samples, cheat.rollouts.samples, strict=True)) if a != b
        ]
        assert picked and all(cheat.rollouts.samples[i].reward >= honest.rollouts.samples[i].reward for i in picked)
        assert proofs_pass and mismatches >= len(picked)
    if name == "inflated-rewards":
        assert all(s.reward == 1.0 for s in cheat.rollouts.samples)
        assert any(
            environment.reward(slot.problem, s.completion) < 1.0
            for slot, s in zip(slots, cheat.rollouts.samples, strict=True)
        )
    if name == "garbage-update":
        assert cheat.rollouts == honest.rollouts
        assert all(float(value.abs().sum()) > 0 for value in cheat.update.values())  # noise in round 0
        zero = produce_work(tiny, spec, dataclasses.replace(context, round_index=1), adversary=adversary_of(name))
        assert all(float(value.abs().sum()) == 0 for value in zero.update.values())
    if name == "poisoned-update":
        assert cheat.rollouts == honest.rollouts
        assert all(torch.allclose(cheat.update[k], -POISON_SCALE * honest.update[k]) for k in honest.update)
        assert any(float(value.abs().sum()) > 0 for value in honest.update.values())
    if name == "scaled-update":
        assert cheat.rollouts == honest.rollouts
        assert all(torch.allclose(cheat.update[k], 100 * honest.update[k]) for k in honest.update)
    if name in ("random-update", "steady-push"):
        # Honest rollouts; each tensor another direction, of the honest size (1.9 x for the steady pusher).
        size = 1.0 if name == "random-update" else STEADY_PUSH_SCALE
        assert cheat.rollouts == honest.rollouts
        for key, value in honest.update.items():
            if float(value.norm()) > 0:
                assert math.isclose(float(cheat.update[key].norm()), size * float(value.norm()), rel_tol=1e-4)
                assert abs(float(torch.nn.functional.cosine_similarity(cheat.update[key].flatten(), value.flatten(),
                                                                      dim=0))) < 0.5  # fmt: skip
    if name == "steady-push":
        later = produce_work(tiny, spec, dataclasses.replace(context, round_index=3), adversary=adversary_of(name))
        for key, value in cheat.update.items():  # the same direction in every round
            if float(value.norm()) > 0 and float(later.update[key].norm()) > 0:
                cosine = torch.nn.functional.cosine_similarity(later.update[key].flatten(), value.flatten(), dim=0)
                assert float(cosine) > 0.999


def test_low_precision_samples_with_rounded_weights(tiny: LoadedModel) -> None:
    adversary = adversary_of("low-precision")
    assert adversary is not None
    rounded = adversary.generation_model(tiny.model)
    pairs = list(zip(tiny.model.parameters(), rounded.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in pairs)
    assert all(float((a - b).detach().abs().max()) <= float(a.detach().abs().max()) * 0.07 + 1e-9 for a, b in pairs)


def test_submission_level_adversaries_choose_other_cids() -> None:
    mine = RoundRecord("prepared", "bafy-mine", "bafy-update", 10, "01" * 32)
    earlier = RoundRecord("settled", "bafy-old", "bafy-old-update", 9, "02" * 32)
    other = {"rolloutCid": "bafy-other", "updateCid": "bafy-other-update", "workUnits": 11}
    copied, replayed = adversary_of("copied"), adversary_of("replay")
    assert copied is not None and replayed is not None
    assert copied.choose_submission(mine, lambda: [], []) is None  # waits for someone to copy
    assert copied.choose_submission(mine, lambda: [other], []) == RoundRecord(
        "prepared", "bafy-other", "bafy-other-update", 11, mine.proofs_digest
    )
    assert replayed.choose_submission(mine, lambda: [], []) == mine  # its first round is honest
    assert replayed.choose_submission(mine, lambda: [], [earlier]) == earlier
    assert adversary_of("withheld") is not None and not ADVERSARIES["withheld"].stores_artifacts
    with pytest.raises(ConfigError, match="unknown adversary"):
        adversary_of("sneaky")
