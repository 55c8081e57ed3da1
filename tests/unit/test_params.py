from fractions import Fraction
from math import comb

import pytest
from pydantic import ValidationError

from protocol.chain.params import (
    ONE,
    PPM,
    TaskParams,
    caught_chance,
    demo_task_params,
    deters,
    honest_majority,
    least_deterrent_slash,
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


def test_max_reward_is_the_largest_rounds_trainer_budget() -> None:
    assert max_submission_reward(1000, 3, 0) == 334  # 333 + 333 + 334
    assert max_submission_reward(1000 * TOKEN, 2, 1000) == 450 * TOKEN


def test_deterrence_boundary_is_exact() -> None:
    # p = 1/2: S >= R exactly.
    assert params().deters
    assert params().deterrence == 1.0
    assert not params(slash_wei=450 * TOKEN - 1).deters
    assert deters(PPM * ONE, 1, 10**30)  # every cheat caught: always deters


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
    # A third colluding over 3 positions: an honest majority with chance 20/27, so at p = 1/2 a cheat is
    # caught with q = 10/27 and S must be at least (17/10) R.
    third = params(colluding_share_ppm=333_333)
    assert abs(third.caught / (PPM * ONE) - 10 / 27) < 1e-6
    assert not third.deters
    least = least_deterrent_slash(third.caught, third.max_reward_wei, TOKEN)
    assert least == 765 * TOKEN  # (17/10) * 450, a little less with c = 0.333333 than at exactly 1/3
    assert params(colluding_share_ppm=333_333, slash_wei=least, min_trainer_stake_wei=least).deters
    assert not params(colluding_share_ppm=333_333, slash_wei=least - TOKEN, min_trainer_stake_wei=least).deters
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
    assert len(params().as_contract_tuple()) == 17 and params().as_contract_tuple()[-2] == 0
    assert params(max_staleness=2).as_contract_tuple()[-1] == 2


def test_staleness_bound_checked_as_the_chain_checks_it() -> None:
    assert params(max_staleness=8).max_staleness == 8
    with pytest.raises(ValidationError):
        params(max_staleness=9)


def test_least_deterrent_slash_is_the_boundary() -> None:
    reward = max_submission_reward(1000 * TOKEN, 2, 1000)  # 450 tokens
    caught = caught_chance(100_000, 0, 3)  # p = 0.1, nobody colluding: S >= 9 R = 4050
    slash = least_deterrent_slash(caught, reward, TOKEN)
    assert slash == 4050 * TOKEN and deters(caught, slash, reward) and not deters(caught, slash - TOKEN, reward)
    assert least_deterrent_slash(caught_chance(PPM, 0, 3), reward, TOKEN) == TOKEN
