"""The environments by name: every environment the protocol knows, and checked construction of one.

Two built-in environments, and reasoning-gym's datasets as `reasoning-gym/<dataset>` (loaded when
first named: the library takes a second to import).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from protocol.errors import ConfigError, first_problem
from protocol.ml.envs import reasoning_gym
from protocol.ml.envs.arithmetic import Arithmetic
from protocol.ml.envs.base import Environment
from protocol.ml.envs.sorting import Sorting

ENVIRONMENTS: dict[str, type[Environment]] = {kind.name: kind for kind in (Arithmetic, Sorting)}


def environment_kind(name: str) -> type[Environment]:
    """The environment class registered as `name`; ConfigError naming the choices."""
    if name.startswith(reasoning_gym.FAMILY):
        return reasoning_gym.environment_class(name)
    kind = ENVIRONMENTS.get(name)
    if kind is None:
        raise ConfigError(
            f"unknown environment {name!r}: one of {', '.join(sorted(ENVIRONMENTS))} or reasoning-gym/<dataset>"
        )
    return kind


def environment_names() -> list[str]:
    """Every environment name: the built-in ones, then each reasoning-gym dataset."""
    return sorted(ENVIRONMENTS) + [reasoning_gym.FAMILY + dataset for dataset in reasoning_gym.dataset_names()]


def environment_of(name: str, params: dict[str, Any] | None = None) -> Environment:
    """Returns the environment `name` with its parameters checked; ConfigError naming what is wrong."""
    kind = environment_kind(name)
    try:
        checked = kind.params_model.model_validate(params or {})
    except ValidationError as error:
        where, message, _ = first_problem(error)
        raise ConfigError(f"environment {name}: {where or 'params'}: {message}") from None
    return kind(checked)
