"""The whole lifecycle through the Python chain layer on a real Anvil, every balance checked
against the spec's split: bounty 1000 over 2 rounds (500 a round: 450 for trainers, 50 for checks),
slash 500 (half to the finders, half back to the task), validator slash 10, bond 50."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.devnet import distinct_checks, fix_check_seed_where
from helpers.views import assert_views_match_web3
from helpers.warm import run_crucible

from protocol.accounts import Signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.chain import devnet
from protocol.chain.assignment import (
    aggregator_positions,
    assigned_positions,
    committee_positions,
    holders,
)
from protocol.chain.client import Crucible, Role
from protocol.chain.ids import commitment, decode_submission_id, submission_id
from protocol.chain.params import TaskParams, demo_task_params
from protocol.chain.seeds import HASH_HORIZON, check_seed, dispute_seed
from protocol.errors import ConfigError, ContractRevert

pytestmark = pytest.mark.integration
TOKEN = 10**18


def cid(text: str) -> str:
    return cid_of_bytes(text.encode())


PARAMS = demo_task_params()


def setup_round(crucible: Crucible, dev: list[Signer]) -> tuple[Crucible, int, dict[str, int]]:
    """Task 1 with trainers dev1-dev3 (300, 100, 200 units) and validators dev4-dev8, and a check seed that
    seats distinct validators on dev1's check (`distinct_checks`); returns the connection to go on with."""
    task_id = seated_task(crucible, dev, PARAMS)
    ids = {}
    for trainer, units in zip(dev[1:4], (300, 100, 200), strict=True):
        ids[trainer.name] = crucible.submit_work(
            trainer, task_id, 0, cid(f"r-{trainer.name}"), cid("u"), units, bytes(32)
        )
    wish = distinct_checks(ids["dev1"])
    crucible = fix_check_seed_where(crucible.chain.rpc_url, crucible.deployment, dev[0], task_id, wish)
    return crucible, task_id, ids


