"""What a round costs its participants in gas, from the figures `bench/gas.py` measured from real receipts
(docs/benchmarks.md, "Gas of every call": the larger of each call's figures, intrinsic gas and calldata
included). Gas does not depend on the machine; the price does, and is the chain's."""

from __future__ import annotations

from dataclasses import dataclass

# Per call, the most `bench/gas.py` measured (a call's gas varies a little with storage already warm).
GAS = {
    "submitWork": 79_976,
    "settle": 187_881,  # a disputed rejection; an accepted checked submission takes 175,750
    "claim": 44_635,
    "attest": 64_513,
    "fixCheckSeed": 90_506 + 78_058,  # asking for the seed block, then fixing the seed
    "proposeCheckpoint": 115_023,
    "finaliseRound": 152_795,
}
# The OP-Stack's GasPriceOracle predeploy: where it has code, every transaction also pays an L1 data fee.
OP_GAS_PRICE_ORACLE = "0x420000000000000000000000000000000000000F"


@dataclass(frozen=True)
class RoundGas:
    """The gas of one round, by who sends it."""

    trainers: int  # all trainers together: each submits, settles its submission and claims
    validators: int  # all validators together: attestations, proposals, the seed, finality, claims

    @property
    def total(self) -> int:
        return self.trainers + self.validators


def round_gas(trainers: int, validators: int, sample_rate: float, validators_per_check: int) -> RoundGas:
    """The gas of a round with `trainers` submissions and `validators` seated: each sampled submission gets
    `validators_per_check` attestations, `validators_per_check` aggregators propose, one sender fixes the seed
    and one finalises, and every participant claims once (claims gather credits: once a round is the most)."""
    per_trainer = GAS["submitWork"] + GAS["settle"] + GAS["claim"]
    attestations = round(trainers * sample_rate * validators_per_check)
    validator_side = (
        attestations * GAS["attest"]
        + validators_per_check * GAS["proposeCheckpoint"]
        + GAS["fixCheckSeed"]
        + GAS["finaliseRound"]
        + validators * GAS["claim"]
    )
    return RoundGas(trainers * per_trainer, validator_side)
