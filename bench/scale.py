"""One round with many trainer identities and validators on a private Anvil: what the chain side of
a round costs as the number of participants grows.

Every transaction is real (stake, submitWork, fixCheckSeed, attest, proposeCheckpoint,
finaliseRound, settle, claim), sent from a pool of threads (one nonce sequence per key); the
artifacts the submissions name are placeholders, because the ML work of one identity is what
bench/node.py and bench/validator.py measure and 100 tiny-model nodes do not fit on 2 cores beside
the chain. Reported per size: the round's wall time from the first submission to the last claim,
transactions and transactions per second, gas per trainer and per validator, and the time the
auditor's event index takes to catch up with the whole history.

Run: .venv/bin/python -m bench.scale [--sizes 10,100] [--validators 10] [--threads 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from eth_utils import keccak

from auditor.index import EventIndex
from protocol.accounts import Signer, load_signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import deploy
from protocol.chain.ids import submission_id
from protocol.chain.params import demo_task_params

TOKEN = 10**18
LONG_S = 3600


def _signers(crucible: Crucible, funder: Signer, label: str, count: int) -> list[Signer]:
    seeds = [(f"crucible-scale-{label}-{index}", f"{label}{index}") for index in range(count)]
    return [devnet.funded_account(crucible, funder, seed, 2000 * TOKEN, name)[0] for seed, name in seeds]


def measure(trainers: int, validators: int, threads: int, folder: Path) -> dict[str, Any]:
    node = devnet.start_private_chain(folder / f"anvil-{trainers}.log")
    try:
        chain = Chain(node.rpc_url)
        creator = load_signer("dev0")
        crucible = Crucible(chain, deploy(chain, creator, token_holders=(creator.address,), unbonding_period_s=120))
        per_check = 3
        # A small bounty: with 1 round a whole round's budget is the largest reward the deterrence check sees.
        windows = {"submit_window_s": LONG_S, "validate_window_s": LONG_S, "challenge_window_s": LONG_S}
        params = demo_task_params(
            rounds=1, bounty_wei=50 * TOKEN, sample_rate_ppm=200_000, validators_per_check=per_check, **windows
        )
        cid = cid_of_bytes(b"scale-bench")
        task_id = crucible.create_task(creator, params, cid, cid)
        trainer_keys = _signers(crucible, creator, "trainer", trainers)
        validator_keys = _signers(crucible, creator, "validator", validators)
        gas: dict[str, list[int]] = defaultdict(list)
        sent = [0]

        def run(name: str, calls: list[Callable[[], Any]]) -> None:
            def one(call: Callable[[], Any]) -> None:
                receipt = call()
                if receipt is not None and "gasUsed" in receipt:
                    gas[name].append(int(receipt["gasUsed"]))
                    sent[0] += 1

            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(one, calls))

        run("stake", [lambda s=s: crucible.stake(s, 1000 * TOKEN, Role.TRAINER) for s in trainer_keys])
        run("stake", [lambda s=s: crucible.stake(s, 200 * TOKEN, Role.VALIDATOR) for s in validator_keys])
        run("joinTask", [lambda s=s: crucible.join_task(s, task_id) for s in validator_keys])
        sent[0] = 0
        started = time.perf_counter()
        run("submitWork", [lambda s=s: chain.transact(crucible.market.functions.submitWork(
            task_id, 0, 0, cid, cid, 1000, keccak(text=s.address), keccak(text=f"tag {s.address}")), s)
            for s in trainer_keys])  # fmt: skip
        deadlines = crucible.deadlines(task_id, 0)
        devnet.warp_to(chain, deadlines.submit)
        run("fixCheckSeed", [lambda: devnet.fix_check_seed(crucible, creator, task_id)])
        by_address = {s.address: s for s in validator_keys}
        votes = []  # one per validator and check: a vote covers every position its validator holds
        for trainer in trainer_keys:
            sid = submission_id(task_id, 0, trainer.address)
            votes += [
                (sid, by_address[v], keccak(text=f"{sid} {v}"))
                for v in dict.fromkeys(crucible.assigned_validators(sid))
            ]
        run("commitAttestation", [lambda sid=sid, v=v, salt=salt: crucible.commit_attestation(v, sid, True, cid, salt)
                                  for sid, v, salt in votes])  # fmt: skip
        devnet.warp_to(chain, deadlines.votes_revealed_from)
        run("attest", [lambda sid=sid, v=v, salt=salt: crucible.attest(v, sid, True, cid, salt)
                       for sid, v, salt in votes])  # fmt: skip
        devnet.warp_to(chain, deadlines.validate)
        aggregators = crucible.aggregators(task_id, 0)
        run("proposeCheckpoint", [lambda v=by_address[a]: crucible.propose_checkpoint(v, task_id, 0, cid)
                                  for a in aggregators[: per_check // 2 + 1]])  # fmt: skip
        devnet.warp_to(chain, deadlines.challenge)
        run("finaliseRound", [lambda: crucible.finalise_round(creator, task_id)])
        run("settle", [lambda s=s: crucible.settle(s, submission_id(task_id, 0, s.address)) for s in trainer_keys])
        run("claim", [lambda s=s: chain.transact(crucible.market.functions.claim(), s)
                      for s in [*trainer_keys, *validator_keys] if crucible.credit_of(s.address)])  # fmt: skip
        round_s = time.perf_counter() - started
        transactions = sent[0]

        index = EventIndex(crucible, folder / f"index-{trainers}.sqlite")
        started = time.perf_counter()
        report = index.sync()
        index_s = time.perf_counter() - started
        index.close()

        def mean(name: str) -> int:
            return round(sum(gas[name]) / len(gas[name])) if gas[name] else 0

        trainer_gas = mean("submitWork") + mean("settle") + mean("claim")
        validator_gas = round((sum(gas["commitAttestation"]) + sum(gas["attest"])) / validators) + mean("claim")
        return {
            "trainers": trainers,
            "validators": validators,
            "attestations": len(gas["attest"]),
            "round_s": round(round_s, 2),
            "round_transactions": transactions,
            "transactions_per_s": round(transactions / round_s, 1),
            "gas_submitWork": mean("submitWork"),
            "gas_vote": mean("commitAttestation") + mean("attest"),
            "gas_settle": mean("settle"),
            "gas_claim": mean("claim"),
            "gas_per_trainer": trainer_gas,
            "gas_per_validator": validator_gas,
            "gas_finaliseRound": mean("finaliseRound"),
            "index_events": report.events,
            "index_catch_up_s": round(index_s, 3),
        }
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100")
    parser.add_argument("--validators", type=int, default=10)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="crucible-bench-scale-"))
    machine = f"{platform.machine()}, python {platform.python_version()}, {args.threads} sending threads"
    rows = [measure(int(size), args.validators, args.threads, folder) for size in args.sizes.split(",")]
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(machine)
    for key in rows[0]:
        print(f"{key:>22}: " + "  ".join(f"{row[key]:>10}" for row in rows))


if __name__ == "__main__":
    main()