def seated_task(crucible: Crucible, dev: list[Signer], params: TaskParams) -> int:
    """A task with `params`, trainers dev1-dev3 staked and validators dev4-dev8 seated; returns its id."""
    task_id = crucible.create_task(dev[0], params, cid("model"), cid("env"))
    for trainer in dev[1:4]:
        crucible.stake(trainer, 1000 * TOKEN, Role.TRAINER)
    for validator in dev[4:9]:
        crucible.stake(validator, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(validator, task_id)
    return task_id


def small_task(crucible: Crucible, dev: list[Signer], params: TaskParams) -> int:
    """A task with `params`, trainer dev1 staked and validators dev4-dev6 seated; returns its id."""
    task_id = crucible.create_task(dev[0], params, cid("model"), cid("env"))
    crucible.stake(dev[1], 1000 * TOKEN, Role.TRAINER)
    for validator in dev[4:7]:
        crucible.stake(validator, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(validator, task_id)
    return task_id


def by_address(dev: list[Signer]) -> dict[str, Signer]:
    return {signer.address: signer for signer in dev}


def ballots(crucible: Crucible, dev: list[Signer], sid: int, valid: bool) -> list[tuple[int, Signer, bool, str]]:
    """Every assigned validator's vote `valid` on `sid` (one vote covers every position a validator holds)."""
    return [(sid, by_address(dev)[address], valid, cid(f"evidence-{sid}-{address}"))
            for address in dict.fromkeys(crucible.assigned_validators(sid))]  # fmt: skip


def attest_all(crucible: Crucible, dev: list[Signer], sid: int, valid: bool) -> list[str]:
    """Every assigned validator commits `valid` on `sid` and reveals it (the clock moves to the reveal phase)."""
    devnet.vote_all(crucible, ballots(crucible, dev, sid, valid))
    return crucible.assigned_validators(sid)


def test_ids_and_commitments_match_the_contract(crucible: Crucible, dev: list[Signer]) -> None:
    crucible, task_id, ids = setup_round(crucible, dev)
    trainer = dev[1].address
    assert ids["dev1"] == submission_id(task_id, 0, trainer)
    assert decode_submission_id(ids["dev1"]) == (task_id, 0, trainer)
    digest = b"\x07" * 32
    ours = commitment(crucible.chain.chain_id, crucible.market.address, task_id, 0, 0, trainer, digest)
    assert ours == crucible.commitment_of(task_id, 0, 0, trainer, digest)
    assert ours != crucible.commitment_of(task_id, 1, 1, trainer, digest)
    assert ours != crucible.commitment_of(task_id, 1, 0, trainer, digest)
    (event,) = [e for e in crucible.submissions(task_id, 0) if e["trainer"] == trainer]
    assert event["baseRound"] == 0
    assert event["commitment"] == commitment(
        crucible.chain.chain_id, crucible.market.address, task_id, 0, 0, trainer, bytes(32)
    )


def test_full_lifecycle_balances(crucible: Crucible, dev: list[Signer]) -> None:
    """A round with two honest trainers and a cheat, its dispute and settlement, every balance checked (and,
    on the way, every view the client reads gives what web3's own call gives: `assert_views_match_web3`)."""
    start = {signer.address: crucible.balance_of(signer.address) for signer in dev}
    crucible, task_id, ids = setup_round(crucible, dev)
    honest_a, honest_b, cheat = ids["dev1"], ids["dev2"], ids["dev3"]

    # Sampled and assigned: p = 1, three positions each (held by distinct validators with this seed).
    for sid in ids.values():
        assigned = crucible.assigned_validators(sid)
        assert crucible.is_sampled(sid) and len(assigned) == 3
        assert set(assigned) <= set(crucible.validators_of(task_id))
    devnet.vote_all(crucible, ballots(crucible, dev, honest_a, True) + ballots(crucible, dev, honest_b, True)
                    + ballots(crucible, dev, cheat, False))  # fmt: skip
    assert crucible.submission(cheat).rejected
    assert crucible.round(task_id, 0).included_units == 400

    rounds_end = crucible.deadlines(task_id, 0)
    devnet.warp_to(crucible.chain, rounds_end.validate)
    # The cheat disputes its rejection: the committee (three positions drawn by stake over the whole seat
    # stake, finders included — an appeal goes to the same draw, not to whoever is left) confirms it and
    # takes the bond.
    crucible.dispute(dev[3], cheat)
    devnet.finish_dispute_seed(crucible, dev[0], cheat)
    committee = crucible.dispute_committee(cheat)
    assert len(committee) == 3 and set(committee) <= set(crucible.validators_of(task_id))
    assert_views_match_web3(crucible, task_id, cheat, dev, PARAMS)
    devnet.vote_dispute_all(
        crucible, cheat, [(by_address(dev)[a], False, cid("recheck")) for a in dict.fromkeys(committee)]
    )
    crucible.resolve_dispute(dev[0], cheat)
    assert not crucible.dispute_state(cheat).upheld

    next_cid = cid("checkpoint-1")
    for address in dict.fromkeys(crucible.aggregators(task_id, 0)):
        crucible.propose_checkpoint(by_address(dev)[address], task_id, 0, next_cid)
    devnet.warp_to(crucible.chain, rounds_end.challenge)
    crucible.finalise_round(dev[0], task_id)
    assert crucible.round(task_id, 1).checkpoint == crucible.round(task_id, 0).agreed_next != bytes(32)

    cheat_stake = crucible.stake_account(dev[3].address).staked
    for sid in ids.values():
        crucible.settle(dev[0], sid)
    with pytest.raises(ContractRevert, match="MarketAlreadySettled"):
        crucible.settle(dev[0], cheat)
    assert crucible.stake_account(dev[3].address).staked == cheat_stake - 500 * TOKEN
    claimed = {signer.address: crucible.claim(signer) for signer in dev[1:9] if crucible.credit_of(signer.address)}
    assert claimed[dev[1].address] == 450 * TOKEN * 300 // 400
    assert claimed[dev[2].address] == 450 * TOKEN - 450 * TOKEN * 300 // 400
    assert dev[3].address not in claimed
    validators_paid = sum(amount for address, amount in claimed.items() if address in {s.address for s in dev[4:9]})
    # Fees of the round (50), the finders' half of the slash (250), the lost bond (50).
    assert validators_paid == (50 + 250 + 50) * TOKEN

    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 1).challenge)
    crucible.finalise_round(dev[0], task_id)
    assert crucible.task(task_id).ended
    refunded = crucible.refund(dev[0], task_id)
    assert refunded == 250 * TOKEN + 500 * TOKEN  # the slash's other half and the idle round 1
    assert crucible.balance_of(crucible.market.address) == 0, "nothing stuck in the market"
    for validator in dev[4:9]:
        crucible.leave_task(validator, task_id)
        assert crucible.stake_account(validator.address).locked == 0
    # The history is in the events: three settlements, one trainer slash, one lost dispute.
    settled = crucible.events("TaskMarket", "Settled")
    assert sorted(int(e["submissionId"]) for e in settled) == sorted(ids.values())
    assert [e["operator"] for e in crucible.events("StakeManager", "Slashed")] == [dev[3].address]
    assert [e["upheld"] for e in crucible.events("TaskMarket", "DisputeResolved")] == [False]
    # Money check: everything that left someone arrived somewhere.
    end = {signer.address: crucible.balance_of(signer.address) for signer in dev}
    staked = sum(crucible.stake_account(signer.address).staked for signer in dev)
    assert sum(start.values()) == sum(end.values()) + staked


