"""Gas of every lifecycle call, from real transaction receipts on a private Anvil.

Receipts include the 21,000 intrinsic gas and calldata that forge's gas report leaves out.
Also measures how `submitWork` and a whole vote (commitment and reveal) grow with the number of
submissions and validators.

Run: .venv/bin/python -m bench.gas [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from eth_account import Account

from node.canary import Canary
from protocol.accounts import Signer, load_signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import deploy
from protocol.chain.params import demo_task_params
from protocol.config import devnet_settings

TOKEN = 10**18
CID = cid_of_bytes(b"bench")
# A task that takes canaries (the rate costs nothing where it is unused: it shares a slot written anyway).
PARAMS = demo_task_params(
    submit_window_s=3600, validate_window_s=3600, challenge_window_s=3600, canary_rate_ppm=400_000
)


def fresh_signers(crucible: Crucible, funder: Signer, count: int, tokens: int) -> list[Signer]:
    """New accounts with ether (the devnet's setBalance) and tokens."""
    signers = []
    for index in range(count):
        account = Account.create(f"bench-{index}")
        devnet.set_balance(crucible.chain, account.address, 10**20)
        crucible.transfer(funder, account.address, tokens * TOKEN)
        signers.append(Signer(account.address, f"bench{index}", account))
    return signers


def lifecycle_gas(crucible: Crucible, dev: list[Signer]) -> dict[str, list[int]]:
    """The gas of every call of a task's lifecycle, by call."""
    return {name: [int(r["gasUsed"]) for r in receipts] for name, receipts in lifecycle_receipts(crucible, dev).items()}


def lifecycle_receipts(crucible: Crucible, dev: list[Signer]) -> dict[str, list[Any]]:
    """Runs every call of a task's lifecycle once or more (a round with a dispute, a canary, claims, a
    refund); returns their receipts by call."""
    gas: dict[str, list[Any]] = defaultdict(list)
    chain = crucible.chain

    def record(name: str, receipt: Any) -> None:
        gas[name].append(receipt)

    crucible.ensure_allowance(dev[0], crucible.market.address, PARAMS.bounty_wei)
    receipt = chain.transact(crucible.market.functions.createTask(PARAMS.as_contract_tuple(), CID, CID), dev[0])
    record("createTask", receipt)
    task_id = crucible.task_count()
    # The deterrence check's cost grows with the committee size: the largest one allowed, for the bound.
    widest = PARAMS.model_copy(update={"validators_per_check": 16})
    crucible.ensure_allowance(dev[0], crucible.market.address, widest.bounty_wei)
    function = crucible.market.functions.createTask(widest.as_contract_tuple(), CID, CID)
    record("createTask (16 per check)", chain.transact(function, dev[0]))
    for signer in dev[1:4]:
        crucible.ensure_allowance(signer, crucible.stakes.address, 1000 * TOKEN)
        record("stake (first, trainer)", chain.transact(crucible.stakes.functions.stake(1000 * TOKEN, 1), signer))
    for signer in dev[4:9]:
        crucible.ensure_allowance(signer, crucible.stakes.address, 200 * TOKEN)
        record("stake (first, validator)", chain.transact(crucible.stakes.functions.stake(200 * TOKEN, 2), signer))
        record("joinTask", crucible.join_task(signer, task_id))
    ids = []
    for signer, units in zip(dev[1:4], (300, 100, 200), strict=True):
        function = crucible.market.functions.submitWork(
            task_id, 0, 0, CID, CID, units, bytes(32), secrets.token_bytes(32)
        )
        record("submitWork", chain.transact(function, signer))
        ids.append((task_id << 192) | int(signer.address, 16))
    # dev9 plants the creator's canary.
    canary, planted = Canary(dev[0]), (task_id << 192) | int(dev[9].address, 16)
    crucible.ensure_allowance(dev[9], crucible.stakes.address, 1000 * TOKEN)
    chain.transact(crucible.stakes.functions.stake(1000 * TOKEN, 1), dev[9])
    tag = canary.tag(crucible.market.address, planted)
    record("submitWork", chain.transact(crucible.market.functions.submitWork(
        task_id, 0, 0, CID, CID, 100, bytes(32), tag), dev[9]))  # fmt: skip
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).submit)
    request, fix = devnet.fix_check_seed(crucible, dev[0], task_id)
    record("fixCheckSeed (request)", request)
    record("fixCheckSeed (fix)", fix)
    by_address = {s.address: s for s in dev}
    # A validator holding several positions votes them with one commitment and one reveal.
    verdicts = [*zip(ids, (True, True, False), strict=True), (planted, False)]
    ballots = [(sid, by_address[address], valid, CID)
               for sid, valid in verdicts for address in dict.fromkeys(crucible.assigned_validators(sid))]  # fmt: skip
    commits, reveals = devnet.vote_all(crucible, ballots)
    for committed, revealed in zip(commits, reveals, strict=True):
        record("commitAttestation", committed)
        record("attest (reveal)", revealed)
        record("a whole vote (commit + reveal)", {"gasUsed": int(committed["gasUsed"]) + int(revealed["gasUsed"])})
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).validate)
    record("revealCanary", crucible.reveal_canary(dev[0], planted, canary.salt(crucible.market.address, planted)))
    record("dispute", chain.transact(_approve_then(crucible, dev[3], ids[2]), dev[3]))
    record("fixDisputeSeed", devnet.finish_dispute_seed(crucible, dev[0], ids[2]))
    members = [(by_address[address], False, CID) for address in dict.fromkeys(crucible.dispute_committee(ids[2]))]
    for committed, revealed in zip(*devnet.vote_dispute_all(crucible, ids[2], members), strict=True):
        record("commitDisputeVote", committed)
        record("voteDispute (reveal)", revealed)
    record("resolveDispute", crucible.resolve_dispute(dev[0], ids[2]))
    for address in dict.fromkeys(crucible.aggregators(task_id, 0)):
        record("proposeCheckpoint", crucible.propose_checkpoint(by_address[address], task_id, 0, CID))
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).challenge)
    record("finaliseRound", crucible.finalise_round(dev[0], task_id))
    for sid in [*ids, planted]:
        # settle's cost follows its path (slash and finder share, validators paid or not), and which
        # path a submission takes follows the round's check seed: label each by its path so runs
        # with different seeds (and builds before and after a change) compare like with like.
        state = crucible.submission(sid)
        path = "rejected" if state.rejected else "accepted, checked" if state.voted_mask else "accepted, unchecked"
        path = "canary" if state.canary else path
        record(f"settle ({path}{', disputed' if state.disputed else ''})", crucible.settle(dev[0], sid))
    for signer in dev[1:10]:
        if crucible.credit_of(signer.address):
            record("claim", chain.transact(crucible.market.functions.claim(), signer))
    record("requestUnstake", crucible.request_unstake(dev[1], 100 * TOKEN))
    crucible.ensure_allowance(dev[1], crucible.stakes.address, TOKEN)
    record("stake (again)", chain.transact(crucible.stakes.functions.stake(TOKEN, 1), dev[1]))
    devnet.warp_to(chain, crucible.deadlines(task_id, 1).challenge)
    crucible.finalise_round(dev[0], task_id)
    record("refund", chain.transact(crucible.market.functions.refund(task_id), dev[0]))
    return gas


