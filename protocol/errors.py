"""One exception root for Crucible; the CLI turns each into one line and an exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError


class CrucibleError(Exception):
    """Anything Crucible reports to a user as a single line."""


class ConfigError(CrucibleError):
    """Bad input: a malformed address, CID or amount, a missing file, a parameter out of range."""


class UnspokenVersion(ConfigError):
    """A task's spec pins a protocol version this software does not speak: it cannot judge or do the task's
    work as the task means it, so it refuses to start (or, seated already, abstains)."""

    def __init__(self, message: str, version: object) -> None:
        super().__init__(message)
        self.version = version


class ChainError(CrucibleError):
    """The chain could not be used: RPC unreachable, wrong chain id, missing deployment."""


class RpcUnreachable(ChainError):
    """The RPC endpoint did not answer, even after retries: an outage a long-running role waits out."""


class TransactionError(ChainError):
    """A transaction was refused, failed or was not mined in time."""


class InsufficientFunds(TransactionError):
    """The sender cannot pay what a transaction may cost (gas, an L1 data fee, its value): nothing was sent."""


class OutOfGas(TransactionError):
    """A mined transaction used all the gas it was given."""


class ContractRevert(TransactionError):
    """A contract call reverted; `name` and `args` are the decoded custom error."""

    def __init__(self, name: str, args: dict[str, object], message: str) -> None:
        super().__init__(message)
        self.name = name
        self.args_by_name = args


class AccountError(CrucibleError):
    """An account could not be found or unlocked."""


class ArtifactError(CrucibleError):
    """Content that does not match its CID, or could not be fetched."""


class OwnFault(ArtifactError):
    """The reader's own fault, never a verdict against whoever published the bytes: its local copy is
    damaged, no source could be reached at all, its disk refused a write. A verifier retries, then
    abstains; an auditor reports that it could not verify."""


class LocalCopyDamaged(OwnFault):
    """A stored copy no longer hashes to its CID (disk rot, a torn write): it was set aside."""


class SourcesUnreachable(OwnFault):
    """No source answered at all (this machine's network, every relay down): nothing is known of the bytes."""


class VerificationError(CrucibleError):
    """A verification check could not be run."""


def first_problem(error: ValidationError) -> tuple[str, str, Any]:
    """The first problem pydantic found in a document: where (a dotted path, "" at the top), what (without
    pydantic's "Value error, " prefix) and the bound it broke (`le`, `ge`…; None when there is none)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    bound = next(iter(first.get("ctx", {}).values()), None)
    return where, message, bound