def test_wrongly_rejected_trainer_wins_dispute(crucible: Crucible, dev: list[Signer]) -> None:
    crucible, task_id, ids = setup_round(crucible, dev)
    honest = ids["dev1"]
    liars = attest_all(crucible, dev, honest, False)
    assert crucible.submission(honest).rejected
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).validate)
    crucible.dispute(dev[1], honest)
    devnet.finish_dispute_seed(crucible, dev[0], honest)
    committee = list(dict.fromkeys(crucible.dispute_committee(honest)))
    devnet.vote_dispute_all(crucible, honest, [(by_address(dev)[address], True, cid("fine")) for address in committee])
    crucible.resolve_dispute(dev[0], honest)
    assert crucible.dispute_state(honest).upheld and not crucible.submission(honest).rejected
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).challenge)
    crucible.finalise_round(dev[0], task_id)
    stake_before = crucible.stake_account(dev[1].address).staked
    liar_stakes = {address: crucible.stake_account(address).staked for address in liars}
    crucible.settle(dev[0], honest)
    assert crucible.stake_account(dev[1].address).staked == stake_before, "honest stake intact"
    # Its bond back and its share: 450 * 300 / 600 (all three submissions included).
    assert crucible.credit_of(dev[1].address) == 50 * TOKEN + 450 * TOKEN * 300 // 600
    for address in liars:
        assert crucible.stake_account(address).staked == liar_stakes[address] - 10 * TOKEN
    assert sum(crucible.credit_of(address) for address in committee) == 30 * TOKEN


def test_frivolous_dispute_loses_bond(crucible: Crucible, dev: list[Signer]) -> None:
    crucible, task_id, ids = setup_round(crucible, dev)
    honest = ids["dev2"]
    attest_all(crucible, dev, honest, True)
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).validate)
    auditor = dev[9]
    before = crucible.balance_of(auditor.address)
    crucible.dispute(auditor, honest)
    devnet.finish_dispute_seed(crucible, dev[0], honest)
    committee = list(dict.fromkeys(crucible.dispute_committee(honest)))
    devnet.vote_dispute_all(crucible, honest, [(by_address(dev)[address], True, cid("fine")) for address in committee])
    crucible.resolve_dispute(dev[0], honest)
    assert before - crucible.balance_of(auditor.address) == 50 * TOKEN
    assert crucible.credit_of(auditor.address) == 0
    assert sum(crucible.credit_of(address) for address in committee) == 50 * TOKEN


