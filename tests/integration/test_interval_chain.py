"""A task's whole round on a devnet that mines a block every second, as a real chain does: an honest
trainer, a copier and two validators as real processes, so that several of them send in the same block
at every window's end (fixing the check seed, attesting, proposing, finalising, settling)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.devnet import TOKEN, create_small_task, credits, funded_account, warp
from test_faults import refund_and_balance

from protocol.accounts import Signer
from protocol.chain.client import Crucible, Role
from protocol.chain.ids import submission_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_round_on_one_second_blocks_ends_with_every_honest_process_exiting_0(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The run of issue A: sample rate 1, an honest trainer and a `copied` trainer (it resubmits the
    honest CIDs under its own commitment), two validators sharing the two positions of each check. Every
    process exits 0, however many of its transactions lost a race in a shared block; the honest trainer is
    settled and paid, the copier slashed, the validators that held positions paid, the books balanced.
    Broken version: the old `Chain._failed` (a replay on the state before the block) → a finaliser that
    lost to another in the same block gets an undecoded "transaction failed" and exits 1."""
    task = create_small_task(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], 2, rounds=1,
                             validators_per_check=2)  # fmt: skip
    task_id = task.task_id
    trainers = {name: funded_account(crucible, dev[0], f"interval-{name}") for name in ("honest", "copier")}
    for signer, _ in trainers.values():
        crucible.stake(signer, 1200 * TOKEN, Role.TRAINER)
    validators = [funded_account(crucible, dev[0], f"interval-validator{i}") for i in range(2)]
    for signer, _ in validators:
        crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(signer, task_id)
    first_block = crucible.chain.w3.eth.block_number
    honest, copier = trainers["honest"][0].address, trainers["copier"][0].address
    ids = {name: submission_id(task_id, 0, signer.address) for name, (signer, _) in trainers.items()}

    run = ("--task", str(task_id), "--account", "env", "--rounds", "1")
    roles.start("node", *run, key=trainers["honest"][1])
    roles.start("node", *run, "--adversary", "copied", key=trainers["copier"][1])
    for _, key in validators:
        roles.start("validator", *run, key=key)
    roles.wait_for("two submissions", lambda: len(crucible.submissions(task_id, 0)) == 2, 300)
    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.submit)

    def voted(mask: str) -> int:  # positions: a validator holding both of a check's positions votes them at once
        return sum(getattr(crucible.submission(s), mask).bit_count() for s in ids.values())

    roles.wait_for("four positions committed to", lambda: voted("committed_mask") == 4, 300)
    warp(crucible, deadlines.votes_revealed_from)
    roles.wait_for("four positions revealed", lambda: voted("voted_mask") == 4, 300)
    warp(crucible, deadlines.validate)
    roles.wait_for("an agreed checkpoint", lambda: crucible.round(task_id, 0).agreed_next != bytes(32), 300)
    warp(crucible, deadlines.challenge)
    for process in roles.started:
        roles.wait_for(f"`{process.command}` to finish", lambda p=process: p.process.poll() is not None, 300)
        assert process.process.returncode == 0, process.failed()

    assert not crucible.submission(ids["honest"]).rejected and crucible.submission(ids["honest"]).settled
    assert crucible.submission(ids["copier"]).rejected and crucible.submission(ids["copier"]).settled
    assert credits(crucible, task_id, honest, 0) > 0 and crucible.credit_of(honest) == 0, "paid and claimed"
    assert crucible.stake_account(honest).staked == 1200 * TOKEN
    assert crucible.stake_account(copier).staked == 1200 * TOKEN - task.params.slash_wei
    holders = {a for s in ids.values() for a in crucible.assigned_validators(s)}
    for signer, _ in validators:
        assert (credits(crucible, task_id, signer.address, 1) > 0) == (signer.address in holders)
        assert crucible.stake_account(signer.address).staked == 200 * TOKEN
    # The point of the exercise: blocks were shared, and somebody lost a race in one.
    w3 = crucible.chain.w3
    shared = [n for n in range(first_block, w3.eth.block_number + 1)
              if len(w3.eth.get_block(n)["transactions"]) >= 2]  # fmt: skip
    assert shared, "no block held two transactions"
    raced = [event for process in roles.started for event in process.seen("raced")]
    print(f"{len(shared)} shared blocks; raced: {[(e['role'], e['step'], e['revert']) for e in raced]}")
    refund_and_balance(crucible, dev[0], crucible_home, tmp_path, task_id)
