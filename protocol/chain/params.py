"""A task's numbers as typed data, checked with the same rules the chain applies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, model_validator

from protocol.chain.ids import REVEAL_SHARE

PPM = 1_000_000
BPS = 10_000
UINT96_MAX = 2**96 - 1
UINT32_MAX = 2**32 - 1
MAX_ROUNDS = 1000  # Params.MAX_ROUNDS: each round can be stalled a window by a dispute
MIN_WINDOW_S = 5  # Params.MIN_WINDOW: five one-second blocks (least_windows: what slower chains need)
MAX_COMMITTEE = 16  # Params.MAX_COMMITTEE
MAX_STALENESS = 8  # Params.MAX_STALENESS: the most rounds a submission's base may lag its round


SEED_DELAY_BLOCKS = 2  # Seeds.DELAY: a seed block is named this many blocks after the request that names it


def least_windows(block_interval_s: int) -> dict[str, int]:
    """The shortest windows a chain with blocks every `block_interval_s` seconds can serve, by the blocks each must
    hold (what the contract, which counts seconds, cannot see). Submit: the round seen open, and a submission
    landed. Validate: its commit phase holds the seed request (a block after the submit deadline), the block
    `SEED_DELAY_BLOCKS` later it names, the seed fixed a block after that one and a commitment landed a block later
    still; its reveal phase, the window's last quarter (`REVEAL_SHARE`), two blocks: a reveal sent as the phase opens
    lands in the next. Challenge: a dispute's voting time is a challenge window from its filing, and its committee
    is seeded, commits and reveals in it as a check's validators do in the validate window; a canary's reveal (a
    block after the validate deadline) lands in the window's first half, a block before its middle."""
    seeded = (SEED_DELAY_BLOCKS + 3) * block_interval_s
    revealed = REVEAL_SHARE * 2 * block_interval_s  # its quarter holds two blocks (and its rest `seeded`: 6 >= 5)
    return {
        "submit_window_s": max(MIN_WINDOW_S, 2 * block_interval_s),
        "validate_window_s": max(MIN_WINDOW_S, seeded, revealed),
        "challenge_window_s": max(MIN_WINDOW_S, seeded, revealed, 4 * block_interval_s),
    }