def test_a_losing_vote_is_answered_for_before_leaving_and_can_cost_the_seat(
    crucible: Crucible, dev: list[Signer], crucible_home: Path, tmp_path: Path
) -> None:
    """Issue 17's validator rules through the Python client and the validator command: a vote keeps its
    stake until settled (`leave_task` refused, the seat shows it pending), and a slash below the task's
    minimum benches the validator, which `crucible validator run` then refuses in one line."""
    params = demo_task_params(rounds=2, validators_per_check=3, min_validator_stake_wei=150 * TOKEN,
                              validator_slash_wei=100 * TOKEN, dispute_bond_wei=100 * TOKEN)  # fmt: skip
    task_id = small_task(crucible, dev, params)
    sid = crucible.submit_work(dev[1], task_id, 0, cid("r"), cid("u"), 10, bytes(32))
    crucible = fix_check_seed_where(crucible.chain.rpc_url, crucible.deployment, dev[0], task_id, distinct_checks(sid))
    lazy, *honest = crucible.assigned_validators(sid)
    caught = [(sid, by_address(dev)[address], False, cid(f"caught-{address}")) for address in honest]
    devnet.vote_all(crucible, [(sid, by_address(dev)[lazy], True, cid("lazy")), *caught])
    assert crucible.seat_of(task_id, lazy).pending_votes == 1
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).challenge)
    crucible.finalise_round(dev[0], task_id)
    crucible.settle(dev[9], sid)  # anyone settles
    seat = crucible.seat_of(task_id, lazy)
    assert (seat.pending_votes, seat.benched) == (0, True)
    assert crucible.stake_account(lazy).staked == 100 * TOKEN
    assert [e["validator"] for e in crucible.events("TaskMarket", "ValidatorBenched")] == [lazy]

    # Its validator process refuses to start, in one line, and sends nothing.
    book = tmp_path / "deployment.json"
    command = [str(Path(sys.executable).parent / "crucible"), "--rpc", crucible.chain.rpc_url, "--deployment",
               str(book), "validator", "run", "--task", str(task_id),
               "--account", by_address(dev)[lazy].name]  # fmt: skip
    nonce = crucible.chain.w3.eth.get_transaction_count(lazy)  # type: ignore[arg-type]
    done = run_crucible(command, {**os.environ, "CRUCIBLE_HOME": str(crucible_home)}, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "lost its seat" in done.stderr and "Traceback" not in done.stderr
    assert crucible.chain.w3.eth.get_transaction_count(lazy) == nonce  # type: ignore[arg-type]
    # A seat stake below the task's minimum is refused the same way before joining.
    newcomer = dev[7]
    command[-1] = newcomer.name
    environment = {**os.environ, "CRUCIBLE_HOME": str(crucible_home)}
    done = subprocess.run([*command, "--seat-stake", "149"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=environment)  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "--seat-stake 149 CRU is below task" in done.stderr and "150 CRU" in done.stderr
    assert crucible.seat_of(task_id, newcomer.address).slot == 0

    # A vote of round 1 keeps its stake until settled, even after the task ends.
    sid = crucible.submit_work(dev[1], task_id, 1, cid("r1"), cid("u1"), 10, bytes(32))

    # A benched seat is still drawn (its positions go unvoted): the seed is one that draws someone else too.
    def someone_else(chain_view: Crucible) -> bool:
        return any(a != lazy for a in chain_view.assigned_validators(sid))

    crucible = fix_check_seed_where(crucible.chain.rpc_url, crucible.deployment, dev[0], task_id, someone_else)
    voter = next(a for a in crucible.assigned_validators(sid) if a != lazy)  # it votes all the positions it holds
    devnet.vote_all(crucible, [(sid, by_address(dev)[voter], True, cid("r1-vote"))])
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 1).challenge)
    crucible.finalise_round(dev[0], task_id)
    assert crucible.task(task_id).ended
    with pytest.raises(ContractRevert, match="MarketVotesUnsettled"):
        crucible.leave_task(by_address(dev)[voter], task_id)
    crucible.settle(dev[9], sid)
    crucible.leave_task(by_address(dev)[voter], task_id)  # answered for: free to go
    crucible.leave_task(by_address(dev)[lazy], task_id)
    assert crucible.stake_account(voter).locked == 0 and crucible.stake_account(lazy).locked == 0


