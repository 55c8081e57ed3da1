"""Verifiable environments: deterministic prompts from a seed, deterministic rewards, held-out sets."""

from protocol.ml.envs.base import Environment, Problem
from protocol.ml.envs.registry import ENVIRONMENTS, environment_of

__all__ = ["ENVIRONMENTS", "Environment", "Problem", "environment_of"]
