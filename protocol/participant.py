"""What every staked role's loop holds (the contracts, its signer, a store, a reporter) and does
alike (its state file, collecting its credits)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from protocol.accounts import Signer
from protocol.artifacts.store import Store
from protocol.client import Crucible, Deadlines, RoundState
from protocol.config import crucible_home
from protocol.errors import ContractRevert, RpcUnreachable
from protocol.reporter import Reporter

MAX_OUTAGE_BACKOFF_S = 10.0
# Red-team modes run here only, unless forced.
DEVNET_CHAIN_ID = 31337
# Reverts that mean another participant already took a permissionless step, or a window just
# closed: nothing to do.
RACED_REVERTS = {
    "MarketOutsideWindow",
    "MarketRoundFinalised",
    "MarketOpenDisputes",
    "MarketAlreadySettled",
    "MarketDisputeNotOpen",
    "MarketDisputeVotingOpen",
    "MarketAlreadyProposed",
    "MarketAlreadyVoted",
    "MarketAlreadyDisputed",
    "MarketNoCommittee",
    "MarketWrongRound",
    "MarketTaskEnded",
}


class Participant:
    """One identity taking part in one task."""

    def __init__(self, crucible: Crucible, signer: Signer, store: Store, reporter: Reporter, task_id: int) -> None:
        self.crucible = crucible
        self.signer = signer
        self.store = store
        self.reporter = reporter
        self.task_id = task_id
        self.address = signer.address

    def poll_until(self, one_pass: Callable[[], bool], poll_s: float) -> None:
        """Runs `one_pass` every `poll_s` until it returns True. An RPC outage (after the provider's own
        retries) is reported and waited out with a growing pause: every pass reads its duties from the
        chain again, so work interrupted mid-way is found done, or redone, but never sent twice."""
        pause = poll_s
        while True:
            try:
                if one_pass():
                    return
                pause = poll_s
            except RpcUnreachable as error:
                pause = min(max(pause, poll_s) * 2, MAX_OUTAGE_BACKOFF_S)
                self.reporter.event("rpc_unreachable", reason=str(error), retry_in_s=pause)
            time.sleep(pause)

    def state_file(self, role: str) -> Path:
        """This identity's state file for the task: `$CRUCIBLE_HOME/<role>/<chain>-<market>-<task>-<address>.json`."""
        chain_id = self.crucible.chain.chain_id
        market = self.crucible.deployment.TaskMarket
        return crucible_home() / role / f"{chain_id}-{market}-{self.task_id}-{self.address}.json"

    def keep_round(self, round_index: int, state: RoundState, deadlines: Deadlines, now: int) -> bool:
        """Takes the round's permissionless step nobody took yet: fixes its check seed once the
        submission window closed, or finalises it after the challenge window with no dispute open.
        Returns whether this identity sent one (False when another raced it there)."""
        try:
            if (
                deadlines.submit <= now < deadlines.validate
                and state.check_seed == bytes(32)
                and state.submission_count
            ):
                self.crucible.fix_check_seed(self.signer, self.task_id)
                self.reporter.event("check_seed_fixed", round=round_index)
                return True
            if now >= deadlines.challenge and not state.finalised and state.open_disputes == 0:
                self.crucible.finalise_round(self.signer, self.task_id)
                self.reporter.event("round_finalised", round=round_index)
                return True
        except ContractRevert as error:
            if error.name not in RACED_REVERTS:
                raise
        return False

    def claim_credits(self) -> int:
        """Withdraws whatever the market credited this identity; returns the amount (0: nothing)."""
        credit = self.crucible.credit_of(self.address)
        if not credit:
            return 0
        claimed = self.crucible.claim(self.signer)
        self.reporter.event("claimed", amount_wei=str(credit))
        return claimed