def test_the_draw_twin_is_the_market_bit_for_bit(crucible: Crucible, dev: list[Signer]) -> None:
    """protocol/chain/assignment.py against the market's own draws (TaskMarketLens, Seats) on the devnet, with
    seats of unequal stake: every check's holders, the aggregators, the check seed from the seed block's
    prevrandao and a dispute's committee over the whole seat stake. Broken version: make `holders` bisect with
    `bisect_left` (a position at a range's first unit then goes to the member before), or take the seed from
    the block's hash in `seeds.check_seed`'s caller below."""
    task_id = crucible.create_task(dev[0], PARAMS, cid("model"), cid("env"))
    for trainer in dev[1:4]:
        crucible.stake(trainer, 1000 * TOKEN, Role.TRAINER)
    for validator, seat in zip(dev[4:9], (100, 250, 100, 400, 150), strict=True):
        crucible.stake(validator, seat * TOKEN, Role.VALIDATOR)
        crucible.join_task(validator, task_id, seat * TOKEN)
    ids = [crucible.submit_work(t, task_id, 0, cid(f"r-{t.name}"), cid("u"), 10, bytes(32)) for t in dev[1:4]]
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).submit)
    devnet.fix_check_seed(crucible, dev[0], task_id)
    state = crucible.round(task_id, 0)
    mix = bytes(crucible.chain.w3.eth.get_block(state.seed_block)["mixHash"])
    assert state.check_seed == check_seed(mix, task_id, 0)
    members = crucible.members_of(task_id)[: state.validator_count]
    assert state.seat_stake == 1000 * TOKEN and [m.start for m in members] == [
        s * TOKEN for s in (0, 100, 350, 450, 850)
    ]
    k = PARAMS.validators_per_check
    for sid in ids:
        drawn = assigned_positions(state.check_seed, sid, state.seat_stake, k)
        assert holders(members, drawn) == crucible.assigned_validators(sid)
    drawn = aggregator_positions(state.check_seed, state.seat_stake, k)
    assert holders(members, drawn) == crucible.aggregators(task_id, 0)
    devnet.vote_all(crucible, [ballot for sid in ids for ballot in ballots(crucible, dev, sid, True)])
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).validate)
    disputed = ids[0]
    crucible.dispute(dev[9], disputed)
    seed_block = crucible.dispute_state(disputed).seed_block
    devnet.finish_dispute_seed(crucible, dev[9], disputed)
    mix = bytes(crucible.chain.w3.eth.get_block(seed_block)["mixHash"])
    assert crucible.dispute_state(disputed).seed == dispute_seed(mix, disputed)
    committee = committee_positions(dispute_seed(mix, disputed), state.seat_stake, k)
    assert holders(members, committee) == crucible.dispute_committee(disputed)


