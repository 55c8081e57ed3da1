"""What `crucible task create` (and `task plan`) checks before it sends anything: its options in the contract's
units, checked and turned into the task's parameters with the deterrence line (`draft_task`), the environment
spec, and that the store serves the model and the spec, and that they fit."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import ValidationError

from cli.context import CliContext
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.store import keep_local_copy
from protocol.chain.client import Crucible
from protocol.chain.params import (
    BPS,
    MAX_COLLUDING_SHARE_PPM,
    MAX_COMMITTEE,
    ONE,
    PPM,
    TaskParams,
    least_deterrent_slash,
    least_dispute_bond,
    least_windows,
    max_round_fee,
    max_submission_reward,
    most_dispute_bond,
)
from protocol.errors import ConfigError, first_problem
from protocol.values import checked_cid, format_tokens, is_cid

# The option a person typed for each TaskParams field, so that a refusal names it.
OPTION_OF = {
    "bounty_wei": "--bounty",
    "rounds": "--rounds",
    "sample_rate_ppm": "--sample-rate",
    "validators_per_check": "--validators-per-check",
    "validator_fee_bps": "--validator-fee",
    "finder_share_bps": "--finder-share",
    "slash_wei": "--slash",
    "validator_slash_wei": "--validator-slash",
    "min_trainer_stake_wei": "--min-stake",
    "min_validator_stake_wei": "--min-validator-stake",
    "dispute_bond_wei": "--dispute-bond",
    "max_work_units": "--max-work-units",
    "submit_window_s": "--submit-window",
    "validate_window_s": "--validate-window",
    "challenge_window_s": "--challenge-window",
    "colluding_share_ppm": "--colluding-share",
    "max_staleness": "--max-staleness",
    "canary_rate_ppm": "--canary-rate",
}


def fraction(value: float, name: str, scale: int, allow_zero: bool = True) -> int:
    """A share typed as a fraction (`--sample-rate 0.25`) in the contract's units (`scale`: PPM or BPS)."""
    if not (0 <= value <= 1) or (not allow_zero and value == 0):
        raise ConfigError(f"{name} must be {'in (0, 1]' if not allow_zero else 'in [0, 1]'}, got {value}")
    return round(Decimal(str(value)) * scale)


def env_cid_of(env: str) -> str:
    """The CID of `--env`: a spec file's (checked), an environment name's default spec (as `env spec NAME`
    prints it), or a CID as given. A spec made here is kept in the local store."""
    from protocol.ml.envs.spec import default_spec, parse_spec

    path = Path(env)
    if path.exists():
        data = path.read_bytes()
        parse_spec(data, str(path))
    elif env.endswith(".json"):
        raise ConfigError(f"no such environment spec file: {env}")
    elif is_cid(env):
        return env
    else:
        data = default_spec(env).canonical_bytes()  # an unknown name: one line naming the choices
    cid = cid_of_bytes(data)
    keep_local_copy(data, cid)
    return cid


def check_served(model_cid: str, env_cid: str, store_text: str | None) -> None:
    """Refuses a task whose model or spec the store cannot serve: trainers could never start, and the
    bounty would sit in escrow until someone closed the rounds. The model's manifest and the spec are
    fetched (checked against their CIDs) and parsed; a local store must hold every shard too."""
    from protocol.artifacts.backends import open_store
    from protocol.artifacts.manifest import load_manifest
    from protocol.artifacts.store import LocalStore
    from protocol.errors import CrucibleError
    from protocol.ml.adapters import check_model_fits
    from protocol.ml.envs.spec import parse_spec

    store = open_store(store_text)
    hint = "publish it first (`crucible model publish`), or pass --skip-availability-check (nothing sent)"
    try:
        manifest = load_manifest(model_cid, store)
    except CrucibleError as error:  # the store's own faults included
        raise ConfigError(f"the store cannot serve the model {model_cid}: {error}; {hint}") from None
    if manifest.kind != "checkpoint":
        raise ConfigError(f"{model_cid} is an {manifest.kind} manifest, not a checkpoint (nothing sent)")
    if isinstance(store, LocalStore):
        missing = [shard.cid for shard in manifest.shards if not store.has(shard.cid)]
        if missing:
            raise ConfigError(f"the store lacks {len(missing)} shard(s) of the model {model_cid}; {hint}")
    try:
        spec = parse_spec(store.get(env_cid), env_cid)
    except CrucibleError as error:
        raise ConfigError(f"the store cannot serve the environment spec {env_cid}: {error} (nothing sent)") from None
    try:
        check_model_fits(manifest.model_config_data or {}, spec)
    except ConfigError as error:
        raise ConfigError(f"{error}: the spec does not fit the model {model_cid} (nothing sent)") from None


