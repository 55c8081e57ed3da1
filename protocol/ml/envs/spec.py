"""The environment spec: the JSON document a task names by CID (environment, sampling, TOPLOC, training).

Defaults live here and nowhere else; `crucible env spec NAME` prints them. The verification
thresholds are the validator's; the calibration that chose them is in docs/verification.md.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, model_validator

from protocol.errors import ConfigError, UnspokenVersion, first_problem
from protocol.files import bounded_json
from protocol.ml.envs.base import Environment
from protocol.ml.envs.registry import environment_kind, environment_of

SCHEMA = "crucible.env"
MAX_SPEC_BYTES = 64 * 1024
# A submission holds at most this many completions (prompts x group size), bounding its rollout file.
MAX_SAMPLES = 4096


class _Strict(BaseModel):
    model_config = {"extra": "forbid"}


class SamplingSettings(_Strict):
    """How completions are sampled; the validator replays exactly this."""

    temperature: float = Field(1.0, gt=0, le=10, description="Logits are divided by this before sampling.")
    top_k: int = Field(0, ge=0, description="Keep only the k most likely tokens (0: all).")
    top_p: float = Field(1.0, gt=0, le=1, description="Keep the smallest set of tokens holding this much probability.")
    max_new_tokens: int = Field(8, ge=1, le=4096, description="Most tokens of one completion, end token included.")


class ToplocSettings(_Strict):
    """TOPLOC proof building and the thresholds a proof's check must meet."""

    topk: int = Field(128, ge=1, le=4096, description="Activations kept per proof chunk (top-k by magnitude).")
    decode_batching_size: int = Field(32, ge=1, le=1024, description="Decode positions per proof chunk.")
    # Calibrated on the CPU (docs/verification.md): honest 0 / 0.008 / 0 across thread counts and
    # batch sizes, 8-bit weights at least 7 / 4.4 / 4. Prime Intellect's looser 38 / 10 / 8 suit bf16
    # inference across GPU kinds, and let 8-bit weights through.
    max_exp_mismatches: int = Field(3, ge=0, description="Most exponent mismatches of a chunk (of topk).")
    max_mantissa_err_mean: float = Field(1.5, ge=0, description="Largest mean mantissa error of a chunk.")
    max_mantissa_err_median: float = Field(1.0, ge=0, description="Largest median mantissa error of a chunk.")


class AdapterSettings(_Strict):
    """What a trainer's update changes: every weight (`full`), or a LoRA adapter on the target modules
    whose product the outer step folds into the next full checkpoint."""

    kind: Literal["full", "lora"] = Field("full", description="full: every weight; lora: low-rank adapters.")
    rank: int = Field(8, ge=1, le=1024, description="LoRA rank r.")
    alpha: int = Field(16, ge=1, le=65536, description="LoRA alpha: the adapter's product is scaled by alpha / r.")
    target_modules: list[str] = Field(
        ["q_proj", "v_proj"], min_length=1, description="Linear layers that get an adapter (by module name)."
    )


class EncodingSettings(_Strict):
    """How a full-parameter update goes on the wire (protocol.ml.compression): `dense` float32, or
    `topk`: in each chunk of `chunk` values the `keep` largest, at `bits` bits, with error feedback."""

    kind: Literal["dense", "topk"] = Field("dense", description="dense: float32; topk: sparse, quantised.")
    chunk: int = Field(64, ge=2, le=256, description="Values per chunk (positions are one byte).")
    keep: int = Field(2, ge=1, description="Values kept per chunk (density keep / chunk).")
    bits: Literal[1, 2, 4, 8] = Field(2, description="Bits per kept value: a sign and bits - 1 of magnitude.")

    @model_validator(mode="after")
    def _keep_within_chunk(self) -> EncodingSettings:
        if self.keep > self.chunk:
            raise ValueError(f"encoding.keep ({self.keep}) is more than encoding.chunk ({self.chunk})")
        return self


class AggregationSettings(_Strict):
    """The outer step's rule over a round's included updates (protocol.ml.aggregation). `mean`: their plain
    mean. `clipped_mean`: each update is first scaled down to at most `clip_multiple` times the round's
    median update norm, then averaged: one update moves the checkpoint at most `lr * clip_multiple * median
    / n`. `trimmed_mean`: clipped the same way, then in every coordinate the `trim` largest and `trim`
    smallest values are dropped before the mean (fewer when the round has too few updates)."""

    rule: Literal["mean", "clipped_mean", "trimmed_mean"] = Field(
        "trimmed_mean",
        description="mean, clipped_mean (norm-clipped to a multiple of the median), trimmed_mean (clipped, then "
        "the ends of every coordinate dropped).",
    )
    clip_multiple: float = Field(
        2.0, ge=1, le=100, description="Norm bound of an update, in multiples of the round's median update norm."
    )
    trim: int = Field(1, ge=1, le=8, description="trimmed_mean: values dropped at each end of every coordinate.")


