from fractions import Fraction
from math import comb

import pytest
from pydantic import ValidationError

from protocol.chain.ids import reveal_from
from protocol.chain.params import (
    ONE,
    PPM,
    SEED_DELAY_BLOCKS,
    TaskParams,
    demo_task_params,
    honest_majority,
    least_deterrent_slash,
    least_windows,
    max_round_fee,
    max_submission_reward,
)

TOKEN = 10**18


def params(**changes: int) -> TaskParams:
    """The demo's numbers at p = 1/2 with nobody colluding, where the deterrence boundary is S = R = 450 tokens."""
    at_half = {
        "sample_rate_ppm": 500_000,
        "slash_wei": 450 * TOKEN,
        "min_trainer_stake_wei": 450 * TOKEN,
        "colluding_share_ppm": 0,
    }
    return demo_task_params(**(at_half | changes))


def figures(**changes: int) -> TaskParams:
    """`params` with `changes` left unchecked: for the deterrence figures alone, where the dispute bond (bounded
    below and above by the parameter checks) plays no part."""
    return params().model_copy(update=changes)


def test_max_reward_is_the_largest_rounds_trainer_budget() -> None:
    assert max_submission_reward(1000, 3, 0) == 334  # 333 + 333 + 334
    assert max_submission_reward(1000 * TOKEN, 2, 1000) == 450 * TOKEN


def test_deterrence_boundary_is_exact() -> None:
    # p = 1/2: S >= R exactly.
    assert params().deters
    assert params().deterrence == 1.0
    assert not params(slash_wei=450 * TOKEN - 1).deters
    # Every cheat checked and nobody colluding: every cheat caught, any slash deters.
    assert params(sample_rate_ppm=PPM, slash_wei=1, min_trainer_stake_wei=1).deters


def exact_cheat_gain(p: TaskParams) -> Fraction:
    """A cheat's expected gain over the whole game, in wei, from exact fractions (independent of the twin's
    fixed point): paid R unless caught, its colluding positions earn c of a checked round's fees F, and caught
    (j < k/2 of its k positions colluding) it loses S less the j/k of the finder's share they take back."""
    k, c, sampled = p.validators_per_check, Fraction(p.colluding_share_ppm, PPM), Fraction(p.sample_rate_ppm, PPM)
    chance = [comb(k, j) * c**j * (1 - c) ** (k - j) for j in range(k + 1)]
    caught = sum(chance[j] for j in range(k + 1) if 2 * j < k)
    kept = sum(
        chance[j] * p.slash_wei * (1 - Fraction(p.finder_share_bps, 10_000) * Fraction(j, k))
        for j in range(k + 1)
        if 2 * j < k
    )
    return (1 - sampled * caught) * p.max_reward_wei + sampled * c * p.max_fee_wei - sampled * kept


@pytest.mark.parametrize("colluding", [0, 100_000, 333_333, 450_000])
@pytest.mark.parametrize("per_check", [1, 2, 3, 5, 8])
def test_whole_game_twin_agrees_with_exact_fractions(colluding: int, per_check: int) -> None:
    """The twin's expected gain is the exact one within rounding (1e-12 of the stakes), and its least slash
    is where the exact gain turns from positive to not positive, to the token."""
    base = figures(colluding_share_ppm=colluding, validators_per_check=per_check, finder_share_bps=5000)
    least = least_deterrent_slash(
        base.sample_rate_ppm, colluding, per_check, 5000, base.max_reward_wei, base.max_fee_wei, TOKEN
    )
    at = figures(
        colluding_share_ppm=colluding, validators_per_check=per_check, finder_share_bps=5000,
        slash_wei=least, min_trainer_stake_wei=least,
    )  # fmt: skip
    assert abs(Fraction(at.expected_cheat_gain_wei) - exact_cheat_gain(at)) < Fraction(at.slash_wei, 10**12)
    assert at.deters and exact_cheat_gain(at) <= Fraction(at.slash_wei, 10**12)
    if least > TOKEN:
        below = at.model_copy(update={"slash_wei": least - TOKEN})
        assert not below.deters and exact_cheat_gain(below) > 0


