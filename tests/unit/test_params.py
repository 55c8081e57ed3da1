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


def test_contract_order_of_fields() -> None:
    assert params().as_contract_tuple()[:3] == (1000 * TOKEN, 2, 500_000)
    assert len(params().as_contract_tuple()) == 15


def test_least_deterrent_slash_is_the_boundary() -> None:
    reward = max_submission_reward(1000 * TOKEN, 2, 1000)  # 450 tokens
    slash = least_deterrent_slash(100_000, reward, TOKEN)  # p = 0.1: S >= 9 R = 4050
    assert slash == 4050 * TOKEN and deters(100_000, slash, reward) and not deters(100_000, slash - TOKEN, reward)
    assert least_deterrent_slash(1_000_000, reward, TOKEN) == TOKEN
