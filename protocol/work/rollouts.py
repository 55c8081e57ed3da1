"""The rollout file: a trainer's completions for a round, with seeds, rewards and TOPLOC proofs.

Canonical JSON (sorted keys, no spaces), schema `crucible.rollouts` version 1, at most 64 MiB;
proofs are base64. Documented in docs/formats.md.
"""

from __future__ import annotations

import base64
import json
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from protocol.artifacts.manifest import canonical_json
from protocol.errors import ArtifactError, ConfigError, first_problem
from protocol.ml.envs.spec import MAX_SAMPLES
from protocol.ml.proofs import proofs_digest
from protocol.values import checked_address, checked_cid

MAX_ROLLOUT_BYTES = 64 * 1024 * 1024
MAX_TOKENS_PER_SEQUENCE = 8192


def _hex32(value: str) -> str:
    if not (isinstance(value, str) and value.startswith("0x") and len(value) == 66):
        raise ValueError("must be 0x and 64 hex digits")
    int(value, 16)
    return value.lower()


class Sample(BaseModel):
    """One completion of one prompt."""

    prompt_index: int = Field(ge=0, description="Index of the prompt among the node's prompts of the round.")
    sample_index: int = Field(ge=0, description="Index of the completion within its prompt's group.")
    prompt: str = Field(description="The prompt text.")
    prompt_ids: list[int] = Field(max_length=MAX_TOKENS_PER_SEQUENCE, description="The prompt's token ids.")
    completion: str = Field(description="The completion text (before the end token).")
    completion_ids: list[int] = Field(
        min_length=1, max_length=MAX_TOKENS_PER_SEQUENCE, description="Sampled token ids, end token included."
    )
    reward: float = Field(description="The environment's reward of the completion.")
    seed: str = Field(description="The sampling seed, 0x-hex.")
    proofs: list[str] = Field(description="TOPLOC proofs (base64), one per chunk of completion positions.")

    model_config = {"extra": "forbid"}

    _seed = field_validator("seed")(classmethod(lambda cls, value: _hex32(value)))

    def proof_bytes(self) -> list[bytes]:
        """The proofs as bytes."""
        return [base64.b64decode(proof, validate=True) for proof in self.proofs]


class RolloutFile(BaseModel):
    """A trainer's rollouts for one round of one task."""

    schema_name: Literal["crucible.rollouts"] = Field("crucible.rollouts", alias="schema")
    schema_version: Literal[1] = 1
    chain_id: int = Field(ge=1, description="The chain the task lives on.")
    market: str = Field(description="The TaskMarket contract.")
    task_id: int = Field(ge=1)
    round: int = Field(ge=0)
    node: str = Field(description="The trainer's address.")
    checkpoint_cid: str = Field(description="The round's checkpoint the completions were sampled from.")
    env_cid: str = Field(description="The task's environment spec.")
    work_seed: str = Field(description="The round's work seed, 0x-hex.")
    work_units: int = Field(ge=0, description="Completion tokens generated: the work units claimed on chain.")
    samples: list[Sample] = Field(max_length=MAX_SAMPLES)

    model_config = {"extra": "forbid", "populate_by_name": True}

    @field_validator("market", "node", "checkpoint_cid", "env_cid")
    @classmethod
    def _address_or_cid(cls, value: str, info: ValidationInfo) -> str:
        check = checked_address if info.field_name in ("market", "node") else checked_cid
        try:
            return check(value)
        except ConfigError as error:
            raise ValueError(str(error)) from None

    _work_seed = field_validator("work_seed")(classmethod(lambda cls, value: _hex32(value)))

    @model_validator(mode="after")
    def _consistent(self) -> RolloutFile:
        tokens = sum(len(sample.completion_ids) for sample in self.samples)
        if tokens != self.work_units:
            raise ValueError(f"work_units is {self.work_units} but the completions hold {tokens} tokens")
        keys = [(sample.prompt_index, sample.sample_index) for sample in self.samples]
        if len(keys) != len(set(keys)):
            raise ValueError("a (prompt_index, sample_index) pair appears twice")
        return self

    def to_bytes(self) -> bytes:
        """Canonical JSON: the bytes whose CID the submission names."""
        return canonical_json(self.model_dump(by_alias=True, mode="json"))

    def proofs_digest(self) -> bytes:
        """The digest of every sample's proofs, as committed on chain."""
        return proofs_digest([sample.proof_bytes() for sample in self.samples])


def encode_proofs(proofs: list[bytes]) -> list[str]:
    """Proof bytes as the file's base64 strings."""
    return [base64.b64encode(proof).decode() for proof in proofs]


def parse_rollouts(data: bytes, source: str) -> RolloutFile:
    """Parses rollout bytes, refusing oversize, malformed or inconsistent files with the first reason."""
    if len(data) > MAX_ROLLOUT_BYTES:
        raise ArtifactError(f"rollout file {source} is {len(data)} bytes, above the {MAX_ROLLOUT_BYTES} bound")
    try:
        rollouts = RolloutFile.model_validate(json.loads(data))
        for sample in rollouts.samples:
            sample.proof_bytes()
    except (ValueError, ValidationError) as error:
        if isinstance(error, ValidationError):
            where, message, _ = first_problem(error)
            reason = f"{where}: {message}" if where else message
        else:
            reason = str(error).splitlines()[0]
        raise ArtifactError(f"rollout file {source} is invalid: {reason}") from None
    return rollouts
