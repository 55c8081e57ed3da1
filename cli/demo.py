"""`crucible demo`, until the end-to-end demo lands: one task's whole lifecycle on a private Anvil.

The trainers' work and the validators' verdicts are scripted here (the real node and validator
come with their issues); every call, transfer, slash and payment is real, on a real chain.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from cli.output import emit_json, stderr, stdout
from protocol import devnet
from protocol.accounts import Signer, load_signer
from protocol.chain import Chain
from protocol.cid import cid_of_bytes
from protocol.client import Crucible, Role
from protocol.config import devnet_settings
from protocol.deployment import DEVNET_UNBONDING_S, deploy
from protocol.params import demo_task_params
from protocol.values import format_tokens, from_wei

TOKEN = 10**18


def _cid(document: dict[str, Any]) -> str:
    return cid_of_bytes(json.dumps(document, sort_keys=True).encode())


def run_demo(json_output: bool) -> None:
    """Runs the walkthrough and prints a summary (or one JSON document)."""
    with tempfile.TemporaryDirectory(prefix="crucible-demo-") as tmp:
        anvil = devnet.start_private_anvil(Path(tmp) / "anvil.log")
        try:
            summary = _walk(Chain(anvil.rpc_url), quiet=json_output)
        finally:
            anvil.stop()
    if json_output:
        emit_json(summary)
        return
    table = Table("account", "role", "stake before", "stake after", "rewards", title="Accounts", title_justify="left")
    for row in summary["accounts"]:
        table.add_row(row["name"], row["role"], str(row["stake_before"]), str(row["stake_after"]), str(row["rewards"]))
    stdout.print(table)
    check = summary["money_check"]
    stdout.print(
        f"money check: escrow {check['escrowed']} + slashed {check['slashed_in']} + bonds {check['bonds_in']} = "
        f"paid {check['paid']} + refunded {check['refunded']} + held {check['held']}: "
        f"{'balanced' if check['balanced'] else 'NOT balanced'}"
    )


def _walk(chain: Chain, quiet: bool) -> dict[str, Any]:
    def say(message: str) -> None:
        if not quiet:
            stderr.print(message)

    settings = devnet_settings()
    creator = load_signer("dev0")
    trainers = [load_signer(f"dev{i}") for i in (1, 2, 3)]
    validators = [load_signer(f"dev{i}") for i in (4, 5, 6, 7, 8)]
    cheater = trainers[2]
    deployment = deploy(chain, creator, token_holders=settings.dev_addresses, unbonding_period_s=DEVNET_UNBONDING_S)
    crucible = Crucible(chain, deployment)
    say(f"deployed TaskMarket at {deployment.TaskMarket} on a private Anvil (chain {chain.chain_id})")
    market_start = crucible.balance_of(deployment.TaskMarket)

    params = demo_task_params()
    model_cid = _cid({"demo": "initial checkpoint"})
    env_cid = _cid({"demo": "environment spec"})
    task_id = crucible.create_task(creator, params, model_cid, env_cid)
    say(
        f"task {task_id}: bounty 1000 CRU over 2 rounds, every submission checked "
        f"(deterrence ratio {params.deterrence})"
    )

    for signer in trainers:
        crucible.stake(signer, 1000 * TOKEN, Role.TRAINER)
    for signer in validators:
        crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(signer, task_id)
    stake_before = {s.address: crucible.stake_account(s.address).staked for s in trainers + validators}
    say("3 trainers staked 1000 CRU each; 5 validators staked 200 CRU and joined")

    submissions = {}
    for units, signer in zip((300, 100, 200), trainers, strict=True):
        rollouts = _cid({"trainer": signer.address, "units": units, "forged": signer is cheater})
        submissions[signer.address] = crucible.submit_work(
            signer, task_id, 0, rollouts, _cid({"update": signer.address}), units, bytes(32)
        )
    say("round 0: three submissions (the third one forged)")

    deadlines = crucible.deadlines(task_id, 0)
    devnet.warp_to(chain, deadlines.submit)
    crucible.fix_check_seed(creator, task_id)
    by_address = {s.address: s for s in validators}
    for trainer, sid in submissions.items():
        for address in crucible.assigned_validators(sid):
            crucible.attest(
                by_address[address], sid, trainer != cheater.address, _cid({"evidence": sid, "by": address})
            )
    say("validators attested: the forged submission rejected by its committee")

    devnet.warp_to(chain, deadlines.validate)
    cheat_id = submissions[cheater.address]
    crucible.dispute(cheater, cheat_id)
    devnet.advance_time(chain, 1)
    for address in crucible.dispute_committee(cheat_id):
        crucible.vote_dispute(by_address[address], cheat_id, False, _cid({"recheck": cheat_id, "by": address}))
    crucible.resolve_dispute(creator, cheat_id)
    say("the cheater disputed its rejection; a fresh committee confirmed it and took the bond")
    next_checkpoint = _cid({"demo": "checkpoint after round 0"})
    for address in crucible.aggregators(task_id, 0):
        crucible.propose_checkpoint(by_address[address], task_id, 0, next_checkpoint)
    devnet.warp_to(chain, deadlines.challenge)
    crucible.finalise_round(creator, task_id)
    say("round 0 final; round 1 opened on the agreed checkpoint")

    for sid in submissions.values():
        crucible.settle(creator, sid)
    rewards: dict[str, int] = {}
    for signer in trainers + validators:
        if crucible.credit_of(signer.address):
            rewards[signer.address] = crucible.claim(signer)
    devnet.warp_to(chain, crucible.deadlines(task_id, 1).challenge)
    crucible.finalise_round(creator, task_id)
    refunded = crucible.refund(creator, task_id)
    say(f"round 1 had no work; the task ended and the creator took back {format_tokens(refunded, 18, 'CRU')}")

    names = {s.address: s.name for s in trainers + validators}
    roles = {s.address: "trainer" for s in trainers} | {s.address: "validator" for s in validators}
    accounts = []
    slashed_total = 0
    for address in names:
        after = crucible.stake_account(address).staked
        slashed_total += stake_before[address] - after
        accounts.append(
            {
                "name": names[address],
                "address": address,
                "role": roles[address],
                "adversary": "forged-completions" if address == cheater.address else None,
                "stake_before": from_wei(stake_before[address], 18),
                "stake_after": from_wei(after, 18),
                "rewards": from_wei(rewards.get(address, 0), 18),
            }
        )
    held = crucible.balance_of(deployment.TaskMarket) - market_start
    paid = sum(rewards.values())
    bond = params.dispute_bond_wei
    # In: the bounty, the slashes and the lost bond; out: claims and the refund.
    balanced = params.bounty_wei + slashed_total + bond == paid + refunded + held
    return {
        "task_id": task_id,
        "rounds": [
            {"round": 0, "submissions": 3, "rejected": 1},
            {"round": 1, "submissions": 0, "rejected": 0},
        ],
        "accounts": accounts,
        "money_check": {
            "balanced": balanced,
            "escrowed": from_wei(params.bounty_wei, 18),
            "slashed_in": from_wei(slashed_total, 18),
            "bonds_in": from_wei(bond, 18),
            "paid": from_wei(paid, 18),
            "refunded": from_wei(refunded, 18),
            "held": from_wei(held, 18),
        },
    }


__all__ = ["Signer", "run_demo"]
