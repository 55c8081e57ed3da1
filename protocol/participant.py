"""What every staked role's loop holds (the contracts, its signer, a store, a reporter) and does
alike (its state file, collecting its credits)."""

from __future__ import annotations

from pathlib import Path

from protocol.accounts import Signer
from protocol.artifacts.store import Store
from protocol.client import Crucible
from protocol.config import crucible_home
from protocol.reporter import Reporter


class Participant:
    """One identity taking part in one task."""

    def __init__(self, crucible: Crucible, signer: Signer, store: Store, reporter: Reporter, task_id: int) -> None:
        self.crucible = crucible
        self.signer = signer
        self.store = store
        self.reporter = reporter
        self.task_id = task_id
        self.address = signer.address

    def state_file(self, role: str) -> Path:
        """This identity's state file for the task: `$CRUCIBLE_HOME/<role>/<chain>-<market>-<task>-<address>.json`."""
        chain_id = self.crucible.chain.chain_id
        market = self.crucible.deployment.TaskMarket
        return crucible_home() / role / f"{chain_id}-{market}-{self.task_id}-{self.address}.json"

    def claim_credits(self) -> int:
        """Withdraws whatever the market credited this identity; returns the amount (0: nothing)."""
        credit = self.crucible.credit_of(self.address)
        if not credit:
            return 0
        claimed = self.crucible.claim(self.signer)
        self.reporter.event("claimed", amount_wei=str(credit))
        return claimed
