"""What every staked role's loop holds (the contracts, its signer, a store, a reporter) and does
alike: readiness checks, its state file, polling through outages, tolerating steps others took first,
keeping rounds moving, settling and collecting its credits; and the picker of red-team strategies."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from protocol.accounts import Signer
from protocol.artifacts.store import Store
from protocol.chain.client import Crucible, Deadlines, Role, RoundState
from protocol.chain.validator_set import seated_set
from protocol.config import crucible_home
from protocol.errors import ConfigError, ContractRevert, RpcUnreachable
from protocol.ml.envs.spec import EnvSpec, parse_spec
from protocol.runtime.reporter import Reporter
from protocol.values import format_tokens, from_wei

MAX_OUTAGE_BACKOFF_S = 10.0
# The longest a loop goes without a full pass while no block comes (see `poll_until`).
IDLE_PASS_S = 2.0
# Red-team modes run here only, unless forced.
DEVNET_CHAIN_ID = 31337
# The reverts that mean another sender (or the clock) got there first, each with what it means for the sender:
# one `raced` line and the loop carries on.
RACED_REVERTS = {
    "MarketOutsideWindow": "its window closed (or had not opened) when it landed",
    "MarketNotCanary": "a canary disputed (or revealed) before its reveal landed",
    "MarketCanaryRate": "another canary of the round was revealed first",
    "MarketOutcomeChanged": "a vote or a reveal changed the outcome it was sent against",
    "MarketWrongEpoch": "a dispute or a reveal changed the included set it was computed on",
    "MarketRoundFinalised": "someone finalised the round first",
    "MarketOpenDisputes": "a dispute of the round is still open",
    "MarketAlreadySettled": "someone settled it first",
    "MarketDisputeNotOpen": "the dispute was already resolved",
    "MarketDisputeVotingOpen": "the dispute's vote is still open",
    "MarketAlreadyProposed": "its proposal was already counted",
    "MarketAlreadyVoted": "its vote was already counted",
    "MarketAlreadyDisputed": "someone disputed it first",
    "MarketNoCommittee": "no committee can judge a dispute now",
    "MarketWrongRound": "the round moved on",
    "MarketTaskEnded": "the task ended first",
    "MarketNothingToClaim": "nothing was left to claim",
    "MarketStalenessBound": "the round is too far ahead of the last final one",
    # The seed block's header was read, then the chain reorganised under it (its hash changed): read again.
    "MarketWrongHeader": "the chain reorganised under the block it read",
}

Strategy = TypeVar("Strategy")


def red_team_of(kinds: Mapping[str, type[Strategy]], name: str | None, what: str) -> Strategy | None:
    """The red-team strategy called `name` among `kinds` (None: honest); ConfigError naming `what` and
    the choices for an unknown one. The node's and the validator's adversaries are picked with it."""
    if name is None:
        return None
    kind = kinds.get(name)
    if kind is None:
        raise ConfigError(f"unknown {what} {name!r}: one of {', '.join(kinds)}")
    return kind()


class Participant:
    """One identity taking part in one task."""

    def __init__(self, crucible: Crucible, signer: Signer, store: Store, reporter: Reporter, task_id: int) -> None:
        self.crucible = crucible
        self.signer = signer
        self.store = store
        self.reporter = reporter
        self.task_id = task_id
        self.address = signer.address
        reporter.use_token(crucible.decimals, crucible.symbol)

    # ------------------------------------------------------------ readiness

    def report_validator_set(self) -> None:
        """Reports the task's largest seat holders beside its declared colluding share (`validator_set`), and a
        `warning` when one address alone holds more: the task's deterrence figure then does not hold."""
        declared = self.crucible.task_params(self.task_id).colluding_share_ppm
        found = seated_set(self.crucible, self.task_id, declared)
        self.reporter.event("validator_set", task=self.task_id, **found.as_json())
        if found.one_exceeds:
            self.reporter.event("warning", task=self.task_id, reason=found.line("seat holder(s)"))

    def refuse_red_team_off_devnet(self, adversary: str | None, force: bool) -> None:
        """Red-team modes run on the devnet only, unless forced: ConfigError naming the mode otherwise."""
        chain_id = self.crucible.chain.chain_id
        if adversary is not None and chain_id != DEVNET_CHAIN_ID and not force:
            raise ConfigError(
                f"refusing to run adversary {adversary} on chain {chain_id}: red-team mode is for the devnet "
                f"({DEVNET_CHAIN_ID}); pass --force-adversary to override"
            )

    def check_stake(self, role: Role, needed_wei: int | None) -> None:
        """ConfigError when this identity is staked in another role, or (with `needed_wei`) has less free
        stake than that, naming the command that fixes it."""
        account = self.crucible.stake_account(self.address)
        name = role.name.lower()
        if account.staked and account.role != role:
            raise ConfigError(f"{self.address} is staked as a {account.role.name.lower()}, not as a {name}")
        if needed_wei is not None and account.free < needed_wei:
            decimals, symbol = self.crucible.decimals, self.crucible.symbol
            missing = from_wei(needed_wei - account.free, decimals)
            raise ConfigError(
                f"{self.address} has {format_tokens(account.free, decimals, symbol)} of free stake; task "
                f"{self.task_id} needs {format_tokens(needed_wei, decimals, symbol)}: stake {missing} more with "
                f"`crucible stake deposit {missing} --role {name}`"
            )

    def task_spec(self) -> EnvSpec:
        """The task's environment spec, fetched by its CID and checked."""
        _, env_cid = self.crucible.task_cids(self.task_id)
        return parse_spec(self.store.get(env_cid), env_cid)

    # ------------------------------------------------------------ loop

    def poll_until(self, one_pass: Callable[[], bool], poll_s: float) -> None:
        """Runs `one_pass` until it returns True: looks at the chain's head every `poll_s`, and passes again
        when a new block came, or at the latest `IDLE_PASS_S` (or `poll_s`, if longer) after the last pass.
        Nothing on chain changes between blocks, so a pass on the same head is mostly wasted: it cost an
        idle validator ~11 % of a core at `--poll 0.3` (about 7 calls a pass); the head is one call. The
        idle pass is for what moves without blocks: the wall clock on a devnet that mines on demand, and
        a retry after this machine's own fault. An RPC outage (after the provider's own retries) is
        reported and waited out with a growing pause: every pass reads its duties from the chain again, so
        work interrupted mid-way is found done, or redone, but never sent twice."""
        pause = poll_s
        seen_head, last_pass = -1, float("-inf")
        while True:
            try:
                head = self.crucible.chain.block_number()
                if head != seen_head or time.monotonic() - last_pass >= max(IDLE_PASS_S, poll_s):
                    seen_head, last_pass = head, time.monotonic()
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

    def warn_if_unchecked(self) -> None:
        """One `warning` line when the task has fewer validators than a check's positions: its rounds then end
        unverified (their work neither paid nor slashed) unless more join before the checks start. Advisory: an
        RPC outage skips it (the loop after it is what waits outages out)."""
        try:
            joined = len(self.crucible.members_of(self.task_id))
            needed = self.crucible.task(self.task_id).validators_per_check
        except RpcUnreachable:
            return
        if joined < needed:
            self.reporter.event(
                "warning",
                task=self.task_id,
                validators=joined,
                validators_per_check=needed,
                note=f"{joined} validator(s) joined and a check needs {needed}: unless more join, every round ends "
                "unverified, its work neither paid nor slashed",
            )

    @contextmanager
    def racing(self, step: str, **fields: Any) -> Iterator[None]:
        """Runs a step others may take first, or one whose window may close while it is sent: a revert
        that says so (in `RACED_REVERTS`) is one `raced` line, and the loop carries on. Any other revert
        propagates."""
        try:
            yield
        except ContractRevert as error:
            if error.name not in RACED_REVERTS:
                raise
            self.reporter.event(
                "raced", step=step, revert=error.name, **fields, note=f"{RACED_REVERTS[error.name]}; nothing lost"
            )

    def lands_before(self, deadline: int, step: str, **fields: Any) -> bool:
        """Whether a transaction sent now can be mined before `deadline` (its window's end, exclusive);
        when the next block may fall after it, says so in one `too_late` line and returns False."""
        lands_by = self.crucible.chain.lands_by()
        if lands_by < deadline:
            return True
        self.reporter.event("too_late", step=step, deadline=deadline, next_block_by=lands_by, **fields)
        return False

    def keep_round(self, round_index: int, state: RoundState, deadlines: Deadlines, now: int) -> bool:
        """Takes the round's permissionless step nobody took yet: between the submission and the validate
        deadline, asks for its check seed (from a block ahead) and fixes it once that block exists (from its
        header's prevrandao); after the challenge window with no dispute open, finalises it when it is the
        current round and its aggregators had a challenge window on its checkpoint (a round whose seed was not
        fixed by its validate deadline is finalised unverified).
        Returns whether this identity sent one (False when another raced it there, or none was due)."""
        seed_due = state.check_seed == bytes(32) and state.submission_count > 0
        if seed_due and not state.seed_block and now >= deadlines.submit and self._too_few_validators():
            # Nobody could check the round: no seed to ask for. It ends unverified when its windows pass
            # (its work neither paid nor slashed), unless validators join before that.
            seed_due = False
        if seed_due and deadlines.submit <= now < deadlines.validate and not state.finalised:
            # Nothing to send while the requested block is still to come (a request names a block ahead;
            # past 256 blocks its hash is gone and the call requests another).
            if state.seed_block and self.crucible.chain.block_number() <= state.seed_block:
                return False
            with self.racing("fix_check_seed", round=round_index):
                self.crucible.fix_check_seed(self.signer, self.task_id)
                after = self.crucible.round(self.task_id, round_index)
                if after.check_seed != bytes(32):
                    self.reporter.event("check_seed_fixed", round=round_index)
                else:
                    self.reporter.event("check_seed_requested", round=round_index, block=after.seed_block)
                return True
        elif now >= deadlines.challenge and not state.finalised and state.open_disputes == 0:
            if self.crucible.task(self.task_id).current_round != round_index:
                return False  # rounds finalise in order: one before it is still open
            if now < self.crucible.final_from(self.task_id, round_index):
                return False  # its checkpoint came late (it opened ahead): its aggregators get a whole window
            with self.racing("finalise_round", round=round_index):
                self.crucible.finalise_round(self.signer, self.task_id)
                self.reporter.event("round_finalised", round=round_index)
                return True
        return False

    def _too_few_validators(self) -> bool:
        """Whether fewer validators joined the task than a check needs (the market then refuses a seed)."""
        needed = self.crucible.task(self.task_id).validators_per_check
        return len(self.crucible.members_of(self.task_id)) < needed

    def settle(self, submission: int) -> None:
        """Settles a submission of a finalised round unless it is settled (or another settles it first)."""
        if not self.crucible.submission(submission).settled:
            with self.racing("settle", submission=submission):
                self.crucible.settle(self.signer, submission)

    def claim_credits(self) -> int:
        """Withdraws whatever the market credited this identity; returns the amount (0: nothing)."""
        credit = self.crucible.credit_of(self.address)
        if not credit:
            return 0
        with self.racing("claim"):  # another process of the same key claimed it first
            claimed = self.crucible.claim(self.signer)
            self.reporter.event("claimed", amount_wei=str(credit))
            return claimed
        return 0
