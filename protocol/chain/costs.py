"""What a round costs its participants in gas, from the figures `bench/gas.py` measured from real receipts
(docs/benchmarks.md, "Gas of every call": the larger of each call's figures, intrinsic gas and calldata
included), and, on an OP Stack chain, in L1 data gas, from the receipts `bench/l2_fees.py` measured on
Hardhat's `op` chain. Gas does not depend on the machine; the price does, and is the chain's."""

from __future__ import annotations

from dataclasses import dataclass

# Per call, the most `bench/gas.py` measured (a call's gas varies a little with storage already warm).
GAS = {
    "submitWork": 79_976,
    "settle": 187_881,  # a disputed rejection; an accepted checked submission takes 175,750
    "claim": 44_635,
    "vote": 82_035 + 50_632,  # a validator's commitment, then its reveal (`attest`)
    "fixCheckSeed": 90_506 + 78_058,  # asking for the seed block, then fixing the seed
    "proposeCheckpoint": 115_023,
    "finaliseRound": 152_795,
}
# Per call, the L1 data gas an OP Stack chain charges for its bytes (a receipt's `l1GasUsed`: 16 per byte of
# the transaction's estimated compressed size, 100 bytes at least), the most `bench/l2_fees.py` measured.
L1_GAS = {
    "submitWork": 2_825,
    "settle": 1_600,
    "claim": 1_600,
    "vote": 1_600 + 2_437 + 512,  # the commitment (at the 100-byte floor); the reveal: attest's CID, + the salt (32 B)
    "fixCheckSeed": 1_600 + 5_341,  # the request, then the fix (which carries the seed block's header)
    "proposeCheckpoint": 2_048,
    "finaliseRound": 1_600,
}


@dataclass(frozen=True)
class RoundGas:
    """The gas of one round, by who sends it."""

    trainers: int  # all trainers together: each submits, settles its submission and claims
    validators: int  # all validators together: attestations, proposals, the seed, finality, claims

    @property
    def total(self) -> int:
        return self.trainers + self.validators


def round_calls(
    trainers: int, validators: int, sample_rate: float, validators_per_check: int
) -> tuple[dict[str, int], dict[str, int]]:
    """How often each call is sent in a round with `trainers` submissions and `validators` seated, by the
    trainers and by the validators: each sampled submission gets `validators_per_check` votes (each a commitment
    and its reveal),
    `validators_per_check` aggregators propose, one sender fixes the seed and one finalises, and every
    participant claims once (claims gather credits: once a round is the most)."""
    by_trainers = {"submitWork": trainers, "settle": trainers, "claim": trainers}
    by_validators = {
        "vote": round(trainers * sample_rate * validators_per_check),
        "proposeCheckpoint": validators_per_check,
        "fixCheckSeed": 1,
        "finaliseRound": 1,
        "claim": validators,
    }
    return by_trainers, by_validators


def round_gas(
    trainers: int, validators: int, sample_rate: float, validators_per_check: int, per_call: dict[str, int] = GAS
) -> RoundGas:
    """The gas of a round (`round_calls`), by who sends it; `per_call=L1_GAS` gives its L1 data gas."""
    by_trainers, by_validators = round_calls(trainers, validators, sample_rate, validators_per_check)
    return RoundGas(sum(per_call[c] * n for c, n in by_trainers.items()),
                    sum(per_call[c] * n for c, n in by_validators.items()))  # fmt: skip