class TrainingSettings(_Strict):
    """The local GRPO update every trainer runs, and the outer step of aggregation."""

    # Defaults from bench/rl_curve.py (docs/benchmarks.md): a round's update learns from thousands of
    # completions in minibatched steps, and from completions better than their group's mean only.
    prompts_per_round: int = Field(256, ge=1, le=1024, description="Prompts a trainer answers per round.")
    group_size: int = Field(
        8, ge=2, le=256, description="Completions per prompt; advantages are normalised in a group."
    )
    learning_rate: float = Field(1e-4, gt=0, le=1, description="AdamW learning rate of the local update.")
    inner_steps: int = Field(
        1, ge=1, le=1000, description="Passes over the round's sequences; a pass takes one step per minibatch."
    )
    minibatch_size: int = Field(
        64, ge=0, le=MAX_SAMPLES, description="Sequences per optimizer step, in file order (0: all in one step)."
    )
    negative_weight: float = Field(
        0.0, ge=0, le=1, description="Scale of negative advantages (0: learn from above-mean completions only)."
    )
    kl_weight: float = Field(0.0, ge=0, description="Weight of the KL penalty to the round's checkpoint.")
    clip_epsilon: float = Field(0.2, gt=0, le=1, description="PPO-style ratio clip.")
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward pass (changes float order only).")
    outer_learning_rate: float = Field(
        1.0, gt=0, le=10, description="Outer step: next = C + lr * (the aggregation rule's mean of the updates)."
    )
    adapter: AdapterSettings = Field(default_factory=AdapterSettings)
    encoding: EncodingSettings = Field(default_factory=EncodingSettings)
    aggregation: AggregationSettings = Field(default_factory=AggregationSettings)


class VerificationSettings(_Strict):
    """What a validator tolerates beyond the TOPLOC thresholds."""

    max_sampling_mismatches: int = Field(2, ge=0, description="Tokens of a batch that may disagree with the replay.")
    near_tie_margin: float = Field(0.05, ge=0, description="A replay mismatch within this score margin is a near tie.")
    update_tolerance: float = Field(
        0.05, gt=0, description="Largest relative L2 error of a replayed update's tensor (calibrated: honest ≤ 0.008)."
    )


# What a version-1 spec's training section meant by the fields it could not name.
VERSION_ONE_TRAINING = {"minibatch_size": 0, "negative_weight": 1.0}
# The outer step a spec meant where it names none, by its version: the plain mean before version 5; in
# version 5 the clipped mean at twice the median norm.
EARLIER_AGGREGATION: dict[int, dict[str, Any]] = {
    **{version: {"rule": "mean"} for version in (1, 2, 3, 4)},
    5: {"rule": "clipped_mean", "clip_multiple": 2.0},
}