def test_the_appeal_is_priced() -> None:
    """The least bond makes the appeal's expected gain at most zero: a committee of k positions over the whole
    stake overturns with chance at most 1 - h, and moves at most R + S + k V + F."""
    third = params(colluding_share_ppm=333_333, slash_wei=900 * TOKEN, min_trainer_stake_wei=900 * TOKEN,
                   dispute_bond_wei=2000 * TOKEN)  # fmt: skip
    gain = third.max_reward_wei + third.slash_wei + 3 * third.validator_slash_wei + third.max_fee_wei
    assert third.overturn_gain_wei == gain == (450 + 900 + 30 + 50) * TOKEN
    least = third.least_dispute_bond_wei
    h = Fraction(honest_majority(333_333, 3), ONE)
    assert least == -(-(1 - h) * gain // h)
    assert (1 - h) * gain <= h * least  # overturning costs what it gains
    with pytest.raises(ValidationError, match=f"at least {least} wei"):
        params(colluding_share_ppm=333_333, slash_wei=900 * TOKEN, min_trainer_stake_wei=900 * TOKEN,
               dispute_bond_wei=least - 1)  # fmt: skip


def test_honest_majority_is_the_binomial_tail_rounded_down() -> None:
    """Params.honestMajority's twin, against exact fractions (the chain's own figure is compared with this one
    in tests/integration/test_chain.py)."""
    for colluding in (0, 1, 123_456, 333_333, 499_999):
        for per_check in range(1, 17):
            c = Fraction(colluding, PPM)
            exact = sum(
                comb(per_check, h) * (1 - c) ** h * c ** (per_check - h)
                for h in range(per_check // 2 + 1, per_check + 1)
            )
            got = honest_majority(colluding, per_check)
            assert got <= exact * ONE < got + 10**6, (colluding, per_check)
    assert honest_majority(250_000, 2) == 9 * ONE // 16  # a tie is no majority: both honest


def test_collusion_raises_the_slash_that_deters() -> None:
    # A third colluding over 3 positions, at p = 1/2 with a half finder's share: caught with chance 10/27,
    # the cheat keeps R = 450 otherwise and its colluders take back part of the finder's share and the fees.
    third = figures(colluding_share_ppm=333_333)
    assert abs(third.caught / (PPM * ONE) - 10 / 27) < 1e-6
    assert not third.deters
    least = least_deterrent_slash(500_000, 333_333, 3, 5000, third.max_reward_wei, third.max_fee_wei, TOKEN)
    assert least == 875 * TOKEN  # 1/2 (8/27 S + 12/27 5/6 S) = S/3 >= 17/27 450 + 1/2 1/3 50, at c = 0.333333
    assert params(colluding_share_ppm=333_333, slash_wei=least, min_trainer_stake_wei=least).deters
    assert not figures(colluding_share_ppm=333_333, slash_wei=least - TOKEN, min_trainer_stake_wei=least).deters
    with pytest.raises(ValidationError, match="less than or equal to 499999"):
        params(colluding_share_ppm=500_000)


def test_slash_must_be_collectable() -> None:
    with pytest.raises(ValidationError, match="min trainer stake"):
        params(min_trainer_stake_wei=449 * TOKEN)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"rounds": 1001}, "less than or equal to 1000"),
        ({"min_validator_stake_wei": 0}, "greater than 0"),
        ({"validator_slash_wei": 0}, "greater than 0"),
        ({"validator_slash_wei": 101 * TOKEN, "dispute_bond_wei": 101 * TOKEN}, "at most the min validator stake"),
        ({"dispute_bond_wei": 10 * TOKEN - 1}, "at least the validator slash"),
        ({"submit_window_s": 4}, "greater than or equal to 5"),
        ({"challenge_window_s": 0}, "greater than or equal to 5"),
        ({"canary_rate_ppm": 500_001}, "less than or equal to 500000"),
    ],
)
def test_creation_limits_refused_as_the_chain_refuses_them(changes: dict[str, int], fragment: str) -> None:
    """Params.check' twin (tests/integration/test_chain.py checks the chain agrees)."""
    with pytest.raises(ValidationError, match=fragment):
        params(**changes)


