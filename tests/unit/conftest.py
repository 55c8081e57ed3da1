"""Unit fixtures: a tiny model warmed up for a few steps (made locally, in seconds)."""

from __future__ import annotations

import pytest

from protocol.artifacts.cid import cid_of_bytes
from protocol.ml.envs.spec import EnvSpec, default_spec
from protocol.ml.model import LoadedModel, create_model
from protocol.ml.tokenizer import CharTokenizer
from protocol.ml.training import supervised_warmup
from protocol.work.round import RoundContext


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    """A tiny Llama with the character tokenizer after 150 warm-up steps on arithmetic (some answers right).
    At the warm-up's old lr 3e-3: after 150 steps some rewards differ within a group, so honest updates are
    not zero (which the update checks and the poisoned-update adversary need); at 1e-3 they all would be."""
    tokenizer = CharTokenizer()
    model = create_model("tiny", tokenizer, seed=0)
    supervised_warmup(model, tokenizer, default_spec("arithmetic").env(), steps=150, seed=0, learning_rate=3e-3)
    return LoadedModel(model.eval(), tokenizer, None)


@pytest.fixture
def spec() -> EnvSpec:
    """A small arithmetic spec: 4 prompts x 4 samples, up to 12 new tokens."""
    result = default_spec("arithmetic")
    result.training.prompts_per_round = 4
    result.training.group_size = 4
    result.sampling.max_new_tokens = 12
    return result


@pytest.fixture
def context() -> RoundContext:
    """Round 0 of task 1 on the devnet's chain id, for one node, with made-up seed and CIDs."""
    return RoundContext(
        chain_id=31337,
        market="0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
        task_id=1,
        round_index=0,
        node="0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        work_seed=b"\x42" * 32,
        checkpoint_cid=cid_of_bytes(b"checkpoint"),
        env_cid=cid_of_bytes(b"env"),
        base_round=0,
    )