def largest_round(bounty_wei: int, rounds: int) -> int:
    """The largest round's budget: the last round takes the bounty's rounding remainder (`Payouts.largestRound`)."""
    return bounty_wei - (bounty_wei // rounds) * (rounds - 1)


def max_round_fee(bounty_wei: int, rounds: int, validator_fee_bps: int) -> int:
    """The most one round pays its validators in fees: the largest round's fee budget."""
    return largest_round(bounty_wei, rounds) * validator_fee_bps // BPS


def max_submission_reward(bounty_wei: int, rounds: int, validator_fee_bps: int) -> int:
    """Returns the most one submission can earn: the largest round's trainer budget."""
    return largest_round(bounty_wei, rounds) - max_round_fee(bounty_wei, rounds, validator_fee_bps)


ONE = 10**18  # Params.ONE: the fixed-point unit of probabilities
# The largest share of seat stake assumed to collude with a cheat when nobody says (a third, as in
# BFT-style assumptions); the chain refuses half or more, where no check can be trusted.
DEFAULT_COLLUDING_SHARE_PPM = 333_333
MAX_COLLUDING_SHARE_PPM = PPM // 2 - 1
MAX_CANARY_RATE_PPM = PPM // 2  # Params.check: canaries share the trainer budget, at most half the submissions


def _power(x: int, n: int) -> int:
    result = ONE
    for _ in range(n):
        result = result * x // ONE
    return result


def majority(colluding_ppm: int, per_check: int, finder_bps: int = 0, slash_wei: int = 0) -> tuple[int, int]:
    """`Params.majority` bit for bit: over the draws where more than half of `per_check` positions are honest
    (each a colluder's with chance `colluding_ppm` / 1e6 on its own), their chance in units of ONE, and the
    expected slash a caught cheat loses there, in ONE * wei, when its colluding positions take their share of
    the finder's share back. Every term rounded down, as the chain rounds it."""
    c = colluding_ppm * (ONE // PPM)
    chance, kept, choose, h = 0, 0, 1, per_check
    while 2 * h > per_check:
        term = choose * (_power(ONE - c, h) * _power(c, per_check - h) // ONE)
        chance += term
        kept += term * (slash_wei * per_check * BPS - finder_bps * slash_wei * (per_check - h)) // (per_check * BPS)
        choose = choose * h // (per_check - h + 1)
        h -= 1
    return chance, kept


def honest_majority(colluding_ppm: int, per_check: int) -> int:
    """The chance, in units of ONE rounded down as `Params.honestMajority` rounds it, that more than half of
    `per_check` positions are honest when each is a colluder's with chance `colluding_ppm` / 1e6 on its own."""
    return majority(colluding_ppm, per_check)[0]


def caught_chance(sample_rate_ppm: int, colluding_ppm: int, per_check: int) -> int:
    """q, the chance a cheat is caught (sampled, and an honest majority on its positions), in PPM * ONE."""
    return sample_rate_ppm * honest_majority(colluding_ppm, per_check)


def cheat_gain_and_loss(
    sample_rate_ppm: int,
    colluding_ppm: int,
    per_check: int,
    finder_bps: int,
    slash_wei: int,
    max_reward_wei: int,
    max_fee_wei: int,
) -> tuple[int, int]:
    """A cheat's expected gain and loss over the whole game in PPM * ONE * wei (`Params.deters`):
    gain `(1 - p h) R + p c F`, loss `p * sum_{j < k/2} P(j) S (1 - f j / k)`."""
    honest, kept = majority(colluding_ppm, per_check, finder_bps, slash_wei)
    gain = (PPM * ONE - sample_rate_ppm * honest) * max_reward_wei
    gain += sample_rate_ppm * colluding_ppm * (ONE // PPM) * max_fee_wei
    return gain, sample_rate_ppm * kept


def least_deterrent_slash(
    sample_rate_ppm: int,
    colluding_ppm: int,
    per_check: int,
    finder_bps: int,
    max_reward_wei: int,
    max_fee_wei: int,
    unit_wei: int,
) -> int:
    """The smallest slash, in whole units of `unit_wei` (at least one), at which a cheat's expected gain over the
    whole game is at most zero; UINT96_MAX + 1 rounded up when none below the uint96 ceiling does."""

    def deters_at(slash_wei: int) -> bool:
        gain, loss = cheat_gain_and_loss(
            sample_rate_ppm, colluding_ppm, per_check, finder_bps, slash_wei, max_reward_wei, max_fee_wei
        )
        return loss >= gain

    low, high = 1, -(-(UINT96_MAX + 1) // unit_wei)  # in units: the least that deters is in [low, high]
    if not deters_at(high * unit_wei):
        return high * unit_wei
    while low < high:
        middle = (low + high) // 2
        if deters_at(middle * unit_wei):
            high = middle
        else:
            low = middle + 1
    return low * unit_wei


def least_dispute_bond(colluding_ppm: int, per_check: int, overturn_gain_wei: int, validator_slash_wei: int) -> int:
    """`Params.leastDisputeBond`: the least bond with which no appeal pays. A committee of `per_check` positions
    drawn over the whole seat stake overturns for a colluding side with chance at most `1 - h`; overturning
    moves at most `overturn_gain_wei` to that side: `B >= (1 - h) G / h`, rounded up, and at least the
    validator slash."""
    honest = honest_majority(colluding_ppm, per_check)
    least = ((ONE - honest) * overturn_gain_wei + honest - 1) // honest
    return max(least, validator_slash_wei)


def most_dispute_bond(colluding_ppm: int, per_check: int, slash_wei: int) -> int | None:
    """`Params.mostDisputeBond`: the most bond with which an honest appeal does not lose in expectation. A trainer
    wrongly rejected appeals to a fresh committee that upholds with chance at least `h` and so keeps its slash:
    `B <= h S / (1 - h)`, rounded down; None (no bound) when `h` is one."""
    honest = honest_majority(colluding_ppm, per_check)
    return None if honest == ONE else honest * slash_wei // (ONE - honest)


class TaskParams(BaseModel):
    """The numbers of `TaskMarket.createTask`, in base units and seconds."""

    bounty_wei: int = Field(gt=0, le=UINT96_MAX, description="Escrowed bounty, split evenly across rounds.")
    rounds: int = Field(ge=1, le=MAX_ROUNDS, description="Number of rounds.")
    sample_rate_ppm: int = Field(gt=0, le=PPM, description="Probability a submission is checked, per million.")
    validators_per_check: int = Field(
        ge=1, le=MAX_COMMITTEE, description="Validators assigned to each sampled submission."
    )
    validator_fee_bps: int = Field(ge=0, le=BPS, description="Share of each round's budget for validators' checks.")
    finder_share_bps: int = Field(ge=0, le=BPS, description="Share of a trainer's slash paid to those who found it.")
    slash_wei: int = Field(gt=0, le=UINT96_MAX, description="Slash of a trainer whose work is proven invalid.")
    validator_slash_wei: int = Field(gt=0, le=UINT96_MAX, description="Slash of a validator whose vote lost.")
    min_trainer_stake_wei: int = Field(ge=0, le=UINT96_MAX, description="Unlocked stake a trainer needs to submit.")
    min_validator_stake_wei: int = Field(gt=0, le=UINT96_MAX, description="Stake a validator locks to join.")
    dispute_bond_wei: int = Field(
        gt=0, le=UINT96_MAX, description="Bond a dispute carries: at least the validator slash."
    )
    max_work_units: int = Field(gt=0, le=UINT32_MAX, description="Most tokens one submission may claim.")
    submit_window_s: int = Field(
        ge=MIN_WINDOW_S, le=UINT32_MAX, description="Seconds from a round's opening to its submission deadline."
    )
    validate_window_s: int = Field(ge=MIN_WINDOW_S, le=UINT32_MAX, description="Seconds for validators to attest.")
    challenge_window_s: int = Field(
        ge=MIN_WINDOW_S, le=UINT32_MAX, description="Seconds for disputes; also a dispute's voting time."
    )
    colluding_share_ppm: int = Field(
        DEFAULT_COLLUDING_SHARE_PPM,
        ge=0,
        le=MAX_COLLUDING_SHARE_PPM,
        description="Largest share of seat stake assumed to collude with a cheat, per million (below half).",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=MAX_STALENESS,
        description="Rounds a submission's base checkpoint may lag its round; 0 keeps rounds sequential.",
    )
    canary_rate_ppm: int = Field(
        0,
        ge=0,
        le=MAX_CANARY_RATE_PPM,
        description="Most canaries a round may reveal, per million of its submissions (0: none; at most half).",
    )

    @model_validator(mode="after")
    def _slashes_are_collectable(self) -> TaskParams:
        if self.min_trainer_stake_wei < self.slash_wei:
            raise ValueError("min trainer stake must be at least the slash, or the slash could not be collected")
        if self.validator_slash_wei > self.min_validator_stake_wei:
            raise ValueError(
                "the validator slash must be at most the min validator stake, or it could not be collected"
            )
        if self.dispute_bond_wei < self.validator_slash_wei:
            raise ValueError("the dispute bond must be at least the validator slash: a dispute risks what a vote does")
        if self.colluding_share_ppm > MAX_COLLUDING_SHARE_PPM:
            return self  # refused by the field's own bound
        least, most = self.least_dispute_bond_wei, self.most_dispute_bond_wei
        if most is not None and least > most:  # every bond is below the one or above the other
            raise ValueError(
                f"no dispute bond serves these numbers: one that keeps colluders from buying an appeal is at least "
                f"{least} wei, one an honest appeal can carry at most {most} wei; raise the slash or the validators "
                "per check, or lower the colluding share"
            )
        if self.dispute_bond_wei < least:
            raise ValueError(
                f"the dispute bond must be at least {least} wei with these numbers, or overturning a verdict would "
                "pay the colluders' side (docs/protocol.md, 'What a cheat can expect')"
            )
        if most is not None and self.dispute_bond_wei > most:
            raise ValueError(
                f"the dispute bond must be at most {most} wei with these numbers, or an honest trainer's appeal "
                "would lose in expectation (docs/protocol.md, 'What a cheat can expect')"
            )
        return self

    @property
    def max_reward_wei(self) -> int:
        """The most one submission can earn."""
        return max_submission_reward(self.bounty_wei, self.rounds, self.validator_fee_bps)

    @property
    def max_fee_wei(self) -> int:
        """The most one round pays its validators in fees."""
        return max_round_fee(self.bounty_wei, self.rounds, self.validator_fee_bps)

    @property
    def caught(self) -> int:
        """q, the chance a cheat is caught, in PPM * ONE (see `caught_chance`)."""
        return caught_chance(self.sample_rate_ppm, self.colluding_share_ppm, self.validators_per_check)

    @property
    def overturn_gain_wei(self) -> int:
        """`Params.overturnGain`: the most overturning one verdict moves to the side that overturns it."""
        return (
            self.max_reward_wei
            + self.slash_wei
            + self.validators_per_check * self.validator_slash_wei
            + self.max_fee_wei
        )

    @property
    def least_dispute_bond_wei(self) -> int:
        """The least dispute bond the chain accepts with these numbers (`Params.leastDisputeBond`)."""
        return least_dispute_bond(
            self.colluding_share_ppm, self.validators_per_check, self.overturn_gain_wei, self.validator_slash_wei
        )

    @property
    def most_dispute_bond_wei(self) -> int | None:
        """The most dispute bond the chain accepts with these numbers (`Params.mostDisputeBond`; None: no bound)."""
        return most_dispute_bond(self.colluding_share_ppm, self.validators_per_check, self.slash_wei)

    @property
    def gain_and_loss(self) -> tuple[int, int]:
        """A cheat's expected gain and loss over the whole game, in PPM * ONE * wei (`cheat_gain_and_loss`)."""
        return cheat_gain_and_loss(
            self.sample_rate_ppm,
            self.colluding_share_ppm,
            self.validators_per_check,
            self.finder_share_bps,
            self.slash_wei,
            self.max_reward_wei,
            self.max_fee_wei,
        )

    @property
    def deterrence(self) -> float:
        """What a caught cheat expects to lose over what a cheat expects to win; the chain requires at least 1."""
        gain, loss = self.gain_and_loss
        return loss / gain if gain else float("inf")

    @property
    def expected_cheat_gain_wei(self) -> float:
        """A cheat's expected gain over the whole game, in wei (at most zero where the chain accepts)."""
        gain, loss = self.gain_and_loss
        return (gain - loss) / (PPM * ONE)

    @property
    def deters(self) -> bool:
        """Whether the chain's deterrence check accepts these numbers."""
        gain, loss = self.gain_and_loss
        return loss >= gain

    @classmethod
    def from_contract(cls, struct: Mapping[str, Any]) -> TaskParams:
        """The numbers of an `ITaskMarket.TaskParams` struct as the chain holds them (a `TaskCreated` event's
        `params`), taken as they are: the chain checked them when the task was created."""
        values = {field: int(struct[name]) for field, name in CONTRACT_NAMES.items()}
        return cls.model_construct(None, **values)

    def as_json(self) -> dict[str, int | str]:
        """The numbers for scripts: amounts exact, as decimal strings, in fields named `*_wei`."""
        return {field: str(value) if field.endswith("_wei") else value for field, value in self.model_dump().items()}

    def as_contract_tuple(self) -> tuple[int, ...]:
        """Returns the fields in `ITaskMarket.TaskParams` order."""
        return tuple(getattr(self, field) for field in CONTRACT_NAMES)


# Our field names -> the Solidity struct's, in the struct's order.
CONTRACT_NAMES = {
    "bounty_wei": "bounty",
    "rounds": "rounds",
    "sample_rate_ppm": "sampleRatePpm",
    "validators_per_check": "validatorsPerCheck",
    "validator_fee_bps": "validatorFeeBps",
    "finder_share_bps": "finderShareBps",
    "slash_wei": "slashAmount",
    "validator_slash_wei": "validatorSlash",
    "min_trainer_stake_wei": "minTrainerStake",
    "min_validator_stake_wei": "minValidatorStake",
    "dispute_bond_wei": "disputeBond",
    "max_work_units": "maxWorkUnits",
    "submit_window_s": "submitWindow",
    "validate_window_s": "validateWindow",
    "challenge_window_s": "challengeWindow",
    "colluding_share_ppm": "colludingSharePpm",
    "max_staleness": "maxStaleness",
    "canary_rate_ppm": "canaryRatePpm",
}


def demo_task_params(**changes: int) -> TaskParams:
    """Returns the numbers of `crucible demo` and of docs/contracts.md's worked example, in an
    18-decimal token: bounty 1000 over 2 rounds (500 a round: 450 for trainers, 50 for checks),
    every submission checked by 3 validators, slash 500 (half to the finders), validator slash 10,
    bond 50 (or, where other numbers make the appeal rule ask more, its least bond in whole tokens), 60 s
    windows, and at most a tenth of validator stake assumed colluding (a demo runs its own validators; the
    default for real tasks is a third). `changes` replaces fields by name."""
    token = 10**18
    values: dict[str, int] = {
        "bounty_wei": 1000 * token,
        "rounds": 2,
        "sample_rate_ppm": PPM,
        "validators_per_check": 3,
        "validator_fee_bps": 1000,
        "finder_share_bps": 5000,
        "slash_wei": 500 * token,
        "validator_slash_wei": 10 * token,
        "min_trainer_stake_wei": 500 * token,
        "min_validator_stake_wei": 100 * token,
        "dispute_bond_wei": 50 * token,
        "max_work_units": 1_000_000,
        "submit_window_s": 60,
        "validate_window_s": 60,
        "challenge_window_s": 60,
        "colluding_share_ppm": 100_000,
    }
    values |= changes
    if "dispute_bond_wei" not in changes:
        least = TaskParams.model_construct(None, **values).least_dispute_bond_wei
        values["dispute_bond_wei"] = max(values["dispute_bond_wei"], -(-least // token) * token)
    return TaskParams(**values)