class EnvSpec(_Strict):
    """A task's environment spec, schema-versioned."""

    schema_name: Literal["crucible.env"] = Field("crucible.env", alias="schema")
    # 2 added training.minibatch_size and training.negative_weight; a version-1 document is read with
    # what it meant (one full batch, negatives at full weight), so tasks created before replay the same.
    # 3 added training.adapter (default full: what earlier versions did).
    # 4 added training.encoding (default dense: what earlier versions did).
    # 5 added training.aggregation, default clipped_mean; a version 1-4 document means the plain mean, which
    # is what its tasks' checkpoints were computed with.
    # 6 made trimmed_mean the default rule (see AggregationSettings); a version-5 document means what version 5's
    # defaults were (clipped_mean at 2x the median norm) where it names no rule or bound.
    # The spec's version is the protocol version the task pins (see SPOKEN_VERSIONS).
    schema_version: Literal[1, 2, 3, 4, 5, 6] = 6
    environment: str = Field(description="Registered environment name (`crucible env list`).")
    params: dict[str, Any] = Field(default_factory=dict, description="The environment's own parameters.")
    eval_size: int = Field(200, ge=1, le=100_000, description="Problems in the held-out evaluation set.")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    toploc: ToplocSettings = Field(default_factory=ToplocSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    verification: VerificationSettings = Field(default_factory=VerificationSettings)

    model_config = {"extra": "forbid", "populate_by_name": True}

    @model_validator(mode="before")
    @classmethod
    def _earlier_versions_meaning(cls, document: Any) -> Any:
        if not isinstance(document, dict) or document.get("schema_version") not in EARLIER_AGGREGATION:
            return document
        version = document["schema_version"]
        training = document.get("training")
        training = dict(training) if isinstance(training, dict) else {}
        aggregation = training.get("aggregation", {})
        if isinstance(aggregation, dict):  # anything else is left for validation to name
            training["aggregation"] = {**EARLIER_AGGREGATION[version], **aggregation}
        meant = VERSION_ONE_TRAINING if version == 1 else {}
        return {**document, "training": {**meant, **training}}

    @model_validator(mode="after")
    def _cross_checks(self) -> EnvSpec:
        environment = environment_of(self.environment, self.params)
        self.params = environment.params.model_dump(mode="json")
        samples = self.training.prompts_per_round * self.training.group_size
        if samples > MAX_SAMPLES:
            raise ValueError(f"prompts_per_round x group_size is {samples}, above the bound of {MAX_SAMPLES}")
        if self.sampling.top_k and self.sampling.top_k < 2:
            raise ValueError("sampling.top_k must be 0 (off) or at least 2")
        if self.training.encoding.kind == "topk" and self.training.adapter.kind == "lora":
            raise ValueError("training.encoding topk compresses full-parameter updates; a lora adapter is sent dense")
        return self

    def env(self) -> Environment:
        """The environment this spec configures."""
        return environment_of(self.environment, self.params)

    def canonical_bytes(self) -> bytes:
        """The spec as canonical JSON (sorted keys, no spaces): the bytes a task's env CID names."""
        document = self.model_dump(by_alias=True, mode="json")
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


# The protocol versions this software speaks: each is what a spec of that version means for every verified
# computation (sampling, proofs, the update, the outer step), kept for the tasks that pin it. A change to any
# of them is a new version; a task pins one in its spec, bound by the CID the chain holds, so a node and a
# validator on either side of an upgrade never judge each other by different rules: the one that does not
# speak a task's version refuses it (or, seated already, abstains) instead of voting.
SPOKEN_VERSIONS: tuple[int, ...] = get_args(EnvSpec.model_fields["schema_version"].annotation)


def default_spec(name: str) -> EnvSpec:
    """Returns the default spec of environment `name`."""
    return _validated({"environment": name}, name)


def parse_spec(data: bytes, source: str) -> EnvSpec:
    """Parses spec bytes, naming the first problem; `source` names where they came from."""
    document = bounded_json(data, MAX_SPEC_BYTES, f"environment spec {source}", ConfigError)
    if not isinstance(document, dict):
        raise ConfigError(f"environment spec {source} must be a JSON object")
    return _validated(document, source)


def load_spec_file(path: Path) -> EnvSpec:
    """Reads and parses a spec file."""
    if not path.is_file():
        raise ConfigError(f"no such environment spec file: {path}")
    return parse_spec(path.read_bytes(), str(path))


def _validated(document: dict[str, Any], source: str) -> EnvSpec:
    version = document.get("schema_version", SPOKEN_VERSIONS[-1])
    if version not in SPOKEN_VERSIONS:
        raise UnspokenVersion(
            f"environment spec {source} pins protocol version {version!r}; this software speaks versions "
            f"{SPOKEN_VERSIONS[0]}-{SPOKEN_VERSIONS[-1]}: take part with a crucible that speaks it",
            version,
        )
    try:
        return EnvSpec.model_validate(document)
    except ValidationError as error:
        where, message, _ = first_problem(error)
        raise ConfigError(f"environment spec {source}: {where or 'spec'}: {message}") from None


def _value(text: str) -> Any:
    """A --set value: JSON when it parses (numbers, booleans, lists), the text itself otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def apply_settings(document: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """`key=value` settings applied to a spec document: a dotted key is a path in the spec
    (`training.group_size=4`), a top-level key of the spec sets it (`eval_size=500`), a key the
    environment's parameters define sets that parameter, and any other key is a dataset configuration
    key (`params.config`). Returns a new document; `document` is left as it was."""
    document = copy.deepcopy(document)
    params_fields = set(environment_kind(str(document.get("environment", ""))).params_model.model_fields)
    top_level = {"eval_size", "schema_version"}
    for setting in settings:
        key, equals, text = setting.partition("=")
        if not equals or not key:
            raise ConfigError(f"--set {setting!r}: expected key=value")
        value = _value(text)
        if "." in key:
            path = key.split(".")
        elif key in top_level:
            path = [key]
        elif key in params_fields:
            path = ["params", key]
        elif "config" in params_fields:
            path = ["params", "config", key]
        else:
            choices = ", ".join([*sorted(params_fields), *sorted(top_level)])
            raise ConfigError(f"--set {key}: unknown setting: one of {choices}, or a dotted path in the spec")
        node = document
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part} is not a section of the spec")
            node = child
        node[path[-1]] = value
    return document


def spec_with_settings(document: dict[str, Any], settings: list[str]) -> EnvSpec:
    """A spec document with `key=value` settings applied (see `apply_settings`), checked."""
    return _validated(apply_settings(document, settings), "from --set")
