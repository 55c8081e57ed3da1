"""The environments by name: every environment the protocol knows, and checked construction of one."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from protocol.errors import ConfigError
from protocol.ml.envs.arithmetic import Arithmetic
from protocol.ml.envs.base import Environment
from protocol.ml.envs.sorting import Sorting

ENVIRONMENTS: dict[str, type[Environment]] = {kind.name: kind for kind in (Arithmetic, Sorting)}


def environment_of(name: str, params: dict[str, Any] | None = None) -> Environment:
    """Returns the environment `name` with its parameters checked; ConfigError naming what is wrong."""
    kind = ENVIRONMENTS.get(name)
    if kind is None:
        raise ConfigError(f"unknown environment {name!r}: one of {', '.join(sorted(ENVIRONMENTS))}")
    try:
        checked = kind.params_model.model_validate(params or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        raise ConfigError(f"environment {name}: {where}: {first['msg']}") from None
    return kind(checked)
