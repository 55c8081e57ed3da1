"""The validator's checks without a chain: honest work passes every check, each adversary fails the
check meant for it, and a check stops the chain of checks at the first failure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from node.adversary import adversary_of
from node.work import RoundWork, produce_work
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.manifest import UpdateEncoding, save_state_dict
from protocol.artifacts.store import LocalStore
from protocol.chain.assignment import (
    Member,
    aggregator_positions,
    assigned_positions,
    bits_within,
    committee_positions,
    holders,
    is_sampled,
)
from protocol.errors import ArtifactError
from protocol.ml.compression import carried_residual, compress, decode, encode, load_residual, save_update
from protocol.ml.envs.spec import EncodingSettings, EnvSpec
from protocol.ml.model import LoadedModel
from protocol.work.checks import Artifacts, Claim, Verdict, stop_problem, stored_artifacts, verify_submission
from protocol.work.evidence import evidence_bytes, evidence_document, parse_evidence
from protocol.work.round import RoundContext
from protocol.work.update_checks import relative_errors

OTHER_NODE = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


def claim_of(work: RoundWork, context: RoundContext) -> Claim:
    """What the chain would record had `context.node` submitted this work in `context`'s round."""
    digest = work.rollouts.proofs_digest()
    bound = context.commitment(digest)
    return Claim(context, cid_of_bytes(work.rollouts.to_bytes()), "update-cid", work.rollouts.work_units, bound)


def check(
    work: RoundWork, tiny: LoadedModel, spec: EnvSpec, context: RoundContext, claim: Claim | None = None
) -> Verdict:
    artifacts = Artifacts(lambda: work.rollouts.to_bytes(), lambda: work.update)
    return verify_submission(claim or claim_of(work, context), spec, tiny, artifacts)


def test_honest_work_passes_every_check_with_its_figures(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    verdict = check(produce_work(tiny, spec, context), tiny, spec, context)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]
    names = [r.check for r in verdict.results]
    assert names == ["availability", "format", "prompts", "rewards", "toploc", "sampling", "update"]
    by_name = {r.check: r for r in verdict.results}
    assert by_name["toploc"].figures["chunks"] == spec.training.prompts_per_round * spec.training.group_size
    assert by_name["sampling"].figures["mismatches"] == 0
    assert by_name["update"].figures["max_relative_error"] <= spec.verification.update_tolerance


def test_honest_work_passes_at_another_batch_size_and_thread_count(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    threads = torch.get_num_threads()
    spec.training.micro_batch_size = 3
    try:
        torch.set_num_threads(1)
        work = produce_work(tiny, spec, context, batch_size=5)
    finally:
        torch.set_num_threads(threads)
    spec.training.micro_batch_size = 64
    verdict = check(work, tiny, spec, context)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]


