"""Verifiable environments: deterministic prompts from a seed, deterministic rewards, held-out sets."""

from protocol.envs.registry import ENVIRONMENTS, Environment, Problem, environment_of

__all__ = ["ENVIRONMENTS", "Environment", "Problem", "environment_of"]
