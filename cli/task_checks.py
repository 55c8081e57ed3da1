"""What `crucible task create` checks before it sends anything: its options in the contract's units,
the environment spec, and that the store serves the model and the spec, and that they fit."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.store import keep_local_copy
from protocol.errors import ConfigError
from protocol.values import is_cid

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
