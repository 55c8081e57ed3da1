"""Unit fixtures: a tiny model warmed up for a few steps (made locally, in seconds)."""

from __future__ import annotations

import pytest

from protocol.envs.spec import EnvSpec, default_spec
from protocol.model import LoadedModel, create_model
from protocol.tokenizer import CharTokenizer
from protocol.training import supervised_warmup


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    """A tiny Llama with the character tokenizer after 150 warm-up steps on arithmetic (some answers right)."""
    tokenizer = CharTokenizer()
    model = create_model("tiny", tokenizer, seed=0)
    supervised_warmup(model, tokenizer, default_spec("arithmetic").env(), steps=150, seed=0)
    return LoadedModel(model.eval(), tokenizer, None)


@pytest.fixture
def spec() -> EnvSpec:
    """A small arithmetic spec: 4 prompts x 4 samples, up to 12 new tokens."""
    result = default_spec("arithmetic")
    result.training.prompts_per_round = 4
    result.training.group_size = 4
    result.sampling.max_new_tokens = 12
    return result