def test_creation_limits_at_their_bounds_accepted() -> None:
    bounds = {"rounds": 1000, "submit_window_s": 5, "validate_window_s": 5, "challenge_window_s": 5}
    assert params(**bounds, validator_slash_wei=100 * TOKEN, dispute_bond_wei=100 * TOKEN).rounds == 1000


def test_contract_order_of_fields() -> None:
    assert params().as_contract_tuple()[:3] == (1000 * TOKEN, 2, 500_000)
    assert len(params().as_contract_tuple()) == 18 and params().as_contract_tuple()[-3] == 0
    assert params(max_staleness=2).as_contract_tuple()[-2] == 2
    assert params(canary_rate_ppm=200_000).as_contract_tuple()[-1] == 200_000


def test_staleness_bound_checked_as_the_chain_checks_it() -> None:
    assert params(max_staleness=8).max_staleness == 8
    with pytest.raises(ValidationError):
        params(max_staleness=9)


def test_least_deterrent_slash_is_the_boundary() -> None:
    reward = max_submission_reward(1000 * TOKEN, 2, 1000)  # 450 tokens
    fee = max_round_fee(1000 * TOKEN, 2, 1000)
    slash = least_deterrent_slash(100_000, 0, 3, 5000, reward, fee, TOKEN)  # p = 0.1, nobody colluding: 9 R
    assert slash == 4050 * TOKEN
    assert least_deterrent_slash(PPM, 0, 3, 5000, reward, fee, TOKEN) == TOKEN


def test_the_least_windows_hold_the_blocks_each_needs() -> None:
    """On 12-second blocks: a submission lands in two blocks; a check's seed is requested, seeded two blocks later,
    read, and committed to, five blocks, before the reveal phase, the validate window's last quarter, which must hold
    two (a 30 s window held none of it); a dispute's committee does the same within a challenge window. On
    one-second blocks both need eight. Broken version: count the seed's blocks alone (5) for the validate window
    → 60 s, whose 15 s reveal phase holds one block, and the assertion fails."""
    assert least_windows(12) == {"submit_window_s": 24, "validate_window_s": 96, "challenge_window_s": 96}
    assert least_windows(1) == {"submit_window_s": 5, "validate_window_s": 8, "challenge_window_s": 8}
    for interval in (1, 2, 5, 12):
        for window in ("validate_window_s", "challenge_window_s"):  # a dispute's voting time is a challenge window
            length = least_windows(interval)[window]
            reveal = length - reveal_from(length, length)  # the reveal phase, as the market cuts it
            assert reveal >= 2 * interval and length - reveal >= (SEED_DELAY_BLOCKS + 3) * interval


def test_an_honest_appeal_does_not_lose() -> None:
    """The most bond makes an honest trainer's appeal of a wrong rejection worth sending: a fresh committee upholds
    with chance at least h and it keeps its slash, else it loses the bond: h S >= (1 - h) B at the bound, and one
    wei more is refused. Nobody colluding (h = 1): no bound. Broken version: drop the upper bound from the
    validator → the last `raises` fails."""
    third = params(colluding_share_ppm=333_333, slash_wei=900 * TOKEN, min_trainer_stake_wei=900 * TOKEN,
                   dispute_bond_wei=2000 * TOKEN)  # fmt: skip
    most = third.most_dispute_bond_wei
    h = Fraction(honest_majority(333_333, 3), ONE)
    assert most is not None and most == int(h * third.slash_wei / (1 - h))
    assert h * third.slash_wei >= (1 - h) * most and h * third.slash_wei < (1 - h) * (most + 1)
    assert third.least_dispute_bond_wei <= most
    assert params(colluding_share_ppm=0).most_dispute_bond_wei is None
    with pytest.raises(ValidationError, match=f"at most {most} wei"):
        params(colluding_share_ppm=333_333, slash_wei=900 * TOKEN, min_trainer_stake_wei=900 * TOKEN,
               dispute_bond_wei=most + 1)  # fmt: skip
    # A committee of two with a third colluding upholds an honest appeal with chance 4/9 only: no bond keeps
    # colluders from buying an appeal and lets an honest one pay.
    with pytest.raises(ValidationError, match="no dispute bond serves these numbers"):
        params(colluding_share_ppm=333_333, validators_per_check=2, dispute_bond_wei=10**28)
