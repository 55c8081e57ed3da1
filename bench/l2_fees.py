"""What one round costs its participants on an OP Stack chain: L2 gas and the L1 data fee, from real receipts.

Runs on Hardhat's `op` chain type (EDR's OP Stack simulation: the GasPriceOracle and L1Block predeploys, L1
fees in receipts) with non-zero L1 fee parameters (`--l1-base-fee-gwei`, `--blob-base-fee-gwei`, OP Mainnet's
Ecotone scalars). For each (trainers, validators): a task, every trainer submits, the seed is fixed, every
check position attests, the aggregators propose, the round is finalised, every submission settled and every
participant claims; the receipts' gas, L1 data gas and L1 fee are summed by who sent them. Beside each
measured figure, what `task plan` estimates for the same round (protocol/chain/costs.py).

Run: .venv/bin/python -m bench.l2_fees [--rounds 3x3,10x5,30x10] [--l2-gas-price-gwei 0.001] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import tempfile
from pathlib import Path
from typing import Any

from bench.gas import CID, TOKEN, fresh_signers
from protocol.accounts import Signer, load_signer
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.costs import L1_GAS, round_gas
from protocol.chain.deployment import deploy
from protocol.chain.opstack import (
    DEVNET_L1_FEE,
    L1FeeParams,
    l1_fee_of_gas,
    receipt_field,
    receipt_l1_fee,
    set_l1_fee_params,
)
from protocol.chain.params import PPM, demo_task_params
from protocol.config import devnet_settings

PARAMS = demo_task_params(submit_window_s=3600, validate_window_s=3600, challenge_window_s=3600)


def one_round(crucible: Crucible, creator: Signer, trainers: int, validators: int) -> dict[str, Any]:
    """Runs one round with `trainers` submissions and `validators` seated; returns the summed receipts by
    side (trainers, validators): transactions, gas, L1 data gas, L1 fee in wei."""
    sides: dict[str, dict[str, int]] = {
        side: {"transactions": 0, "gas": 0, "l1_gas": 0, "l1_fee_wei": 0} for side in ("trainers", "validators")
    }

    def record(side: str, receipt: Any) -> None:
        totals = sides[side]
        totals["transactions"] += 1
        totals["gas"] += int(receipt["gasUsed"])
        totals["l1_gas"] += receipt_field(receipt, "l1GasUsed")
        totals["l1_fee_wei"] += receipt_l1_fee(receipt)

    chain = crucible.chain
    task_id = crucible.create_task(creator, PARAMS, CID, CID)
    seated = fresh_signers(crucible, creator, validators, 200)
    for signer in seated:
        crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(signer, task_id)
    working = fresh_signers(crucible, creator, trainers, 600)
    ids = []
    for signer in working:
        crucible.stake(signer, 600 * TOKEN, Role.TRAINER)
        function = crucible.market.functions.submitWork(
            task_id, 0, 0, CID, CID, 100, bytes(32), secrets.token_bytes(32)
        )
        record("trainers", chain.transact(function, signer))
        ids.append((task_id << 192) | int(signer.address, 16))
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).submit)
    for receipt in devnet.fix_check_seed(crucible, seated[0], task_id):
        record("validators", receipt)
    by_address = {s.address: s for s in seated}
    ballots = [(sid, by_address[a], True, CID) for sid in ids for a in dict.fromkeys(crucible.assigned_validators(sid))]
    for receipt in [receipt for receipts in devnet.vote_all(crucible, ballots) for receipt in receipts]:
        record("validators", receipt)
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).validate)
    for address in dict.fromkeys(crucible.aggregators(task_id, 0)):
        record("validators", crucible.propose_checkpoint(by_address[address], task_id, 0, CID))
    devnet.warp_to(chain, crucible.deadlines(task_id, 0).challenge)
    record("validators", crucible.finalise_round(seated[0], task_id))
    for signer, sid in zip(working, ids, strict=True):
        record("trainers", crucible.settle(signer, sid))
    for side, people in (("trainers", working), ("validators", seated)):
        for signer in people:
            if crucible.credit_of(signer.address):
                record(side, chain.transact(crucible.market.functions.claim(), signer))
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", default="3x3,10x5,30x10", help="TRAINERSxVALIDATORS, comma-separated")
    parser.add_argument("--l1-base-fee-gwei", type=float, default=DEVNET_L1_FEE.l1_base_fee_wei / 1e9)
    parser.add_argument("--blob-base-fee-gwei", type=float, default=DEVNET_L1_FEE.blob_base_fee_wei / 1e9)
    parser.add_argument("--l2-gas-price-gwei", type=float, default=0.001, help="the L2 gas price the totals use")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    fees = L1FeeParams(int(options.l1_base_fee_gwei * 1e9), int(options.blob_base_fee_gwei * 1e9),
                       DEVNET_L1_FEE.base_fee_scalar, DEVNET_L1_FEE.blob_base_fee_scalar)  # fmt: skip
    l2_price = int(options.l2_gas_price_gwei * 1e9)
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in options.rounds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        node = devnet.start_private_chain(Path(tmp) / "hardhat.log", client="hardhat", chain_type="op")
        try:
            chain = Chain(node.rpc_url)
            set_l1_fee_params(chain.w3, fees)
            dev = [load_signer(f"dev{i}") for i in range(10)]
            crucible = Crucible(chain, deploy(chain, dev[0], token_holders=devnet_settings().dev_addresses,
                                              unbonding_period_s=120))  # fmt: skip
            for trainers, validators in shapes:
                measured = one_round(crucible, dev[0], trainers, validators)
                rate, per_check = PARAMS.sample_rate_ppm / PPM, PARAMS.validators_per_check
                gas = sum(side["gas"] for side in measured.values())
                l1_fee = sum(side["l1_fee_wei"] for side in measured.values())
                planned_gas = round_gas(trainers, validators, rate, per_check).total
                planned_l1 = l1_fee_of_gas(
                    round_gas(trainers, validators, rate, per_check, per_call=L1_GAS).total, fees
                )
                rows.append({"trainers": trainers, "validators": validators, "measured": measured,
                             "gas": gas, "l1_fee_wei": l1_fee, "l2_fee_wei": gas * l2_price,
                             "total_wei": gas * l2_price + l1_fee, "planned_gas": planned_gas,
                             "planned_l1_fee_wei": planned_l1})  # fmt: skip
        finally:
            node.stop()
    settings = {"client": "hardhat 3.18.0 (chainType op)", "l1_fee_params": fees.as_json(),
                "l2_gas_price_wei": str(l2_price), "sample_rate": PARAMS.sample_rate_ppm / PPM,
                "validators_per_check": PARAMS.validators_per_check, "machine": platform.machine()}  # fmt: skip
    if options.json:
        print(json.dumps({"settings": settings, "rounds": rows}, indent=2, default=str))
        return
    print(f"L1 base fee {options.l1_base_fee_gwei:g} gwei, blob base fee {options.blob_base_fee_gwei:g} gwei, "
          f"scalars {fees.base_fee_scalar:,} / {fees.blob_base_fee_scalar:,}; L2 gas at "
          f"{options.l2_gas_price_gwei:g} gwei\n")  # fmt: skip
    print("| trainers x validators | txs | L2 gas (plan) | L1 data fee, ETH (plan) | L2 fee, ETH | round, ETH | "
          "per trainer, ETH | per validator, ETH |\n|---|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for row in rows:
        sides = row["measured"]
        each = {side: (v["gas"] * l2_price + v["l1_fee_wei"]) for side, v in sides.items()}
        txs = sum(v["transactions"] for v in sides.values())
        per = {side: each[side] / row[side] / 1e18 for side in ("trainers", "validators")}
        print(f"| {row['trainers']} x {row['validators']} | {txs} | {row['gas']:,} ({row['planned_gas']:,}) | "
              f"{row['l1_fee_wei'] / 1e18:.3g} ({row['planned_l1_fee_wei'] / 1e18:.3g}) | "
              f"{row['l2_fee_wei'] / 1e18:.3g} | {row['total_wei'] / 1e18:.3g} | "
              f"{per['trainers']:.3g} | {per['validators']:.3g} |")  # fmt: skip


if __name__ == "__main__":
    main()