def test_a_round_past_its_check_does_not_hold_up_the_next_ones_seed(crucible: Crucible, dev: list[Signer]) -> None:
    """Rounds opened ahead each wait for their own seed block. A round whose validate deadline passed with its
    seed unfixed stays unverified (the market skips it), and the header `fix_check_seed` sends must be the live
    round's block, not the stale round's. Broken version: drop `now < deadlines.validate` from
    `Crucible._seed_header` — the stale round's header is sent for ever and round 1 is never checked."""
    params = demo_task_params(max_staleness=1)
    task_id = small_task(crucible, dev, params)
    crucible.submit_work(dev[1], task_id, 0, cid("r0"), cid("u0"), 10, bytes(32))
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).submit)
    crucible.open_next_round(dev[0], task_id)
    crucible.fix_check_seed(dev[0], task_id)  # round 0 asks for a block, which then passes unused
    assert crucible.round(task_id, 0).seed_block
    crucible.submit_work(dev[1], task_id, 1, cid("r1"), cid("u1"), 10, bytes(32), base_round=0)
    round_0, round_1 = crucible.deadlines(task_id, 0), crucible.deadlines(task_id, 1)
    devnet.warp_to(crucible.chain, max(round_0.validate, round_1.submit))
    crucible.fix_check_seed(dev[0], task_id)  # round 1 asks for its block
    assert crucible.round(task_id, 1).seed_block > crucible.round(task_id, 0).seed_block
    while crucible.chain.block_number() <= crucible.round(task_id, 1).seed_block:
        devnet.advance_time(crucible.chain, 1)
    crucible.fix_check_seed(dev[0], task_id)
    assert crucible.round(task_id, 1).check_seed != bytes(32)
    assert crucible.round(task_id, 0).check_seed == bytes(32), "a round past its validate deadline stays unverified"


def test_a_dispute_on_a_round_never_checked_is_refused_in_one_line(crucible: Crucible, dev: list[Signer]) -> None:
    """A round whose check never started (no seed by its validate deadline) has no committee to appeal to:
    `Crucible.require_committee`, which `audit dispute` and the validator call before they send, refuses in one
    line, and the market refuses the dispute too. Broken version: drop the check-seed test from
    `require_committee` and no ConfigError is raised."""
    task_id = small_task(crucible, dev, PARAMS)
    sid = crucible.submit_work(dev[1], task_id, 0, cid("r"), cid("u"), 10, bytes(32))
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).validate)
    with pytest.raises(ConfigError) as refused:
        crucible.require_committee(sid)
    assert "no committee can judge" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ContractRevert, match="MarketNoCommittee"):
        crucible.dispute(dev[9], sid)


def test_a_dispute_whose_seed_block_is_gone_gets_another(crucible: Crucible, dev: list[Signer]) -> None:
    """Nobody fixed a dispute's seed within 256 blocks of its seed block, whose hash is then gone:
    `Crucible.fix_dispute_seed` (what the validator sends before it votes) moves the seed block ahead instead of
    sending a header the chain can no longer check, and the seed is fixed from the new block. Broken version:
    send the old block's header regardless and the market refuses it (MarketWrongHeader)."""
    crucible, task_id, ids = setup_round(crucible, dev)
    honest = ids["dev2"]
    attest_all(crucible, dev, honest, True)
    devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).validate)
    crucible.dispute(dev[9], honest)
    old = crucible.dispute_state(honest).seed_block
    crucible.chain.w3.provider.make_request("anvil_mine", [hex(HASH_HORIZON + 2)])  # type: ignore[arg-type]
    assert crucible.fix_dispute_seed(dev[0], honest) is not None
    moved = crucible.dispute_state(honest)
    assert moved.seed == bytes(32) and moved.seed_block > old + HASH_HORIZON
    assert [int(e["submissionId"]) for e in crucible.events("TaskMarket", "DisputeBlockMoved")] == [honest]
    devnet.finish_dispute_seed(crucible, dev[0], honest)
    mix = bytes(crucible.chain.w3.eth.get_block(moved.seed_block)["mixHash"])
    assert crucible.dispute_state(honest).seed == dispute_seed(mix, honest)
    assert len(crucible.dispute_committee(honest)) == PARAMS.validators_per_check


