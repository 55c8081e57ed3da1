"""What `crucible demo` runs: its options, the defaults the model decides, and the task's spec (the
environment's defaults, the real-model preset, then the user's settings)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.adversary import ADVERSARIES
from protocol.chain.devnet import check_client
from protocol.chain.params import MAX_CANARY_RATE_PPM, MAX_STALENESS, MIN_WINDOW_S, PPM
from protocol.errors import ConfigError
from protocol.ml.envs.presets import merged, preset
from protocol.ml.envs.spec import MAX_SAMPLES, EnvSpec, load_spec_file, spec_with_settings
from protocol.ml.importing import PACKAGED
from protocol.ml.model import SIZES
from validator.adversary import ADVERSARIES as VALIDATOR_ADVERSARIES

STORES = ("local", "kubo")


@dataclass
class DemoOptions:
    """What `crucible demo` runs."""

    rounds: int | None = None  # None: by model (MADE_UP_DEFAULTS, REAL_DEFAULTS)
    trainers: int = 3
    validators: int = 2
    adversaries: list[str] = field(default_factory=lambda: ["inflated-rewards"])
    env: str | None = None  # an environment name or spec file; None: by model
    model: str = "smollm2"  # a packaged model, a model folder, or a made-up size (tiny, small, base)
    settings: list[str] = field(default_factory=list)  # spec settings, as `crucible env spec --set`
    eval_problems: int = 500  # held-out problems of the gain, the same before and after
    eval_every_round: bool = False  # also evaluate the checkpoints between the first and the last (benches)
    eval_sampled: bool = False  # also answer the held-out problems sampled as the task samples (twice the time)
    warmup_steps: int = 600  # a made-up model's supervised warm-up
    prompts: int | None = None  # prompts a trainer answers per round; None: by model
    minibatch: int | None = None  # sequences per optimizer step; None: the spec's default
    max_staleness: int = 0  # the task's staleness bound: 0 sequential rounds, 1 or 2 pipelined
    # Real windows of these lengths (submit, validate, challenge seconds), the clock left alone
    # (bench/pipelining.py); None: the demo ends each window by moving the devnet's clock once its work is done.
    windows_s: tuple[int, int, int] | None = None
    # Each role process on a core of its own (one thread each), as if on machines of their own: roles then do
    # not slow each other down when their work overlaps (bench/pipelining.py).
    pin_cores: bool = False

    keep: bool = False
    port: int = 8600
    unsafe_no_validation: bool = False  # validators attest without checking (`--adversary lazy`): a lesson
    validator_adversaries: list[str] = field(default_factory=list)  # the first validators' strategies
    # The task's canary rate (a share of a round's submissions, at most half); above 0, canary nodes (as many as
    # the rate of the trainers, at least one) plant the creator's canaries every round.
    canary_rate: float = 0.0
    # Where every artifact goes: "local" (one folder all the demo's processes share) or "kubo" (an IPFS daemon the
    # demo starts, each role process reading and writing through its RPC API with `--store kubo:URL`).
    store: str = "local"
    client: str = "anvil"  # the private devnet's EVM client (protocol.chain.devnet.CLIENTS)

    @property
    def canary_nodes(self) -> int:
        """How many canary nodes the demo runs beside its trainers: about the rate of the trainers, and no more than
        a round may reveal (the market's rate rounds down: n canaries need n <= floor(rate x (trainers + n)))."""
        rate = round(self.canary_rate * PPM)
        if rate == 0:
            return 0
        return min(math.ceil(rate * self.trainers / PPM), rate * self.trainers // (PPM - rate))

    @property
    def round_count(self) -> int:
        """Rounds of training (after `check`)."""
        return int(self.rounds or 0)

    @property
    def made_up(self) -> bool:
        """Whether the initial model is made and warmed up here (a size) rather than a real one."""
        return self.model in SIZES

    def check(self) -> None:
        """Fills the defaults the model decides, then refuses options that cannot make a demo, naming the
        first problem."""
        defaults = MADE_UP_DEFAULTS if self.made_up else REAL_DEFAULTS
        self.rounds = int(defaults["rounds"]) if self.rounds is None else self.rounds
        self.prompts = int(defaults["prompts"]) if self.prompts is None else self.prompts
        self.env = str(defaults["env"]) if self.env is None else self.env

        if not 1 <= self.rounds <= 50:
            raise ConfigError(f"--rounds must be 1 to 50, got {self.rounds}")
        if not 1 <= self.trainers <= 20:
            raise ConfigError(f"--trainers must be 1 to 20, got {self.trainers}")
        if not 1 <= self.validators <= 16:
            raise ConfigError(f"--validators must be 1 to 16, got {self.validators}")
        if len(self.adversaries) >= self.trainers:
            raise ConfigError(
                f"{len(self.adversaries)} adversaries need at least one more trainer than that "
                "(--no-adversary: every trainer honest)"
            )
        for name in self.adversaries:
            if name not in ADVERSARIES:
                raise ConfigError(f"unknown adversary {name!r}: one of {', '.join(sorted(ADVERSARIES))}")
        if len(self.validator_adversaries) > self.validators:
            raise ConfigError(
                f"{len(self.validator_adversaries)} validator adversaries for {self.validators} validators"
            )
        for name in self.validator_adversaries:
            if name not in VALIDATOR_ADVERSARIES:
                choices = ", ".join(sorted(VALIDATOR_ADVERSARIES))
                raise ConfigError(f"unknown validator adversary {name!r}: one of {choices}")
        check_client(self.client)
        if self.store not in STORES:
            raise ConfigError(f"--store must be one of {', '.join(STORES)}, got {self.store!r}")
        if not 0 <= self.canary_rate <= MAX_CANARY_RATE_PPM / PPM:
            raise ConfigError(f"--canary-rate must be in [0, {MAX_CANARY_RATE_PPM / PPM}], got {self.canary_rate}")
        if self.canary_rate and self.canary_nodes == 0:
            rate = round(self.canary_rate * PPM)
            least = -(-(PPM - rate) // rate)
            raise ConfigError(
                f"--canary-rate {self.canary_rate} reveals no canary beside {self.trainers} trainers (a round reveals "
                f"floor(rate x submissions)): use --trainers {least} or more"
            )
        unknown = not self.made_up and self.model not in PACKAGED and not (Path(self.model) / "config.json").is_file()
        if unknown:
            choices = ", ".join([*sorted(PACKAGED), *SIZES])
            raise ConfigError(f"unknown model {self.model!r}: {choices} or a Hugging Face model folder")
        if not 2 <= self.eval_problems <= 100_000:
            raise ConfigError(f"--eval-problems must be 2 to 100000, got {self.eval_problems}")
        if not 1 <= self.prompts <= 512:
            raise ConfigError(f"--prompts must be 1 to 512, got {self.prompts}")
        if not 0 <= self.max_staleness <= MAX_STALENESS:
            raise ConfigError(f"--max-staleness must be 0 to {MAX_STALENESS}, got {self.max_staleness}")
        if self.windows_s is not None and not all(MIN_WINDOW_S <= window <= LONG_WINDOW_S for window in self.windows_s):
            raise ConfigError(f"windows must be {MIN_WINDOW_S} to {LONG_WINDOW_S} s, got {self.windows_s}")
        if self.minibatch is not None and not 0 <= self.minibatch <= MAX_SAMPLES:
            raise ConfigError(f"--minibatch must be 0 (all in one step) to {MAX_SAMPLES}, got {self.minibatch}")
        self.spec()  # an unknown environment or a bad --set is named here, before anything starts

    def spec(self) -> EnvSpec:
        """The task's spec: the environment's defaults (a spec file's content, if --env names one) under the
        `small-model` preset for a real model, --prompts, --minibatch, then --set."""
        env, prompts = str(self.env), int(self.prompts or 0)  # filled in by check()
        path = Path(env)
        if env.endswith(".json") or path.is_file():
            document: dict[str, Any] = json.loads(load_spec_file(path).canonical_bytes())
        else:
            document = preset(REAL_MODEL_PRESET).document(env) if not self.made_up else {"environment": env}
        document = merged(document, {"training": {"prompts_per_round": prompts}})
        if self.minibatch is not None:
            document = merged(document, {"training": {"minibatch_size": self.minibatch}})
        return spec_with_settings(document, self.settings)


LONG_WINDOW_S = 3600  # the demo's windows when it moves the clock itself: longer than any of its steps

# What the model decides when an option is left out: the made-up model learns little per round from
# many prompts; SmolLM2 with LoRA learns from few (bench/rl_curve.py, docs/benchmarks.md).
MADE_UP_DEFAULTS: dict[str, Any] = {"rounds": 5, "prompts": 256, "env": "arithmetic"}
# A real model runs under the `small-model` preset (protocol/ml/envs/presets.py), on its task.
REAL_MODEL_PRESET = "small-model"
DEMO_REAL_ENV = "reasoning-gym/chain_sum"
REAL_DEFAULTS: dict[str, Any] = {"rounds": 3, "prompts": 12, "env": DEMO_REAL_ENV}