# Which check must catch each work-level cheat. Broken versions to check this test: make check_toploc
# always pass → wrong-model passes; drop the margin test in check_sampling → forged-tokens passes.
EXPECTED = {
    "wrong-model": {"toploc"},
    "low-precision": {"toploc", "sampling"},
    "forged-tokens": {"sampling"},
    "cherry-pick": {"sampling"},
    "past-eos": {"format"},
    "truncated": {"format"},
    "inflated-rewards": {"rewards"},
    "garbage-update": {"update"},
    "poisoned-update": {"update"},
    "scaled-update": {"update"},
    "random-update": {"update"},
    "steady-push": {"update"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_work_adversary_fails_the_check_meant_for_it(
    tiny: LoadedModel, spec: EnvSpec, name: str, context: RoundContext
) -> None:
    # Round 0: garbage-update sends noise in even rounds.
    verdict = check(produce_work(tiny, spec, context, adversary=adversary_of(name)), tiny, spec, context)
    assert not verdict.valid
    assert verdict.failed_check in EXPECTED[name], verdict.results[-1].as_json()
    assert verdict.results[-1].failures, "a failure names where it failed"
    # Nothing after the failing check ran.
    assert verdict.results[-1].check == verdict.failed_check


def test_completions_that_stop_anywhere_but_where_the_sampler_stops_are_refused(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    """Sampling past the end token with the same seeded sampler claims more work units; cutting completions short
    reads rewards off unfinished text. Every token of both is its seed's sample with honest proofs: before the stop
    rule (drop the `stop_problem` branch of check_format) both passed every check, past-eos with 4.2x the honest
    work units (46 -> 192). Now the format check names the first completion that stops elsewhere."""
    honest = produce_work(tiny, spec, context)
    stops = [len(s.completion_ids) for s in honest.rollouts.samples]
    assert any(n < spec.sampling.max_new_tokens for n in stops), "the tiny model ends some completions early"
    past = produce_work(tiny, spec, context, adversary=adversary_of("past-eos"))
    assert past.rollouts.work_units > honest.rollouts.work_units
    cut = produce_work(tiny, spec, context, adversary=adversary_of("truncated"))
    assert cut.rollouts.work_units < honest.rollouts.work_units
    for work, found in ((past, "an end token at position"), (cut, "without an end token and short of")):
        verdict = check(work, tiny, spec, context)
        assert verdict.failed_check == "format", verdict.results[-1].as_json()
        failure = verdict.results[-1].failures[0]
        assert failure["field"] == "completion_ids" and found in failure["found"], failure
    # A completion that runs to max_new_tokens without an end token is the sampler's own stop.
    assert stop_problem([5] * 12, tiny.tokenizer.eos_id, 12) is None
    assert stop_problem([5, tiny.tokenizer.eos_id], tiny.tokenizer.eos_id, 12) is None


def test_copied_replayed_and_withheld_submissions_fail_early(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    current = dataclasses.replace(context, round_index=1)
    theirs = produce_work(tiny, spec, dataclasses.replace(current, node=OTHER_NODE))
    mine = produce_work(tiny, spec, current)
    # copied: another node's CIDs under my submission (and my own proofs digest in the commitment).
    copied = dataclasses.replace(claim_of(theirs, current), commitment=claim_of(mine, current).commitment)
    verdict = check(theirs, tiny, spec, current, copied)
    assert verdict.failed_check == "format"
    assert {f["field"] for f in verdict.results[-1].failures} >= {"node", "commitment"}
    # replay: last round's file resubmitted in this round.
    earlier = produce_work(tiny, spec, context)
    replayed = dataclasses.replace(claim_of(earlier, context), context=current)
    verdict = check(earlier, tiny, spec, current, replayed)
    assert verdict.failed_check == "format"
    assert "round" in {f["field"] for f in verdict.results[-1].failures}

    # withheld: no store serves the bytes.
    def unavailable() -> bytes:
        raise ArtifactError("no relay serves bafy...")

    verdict = verify_submission(claim_of(mine, current), spec, tiny, Artifacts(unavailable, lambda: mine.update))
    assert verdict.failed_check == "availability" and len(verdict.results) == 1


def test_wrong_prompts_and_a_missing_update_tensor_are_named(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    work = produce_work(tiny, spec, context)
    swapped = work.rollouts.model_copy(deep=True)
    swapped.samples[0], swapped.samples[4] = swapped.samples[4], swapped.samples[0]
    verdict = check(RoundWork(swapped, work.update), tiny, spec, context)
    assert verdict.failed_check == "prompts"
    assert [f["sample"] for f in verdict.results[-1].failures] == [0, 4]
    partial = dict(work.update)
    dropped = sorted(partial)[0]
    del partial[dropped]
    verdict = check(RoundWork(work.rollouts, partial), tiny, spec, context)
    assert verdict.failed_check == "update"
    assert verdict.results[-1].failures[0]["tensor"] == dropped


def test_relative_errors_are_zero_for_equal_and_one_for_zero_updates() -> None:
    replayed = {"a": torch.ones(3), "b": torch.tensor([3.0, 4.0]), "z": torch.zeros(2)}
    claimed = {"a": torch.ones(3), "b": torch.zeros(2), "z": torch.tensor([1e-3, 0.0])}
    errors, wrong = relative_errors(claimed, replayed)
    assert errors == pytest.approx({"a": 0.0, "b": 1.0, "z": 1.0}) and wrong == []
    errors, wrong = relative_errors({"a": torch.ones(4), "c": torch.ones(1)}, replayed)
    assert set(wrong) == {"a", "b", "c", "z"}


def test_evidence_round_trips_and_records_the_failure(tiny: LoadedModel, spec: EnvSpec, context: RoundContext) -> None:
    work = produce_work(tiny, spec, context, adversary=adversary_of("inflated-rewards"))
    claim = claim_of(work, context)
    verdict = check(work, tiny, spec, context, claim)
    document = evidence_document(7, OTHER_NODE, claim, verdict, "attest")
    parsed = parse_evidence(evidence_bytes(document), "e")
    assert parsed["valid"] is False and parsed["failed_check"] == "rewards"
    assert parsed["checks"][-1]["failures"][0]["expected"] < parsed["checks"][-1]["failures"][0]["found"]
    with pytest.raises(ArtifactError, match=r"not a crucible\.evidence"):
        parse_evidence(b'{"schema": "other"}', "e")


def test_draws_weigh_seats_by_stake() -> None:
    seed = b"\x07" * 32
    # Positions fall in [0, total) and depend on the submission.
    drawn = assigned_positions(seed, 1, 1000, 16)
    assert len(drawn) == 16 and all(0 <= p < 1000 for p in drawn)
    assert len({tuple(assigned_positions(seed, sid, 10**21, 3)) for sid in range(20)}) == 20
    assert aggregator_positions(seed, 500, 3) != assigned_positions(seed, 0, 500, 3)
    sampled = sum(is_sampled(seed, sid, 250_000) for sid in range(2000))
    assert 400 < sampled < 600
    # A member holds the positions in its range: one seat of 300 holds what three seats of 100 there do.
    members = [Member("a", 0), Member("b", 100), Member("c", 400)]
    split = [Member("a", 0), Member("b1", 100), Member("b2", 200), Member("b3", 300), Member("c", 400)]
    for sid in range(50):
        drawn = assigned_positions(seed, sid, 500, 5)
        whole = holders(members, drawn)
        parts = holders(split, drawn)
        assert [h == "b" for h in whole] == [h.startswith("b") for h in parts]
        assert bits_within(drawn, 100, 300) == sum(1 << j for j, h in enumerate(whole) if h == "b")
    # Over many draws each seat's share of positions is its share of the stake (b: 60 %).
    share = sum(holders(members, assigned_positions(seed, sid, 500, 3)).count("b") for sid in range(2000)) / 6000
    assert 0.57 < share < 0.63
    # A dispute committee is drawn over the whole seat stake, assigned validators included: each seat keeps
    # its share of the stake whoever checked the submission (a: 20 %), so a small stake outside the checkers'
    # ranges is never the whole committee.
    held = sum(holders(members, committee_positions(bytes([sid % 256, sid // 256]) * 16, 500, 3)).count("a")
               for sid in range(2000))  # fmt: skip
    assert 0.17 < held / 6000 < 0.23


def test_replaying_many_completions_at_once_equals_one_by_one(spec: EnvSpec) -> None:
    from protocol.ml.sampling import replay, replay_many

    generator = torch.Generator().manual_seed(3)
    logits = [torch.randn(n, 47, generator=generator) for n in (3, 1, 5)]
    seeds = [bytes([i]) * 32 for i in range(3)]
    tokens = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    together = replay_many(logits, seeds, tokens, spec.sampling)
    alone = [
        replay(rows, seed, claimed, spec.sampling) for rows, seed, claimed in zip(logits, seeds, tokens, strict=True)
    ]
    assert [(r.mismatches, r.margins) for r in together] == [(r.mismatches, r.margins) for r in alone]
    assert any(r.mismatches for r in together)  # random tokens disagree with their seeds somewhere


def test_hostile_proofs_and_token_ids_fail_checks_instead_of_killing_the_validator(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    import base64

    from protocol.errors import VerificationError
    from protocol.ml.proofs import verify_proofs

    work = produce_work(tiny, spec, context)
    # toploc's verifier divides by a proof's modulus: a zero one kills the process with SIGFPE.
    # Broken version to check this test: drop the proof_problem() call from verify_proofs → pytest dies.
    with pytest.raises(VerificationError, match="modulus of 0"):
        verify_proofs(torch.randn(3, 128), [b"\x00" * 258], spec.toploc)
    hostile = work.rollouts.model_copy(deep=True)
    hostile.samples[2].proofs[0] = base64.b64encode(b"\x00" * 10).decode()
    verdict = check(RoundWork(hostile, work.update), tiny, spec, context, claim_of(RoundWork(hostile, {}), context))
    assert verdict.failed_check == "format"
    assert {"sample": 2, "field": "proofs", "found": "a proof of 10 bytes, not 258"} in verdict.results[-1].failures
    outside = work.rollouts.model_copy(deep=True)
    outside.samples[1].completion_ids[0] = 10_000
    verdict = check(RoundWork(outside, work.update), tiny, spec, context, claim_of(RoundWork(outside, {}), context))
    assert verdict.failed_check == "rewards" and "outside the vocabulary" in verdict.results[-1].failures[0]["reason"]


def test_stale_work_passes_on_its_base_and_fails_on_another(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    """Pipelined rounds: round 1's work built on round 0's checkpoint (its base) passes every check when the
    claim names that base, and fails the format check when its commitment is read under another base or
    the claim names another checkpoint: the commitment binds the base round, the file names the checkpoint.
    Broken version: leave `base_round` out of `RoundContext.commitment` → the second claim passes format."""
    stale = dataclasses.replace(context, round_index=1, base_round=0)
    work = produce_work(tiny, spec, stale)
    verdict = check(work, tiny, spec, stale)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]
    # Its commitment (base 0) read as a submission on base 1: the commitment no longer matches.
    other_base = dataclasses.replace(stale, base_round=1)
    verdict = check(work, tiny, spec, other_base, dataclasses.replace(claim_of(work, stale), context=other_base))
    assert verdict.failed_check == "format"
    assert {f["field"] for f in verdict.results[-1].failures} == {"commitment"}
    # Claimed against a checkpoint other than the one it was sampled from.
    moved = dataclasses.replace(stale, checkpoint_cid=cid_of_bytes(b"round 1's checkpoint"))
    verdict = check(work, tiny, spec, moved, claim_of(work, moved))
    assert verdict.failed_check == "format"
    assert "checkpoint_cid" in {f["field"] for f in verdict.results[-1].failures}


# ---------------------------------------------------------------------------- topk updates


def encoded_check(
    work: RoundWork,
    tiny: LoadedModel,
    spec: EnvSpec,
    context: RoundContext,
    store: LocalStore,
    update_cid: str,
    previous_update: str | None,
) -> Verdict:
    claim = dataclasses.replace(claim_of(work, context), update_cid=update_cid)
    artifacts = stored_artifacts(claim, store, "cpu", lambda: previous_update)
    artifacts = dataclasses.replace(artifacts, rollout_bytes=lambda: work.rollouts.to_bytes())
    return verify_submission(claim, spec, tiny, artifacts)


def test_topk_updates_replay_through_their_residuals_and_liars_fail(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext, tmp_path: Path
) -> None:
    """Two rounds of one trainer with `topk` updates pass, the second starting from the residual the
    first carried, and re-encode bit for bit. Then three liars fail the update check:
    - a poisoned encoding whose residual absorbs the poison (R' = A - decode(E)): it replays, but E is
      not the encoding of R' + decode(E) (broken on purpose: drop the re-encoding comparison from
      `check_encoded_update` and this passes);
    - an honest encoding started from no residual although the previous submission carried one (broken:
      drop the anchor comparison);
    - an honest encoding whose committed residual is zeroed (broken: drop the replay comparison)."""
    spec.training.encoding = EncodingSettings(kind="topk", keep=4, chunk=64, bits=2)
    store = LocalStore(tmp_path / "store")
    settings = spec.training.encoding
    work = produce_work(tiny, spec, context)
    first = save_update(work.update, store, context.checkpoint_cid, settings)
    verdict = encoded_check(work, tiny, spec, context, store, first, None)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]
    figures = verdict.results[-1].figures
    assert figures["re_encoded_bit_for_bit"] == figures["tensors"] and figures["max_encoding_error"] == 0

    later = dataclasses.replace(context, round_index=1, base_round=1)
    work = produce_work(tiny, spec, later)
    residual_cid = carried_residual(first, store)
    assert residual_cid is not None
    base = load_residual(residual_cid, store)
    second = save_update(work.update, store, later.checkpoint_cid, settings, (residual_cid, base))
    verdict = encoded_check(work, tiny, spec, later, store, second, first)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]

    accumulated = {name: value + base[name] for name, value in work.update.items()}
    poison = {name: torch.ones_like(value) * float(value.abs().max()) for name, value in accumulated.items()}
    stored_poison = encode(poison, settings)
    decoded = decode(stored_poison, {name: value.shape for name, value in poison.items()}, settings)
    absorbed = {name: accumulated[name] - decoded[name] for name in accumulated}

    def lie(stored: dict[str, torch.Tensor], residual: dict[str, torch.Tensor], base_cid: str | None) -> str:
        residual_of = save_state_dict(residual, store, "residual", parent=later.checkpoint_cid)
        record = UpdateEncoding(chunk=64, keep=4, bits=2, residual=residual_of, residual_base=base_cid)
        return save_state_dict(stored, store, "update", parent=later.checkpoint_cid, encoding=record)

    honest_stored, honest_residual = compress(work.update, base, settings)
    liars = {
        "poisoned, absorbed": lie(stored_poison, absorbed, residual_cid),
        "no residual base": lie(*compress(work.update, None, settings), None),
        "zeroed residual": lie(honest_stored, {n: torch.zeros_like(v) for n, v in honest_residual.items()},
                               residual_cid),
    }  # fmt: skip
    reasons = {}
    for name, update_cid in liars.items():
        verdict = encoded_check(work, tiny, spec, later, store, update_cid, first)
        assert verdict.failed_check == "update", name
        reasons[name] = verdict.results[-1].reason + str(verdict.results[-1].failures[:1])
    assert "not the encoding of its residual plus update" in reasons["poisoned, absorbed"]
    assert "the one the trainer's previous submission carried" in reasons["no residual base"]
    assert "relative_error" in reasons["zeroed residual"]