def test_a_canary_slashes_its_lazy_checkers_and_pays_its_catcher(
    crucible: Crucible, dev: list[Signer], tmp_path: Path
) -> None:
    """The creator plants a canary through dev3 with the tag its node makes (`node.canary.Canary`); two of its
    three checkers attest it valid without looking, one invalid. Revealed with the salt the chain checks against
    the stored tag (the Python twin of `Ids.canaryTag` agrees with the contract or the reveal reverts), it leaves
    the aggregate; at settlement the lazy two lose the validator slash, the catcher gets the canary's share of the
    trainer budget, dev3 keeps its stake and is paid nothing, and the auditor's money check balances to the wei.
    Broken version: reveal with another salt — `MarketNotCanary`, and the canary is paid as work."""
    from auditor.index import EventIndex
    from auditor.money import money_check
    from node.canary import Canary

    params = demo_task_params(canary_rate_ppm=400_000)
    task_id = seated_task(crucible, dev, params)
    canary = Canary(dev[0])
    market = crucible.market.address
    planted = submission_id(task_id, 0, dev[3].address)
    ids = [crucible.submit_work(t, task_id, 0, cid(f"r-{t.name}"), cid("u"), 100, bytes(32)) for t in dev[1:3]]
    crucible.submit_work(dev[3], task_id, 0, cid("r-canary"), cid("u"), 100, bytes(32), tag=canary.tag(market, planted))
    assert crucible.submission(planted).tag == canary.tag(market, planted)[:12]
    crucible = fix_check_seed_where(crucible.chain.rpc_url, crucible.deployment, dev[0], task_id,
                                    distinct_checks(planted))  # fmt: skip
    assigned = crucible.assigned_validators(planted)
    lazy, catcher = assigned[:2], assigned[2]
    devnet.vote_all(crucible, [ballot for sid in ids for ballot in ballots(crucible, dev, sid, True)]
                    + [(planted, by_address(dev)[address], True, cid("not checked")) for address in lazy]
                    + [(planted, by_address(dev)[catcher], False, cid("checked"))])  # fmt: skip
    assert not crucible.submission(planted).rejected
    deadlines = crucible.deadlines(task_id, 0)
    with pytest.raises(ContractRevert, match="MarketOutsideWindow"):
        crucible.reveal_canary(dev[0], planted, canary.salt(market, planted))
    devnet.warp_to(crucible.chain, deadlines.validate)
    with pytest.raises(ContractRevert, match="MarketNotCanary"):
        crucible.reveal_canary(dev[0], planted, canary.salt(market, ids[0]))
    crucible.reveal_canary(dev[0], planted, canary.salt(market, planted))
    state = crucible.submission(planted)
    assert state.canary and state.rejected and crucible.round(task_id, 0).canaries == 1
    stakes = {address: crucible.stake_account(address).staked for address in [*assigned, dev[3].address]}
    devnet.warp_to(crucible.chain, deadlines.challenge)
    crucible.finalise_round(dev[0], task_id)
    budget = crucible.round(task_id, 0).trainer_budget_remaining
    for sid in [*ids, planted]:
        crucible.settle(dev[0], sid)
    for address in lazy:
        assert crucible.stake_account(address).staked == stakes[address] - params.validator_slash_wei
    assert crucible.stake_account(catcher).staked == stakes[catcher]
    assert crucible.stake_account(dev[3].address).staked == stakes[dev[3].address]
    assert crucible.credit_of(dev[3].address) == 0
    index = EventIndex(crucible, tmp_path / "index.sqlite")
    try:
        index.sync()
        books = money_check(crucible, index, task_id)
    finally:
        index.close()
    # The three share the trainer budget by units, to the wei; the canary's third is its catcher's prize.
    prize = books.credited["canary_prize"]
    assert books.balanced and budget // 3 <= prize <= budget // 3 + 1
    assert crucible.credit_of(dev[1].address) + crucible.credit_of(dev[2].address) + prize == budget