def check_windows_served(params: TaskParams, block_interval_s: int) -> None:
    """Refuses, naming the option and the least window that fits, a window the chain's blocks cannot serve: a seed
    never fixed in time leaves every round unverified (honest work unpaid), an appeal whose committee is seeded
    after its votes close can never win."""
    for field, least in least_windows(block_interval_s).items():
        value = getattr(params, field)
        if value < least:
            raise ConfigError(
                f"task parameters refused: {OPTION_OF[field]} {value} s is too short for this chain's blocks (one "
                f"every {block_interval_s} s): it needs at least {least} s (nothing sent)"
            )


def default_dispute_bond(
    colluding_ppm: int,
    validators_per_check: int,
    bounty_wei: int,
    rounds: int,
    fee_bps: int,
    slash_wei: int,
    validator_slash_wei: int,
    unit_wei: int,
) -> int:
    """The least dispute bond with which no appeal pays (`least_dispute_bond`), rounded up to whole tokens unless
    that passes the most an honest appeal can carry (`most_dispute_bond`); the validator slash where the numbers
    are out of range (the parameter check then names them)."""
    if not (1 <= validators_per_check <= MAX_COMMITTEE and colluding_ppm <= MAX_COLLUDING_SHARE_PPM and rounds >= 1):
        return validator_slash_wei
    gain = (
        max_submission_reward(bounty_wei, rounds, fee_bps)
        + slash_wei
        + validators_per_check * validator_slash_wei
        + max_round_fee(bounty_wei, rounds, fee_bps)
    )
    least = least_dispute_bond(colluding_ppm, validators_per_check, gain, validator_slash_wei)
    rounded = -(-least // unit_wei) * unit_wei
    # Whole tokens, unless rounding up would pass the most bond an honest appeal can carry.
    most = most_dispute_bond(colluding_ppm, validators_per_check, slash_wei)
    return least if most is not None and rounded > most else rounded


@dataclass(frozen=True)
class Draft:
    """A task as `create` would send it: its parameters, checked, with the deterrence line people read."""

    crucible: Crucible
    params: TaskParams
    env_cid: str
    summary: str


def draft_task(cli: CliContext, options: dict[str, Any]) -> Draft:
    """The parameters `task create` and `task plan` build from their options, checked (one line naming the option
    and nothing sent when they are refused, or when cheating would pay)."""
    o = SimpleNamespace(**options)
    checked_cid(o.model, "model CID")
    env_cid = env_cid_of(o.env)
    if not o.skip_availability_check:
        check_served(o.model, env_cid, o.store)
    crucible = cli.crucible()
    decimals = crucible.decimals
    bounty_wei = cli.tokens(o.bounty, "bounty")
    if o.rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, got {o.rounds}")
    sample_ppm = fraction(o.sample_rate, "--sample-rate", PPM, allow_zero=False)
    fee_bps = fraction(o.validator_fee, "--validator-fee", BPS)
    colluding_ppm = fraction(o.colluding_share, "--colluding-share", PPM)
    canary_ppm = fraction(o.canary_rate, "--canary-rate", PPM)
    finder_bps = fraction(o.finder_share, "--finder-share", BPS)
    unit = 10**decimals
    if o.slash is None:
        # Out-of-range numbers get the default a valid one would; the parameter check below names them.
        per_check = o.validators_per_check if 1 <= o.validators_per_check <= MAX_COMMITTEE else 1
        slash_wei = least_deterrent_slash(
            sample_ppm,
            min(colluding_ppm, MAX_COLLUDING_SHARE_PPM),
            per_check,
            finder_bps,
            max_submission_reward(bounty_wei, o.rounds, fee_bps),
            max_round_fee(bounty_wei, o.rounds, fee_bps),
            unit,
        )
    else:
        slash_wei = cli.tokens(o.slash, "slash")
    validator_slash_wei = cli.tokens(o.validator_slash, "validator slash") if o.validator_slash else slash_wei // 10
    min_stake_wei = cli.tokens(o.min_stake, "min stake") if o.min_stake is not None else slash_wei
    try:
        params = TaskParams(
            bounty_wei=bounty_wei,
            rounds=o.rounds,
            sample_rate_ppm=sample_ppm,
            validators_per_check=o.validators_per_check,
            validator_fee_bps=fee_bps,
            finder_share_bps=finder_bps,
            slash_wei=slash_wei,
            validator_slash_wei=validator_slash_wei,
            min_trainer_stake_wei=min_stake_wei,
            min_validator_stake_wei=(
                cli.tokens(o.min_validator_stake, "min validator stake")
                if o.min_validator_stake
                else min_stake_wei // 10
            ),
            dispute_bond_wei=(
                cli.tokens(o.dispute_bond, "dispute bond")
                if o.dispute_bond
                else default_dispute_bond(
                    colluding_ppm,
                    o.validators_per_check,
                    bounty_wei,
                    o.rounds,
                    fee_bps,
                    slash_wei,
                    validator_slash_wei,
                    unit,
                )
            ),
            max_work_units=o.max_work_units,
            submit_window_s=o.submit_window,
            validate_window_s=o.validate_window,
            challenge_window_s=o.challenge_window,
            colluding_share_ppm=colluding_ppm,
            max_staleness=o.max_staleness,
            canary_rate_ppm=canary_ppm,
        )
    except ValidationError as error:
        field, message, bound = first_problem(error)
        if field.endswith("_wei") and isinstance(bound, int):  # a limit of a token amount, in tokens as typed
            message = message.replace(str(bound), format_tokens(bound, decimals, crucible.symbol))
        where = f"{OPTION_OF.get(field, field)}: " if field else ""
        raise ConfigError(f"task parameters refused: {where}{message}") from None
    check_windows_served(params, crucible.chain.block_interval_s())
    ratio = params.deterrence
    symbol = crucible.symbol
    slash_text = format_tokens(params.slash_wei, decimals, symbol)
    reward_text = format_tokens(params.max_reward_wei, decimals, symbol)
    shown_ratio = f"{ratio:.3f}" if ratio != float("inf") else "unbounded"
    caught = params.caught / (PPM * ONE)
    expected = format_tokens(round(abs(params.expected_cheat_gain_wei)), decimals, symbol)
    summary = (
        f"deterrence {shown_ratio} (at least 1 passes): a cheat is caught with probability q = {caught:.3f} "
        f"(checked with p = {o.sample_rate:g}, and honest validators hold most of its {o.validators_per_check} "
        f"positions while up to {o.colluding_share:.1%} of validator stake colludes) and then loses up to "
        f"S = {slash_text} (less the finder's share its colluders take back); uncaught it earns at most "
        f"R = {reward_text}; over the whole game, appeal included, a cheat expects "
        f"{'to lose' if params.expected_cheat_gain_wei <= 0 else 'to GAIN'} {expected}"
    )
    if not params.deters:
        raise ConfigError(
            f"{summary}; cheating would pay: raise --slash or --sample-rate, or lower --colluding-share (nothing sent)"
        )
    return Draft(crucible, params, env_cid, summary)