def _approve_then(crucible: Crucible, signer: Signer, sid: int) -> Any:
    crucible.ensure_allowance(signer, crucible.market.address, PARAMS.dispute_bond_wei)
    return crucible.market.functions.dispute(sid, crucible.submission(sid).rejected)


def scaling_gas(crucible: Crucible, dev: list[Signer], counts: tuple[int, ...]) -> list[dict[str, int]]:
    """submitWork of the n-th submission, a whole vote with n validators and settle (which finds each position's
    holder by binary search over the n members), for each n."""
    rows = []
    for count in counts:
        task_id = crucible.create_task(dev[0], PARAMS, CID, CID)
        validators = fresh_signers(crucible, dev[0], count, 200)
        for signer in validators:
            crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
            crucible.join_task(signer, task_id)
        trainers = fresh_signers(crucible, dev[0], count, 600)
        submit_gas = []
        for signer in trainers:
            crucible.stake(signer, 600 * TOKEN, Role.TRAINER)
            function = crucible.market.functions.submitWork(
                task_id, 0, 0, CID, CID, 100, bytes(32), secrets.token_bytes(32)
            )
            submit_gas.append(int(crucible.chain.transact(function, signer)["gasUsed"]))
        devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).submit)
        devnet.fix_check_seed(crucible, dev[0], task_id)
        sid = (task_id << 192) | int(trainers[-1].address, 16)
        by_address = {s.address: s for s in validators}
        commits, reveals = devnet.vote_all(
            crucible,
            [(sid, by_address[address], True, CID) for address in dict.fromkeys(crucible.assigned_validators(sid))],
        )
        attest_gas = [int(c["gasUsed"]) + int(r["gasUsed"]) for c, r in zip(commits, reveals, strict=True)]
        devnet.warp_to(crucible.chain, crucible.deadlines(task_id, 0).challenge)
        crucible.finalise_round(dev[0], task_id)
        rows.append(
            {
                "participants": count,
                "submitWork_last": submit_gas[-1],
                "submitWork_max": max(submit_gas),
                "vote_max": max(attest_gas),
                "settle_checked": int(crucible.settle(dev[0], sid)["gasUsed"]),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--counts", default="5,20,70")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anvil = devnet.start_private_chain(Path(tmp) / "anvil.log")
        try:
            chain = Chain(anvil.rpc_url)
            dev = [load_signer(f"dev{i}") for i in range(10)]
            deployment = deploy(chain, dev[0], token_holders=devnet_settings().dev_addresses, unbonding_period_s=120)
            crucible = Crucible(chain, deployment)
            lifecycle = lifecycle_gas(crucible, dev)
            scaling = scaling_gas(crucible, dev, tuple(int(c) for c in options.counts.split(",")))
        finally:
            anvil.stop()
    summary = {name: {"min": min(v), "max": max(v), "calls": len(v)} for name, v in lifecycle.items()}
    if options.json:
        print(json.dumps({"machine": platform.machine(), "lifecycle": summary, "scaling": scaling}, indent=2))
        return
    print("| call | min gas | max gas | calls |\n|---|---:|---:|---:|")
    for name, row in summary.items():
        print(f"| {name} | {row['min']:,} | {row['max']:,} | {row['calls']} |")
    print(
        "\n| validators = trainers | submitWork (n-th) | submitWork (max) | a whole vote (max) | settle (checked) |"
        "\n|---:|---:|---:|---:|---:|"
    )
    for row in scaling:
        cells = [f"{row['participants']}"] + [
            f"{row[key]:,}" for key in ("submitWork_last", "submitWork_max", "vote_max", "settle_checked")
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
