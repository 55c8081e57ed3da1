import pytest
from pydantic import ValidationError

from protocol.chain.params import TaskParams, demo_task_params, deters, least_deterrent_slash, max_submission_reward

TOKEN = 10**18


def params(**changes: int) -> TaskParams:
    """The demo's numbers at p = 1/2, where the deterrence boundary is S = R = 450 tokens."""
    at_half = {"sample_rate_ppm": 500_000, "slash_wei": 450 * TOKEN, "min_trainer_stake_wei": 450 * TOKEN}
    return demo_task_params(**(at_half | changes))


def test_max_reward_is_the_largest_rounds_trainer_budget() -> None:
    assert max_submission_reward(1000, 3, 0) == 334  # 333 + 333 + 334
    assert max_submission_reward(1000 * TOKEN, 2, 1000) == 450 * TOKEN


def test_deterrence_boundary_is_exact() -> None:
    # p = 1/2: S >= R exactly.
    assert params().deters
    assert params().deterrence == 1.0
    assert not params(slash_wei=450 * TOKEN - 1).deters
    assert deters(1_000_000, 1, 10**30)  # every submission checked: always deters


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
    assert len(params().as_contract_tuple()) == 15


def test_least_deterrent_slash_is_the_boundary() -> None:
    reward = max_submission_reward(1000 * TOKEN, 2, 1000)  # 450 tokens
    slash = least_deterrent_slash(100_000, reward, TOKEN)  # p = 0.1: S >= 9 R = 4050
    assert slash == 4050 * TOKEN and deters(100_000, slash, reward) and not deters(100_000, slash - TOKEN, reward)
    assert least_deterrent_slash(1_000_000, reward, TOKEN) == TOKEN
