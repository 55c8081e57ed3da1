"""Typed wrappers for every call and view of the deployed contracts."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from web3.logs import DISCARD
from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.chain.assignment import Member
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment
from protocol.chain.ids import checkpoint_digests, reveal_from, submission_id, vote_commitment
from protocol.chain.params import TaskParams
from protocol.chain.seeds import HASH_HORIZON, header_rlp
from protocol.errors import ChainError, ConfigError
from protocol.values import checked_address, checked_cid, format_tokens

MAX_UINT256 = 2**256 - 1


class Role(IntEnum):
    """`IStakeManager.Role`."""

    NONE = 0
    TRAINER = 1
    VALIDATOR = 2


@dataclass(frozen=True)
class StakeAccount:
    """`IStakeManager.Account`, in base units."""

    staked: int
    locked: int
    role: Role
    release_at: int
    unbonding: int

    @property
    def free(self) -> int:
        """Stake neither locked nor unbonding."""
        return max(self.staked - self.locked, 0)


@dataclass(frozen=True)
class Seat:
    """`ITaskMarket.Seat`: a validator's place in a task's joining order (index + 1; 0 when not joined), the
    positions it voted on that are not settled yet (its stake answers for them until they are), whether a
    slash took its seat, and the range of seat stake it holds in the draws, `[seat_from, seat_from + stake)`."""

    slot: int
    pending_votes: int
    benched: bool
    seat_from: int
    stake: int


@dataclass(frozen=True)
class TaskState:
    """`ITaskMarket.Task`."""

    creator: str
    rounds: int
    current_round: int
    validators_per_check: int
    sample_rate_ppm: int
    validator_fee_bps: int
    finder_share_bps: int
    min_trainer_stake: int
    max_work_units: int
    submit_window_s: int
    validate_window_s: int
    challenge_window_s: int
    ended: bool
    open_round: int  # the newest round opened: rounds current_round..open_round take part (see max_staleness)
    max_staleness: int
    bounty: int
    pool: int
    canary_rate_ppm: int  # the most canaries a round may reveal, per million submissions (0: none)
    slash_amount: int
    validator_slash: int
    min_validator_stake: int
    dispute_bond: int


@dataclass(frozen=True)
class RoundState:
    """`ITaskMarket.Round`."""

    work_seed: bytes
    check_seed: bytes
    opened_at: int
    submission_count: int
    validator_count: int
    open_disputes: int
    checkpoint_epoch: int
    finalised: bool
    unverified: bool  # finalised without a check seed fixed by its validate deadline: nothing paid or slashed
    included_units: int  # units the trainer budget is shared over: included work and revealed canaries
    canaries: int  # canaries revealed in the round
    attest_count: int
    checks_remaining: int
    units_remaining: int
    seed_block: int  # the block whose prevrandao will be the check seed (0: not requested yet)
    seat_stake: int  # the seat stake the round's draws share out (snapshot with validator_count)
    checkpoint_at: int  # for a round opened ahead: when its checkpoint was fixed (0: opened on it, or not yet)
    trainer_budget_remaining: int
    fee_remaining: int
    checkpoint: bytes
    agreed_next: bytes


@dataclass(frozen=True)
class SubmissionState:
    """`ITaskMarket.Submission`."""

    work_units: int
    base_round: int  # the round whose agreed checkpoint the work started from
    voted_mask: int
    invalid_mask: int
    rejected: bool
    disputed: bool
    settled: bool
    canary: bool  # revealed as a canary by the task's creator
    tag: bytes  # the first 12 bytes of the tag sent with the work
    committed_mask: int  # the check positions whose holders committed a vote (`voted_mask`: those revealed)


@dataclass(frozen=True)
class DisputeState:
    """`ITaskMarket.Dispute`."""

    disputer: str
    bond: int
    seed_block: int  # the block whose prevrandao will seed the committee
    deadline: int
    voted_mask: int
    valid_mask: int
    claim_valid: bool
    open: bool
    upheld: bool
    committed_mask: int  # committee positions whose holders committed a vote (`voted_mask`: those revealed)
    seed: bytes


@dataclass(frozen=True)
class Deadlines:
    """A round's deadlines, as Unix timestamps."""

    submit: int
    validate: int
    challenge: int

    @property
    def votes_revealed_from(self) -> int:
        """Where the validate window's reveal phase starts, its last quarter (`Ids.revealFrom`): commitments before,
        reveals from here to the validate deadline."""
        return reveal_from(self.validate, self.validate - self.submit)

    @property
    def reveals_end(self) -> int:
        """When a task's canaries can no longer be revealed: the middle of the challenge window (`Canaries.reveal`)."""
        return self.validate + (self.challenge - self.validate) // 2


class Crucible:
    """The deployed token, stake manager and market of one chain."""

    def __init__(self, chain: Chain, deployment: Deployment) -> None:
        if deployment.chainId != chain.chain_id:
            raise ChainError(
                f"wrong chain: the deployment is for chain id {deployment.chainId}, the RPC serves {chain.chain_id}"
            )
        self.chain = chain
        self.deployment = deployment
        self.token = chain.contract("DevToken", deployment.Token)
        self.stakes = chain.contract("StakeManager", deployment.StakeManager)
        self.market = chain.contract("TaskMarket", deployment.TaskMarket)
        # Views anyone can recompute from the market's state (draws, ids, deadlines) live in its lens.
        self.lens = chain.contract("TaskMarketLens", deployment.TaskMarketLens)
        self._decimals: int | None = None
        self._symbol: str | None = None

    # ------------------------------------------------------------ token

    @property
    def decimals(self) -> int:
        """The token's decimals."""
        if self._decimals is None:
            self._decimals = int(self.chain.call(self.token.functions.decimals()))
        return self._decimals

    @property
    def symbol(self) -> str:
        """The token's symbol."""
        if self._symbol is None:
            self._symbol = str(self.chain.call(self.token.functions.symbol()))
        return self._symbol

    def balance_of(self, address: str) -> int:
        """Token balance in base units."""
        return int(self.chain.call(self.token.functions.balanceOf(checked_address(address))))

    def allowance(self, owner: str, spender: str) -> int:
        """Token allowance in base units."""
        return int(self.chain.call(self.token.functions.allowance(owner, spender)))

    def transfer(self, signer: Signer, to: str, amount_wei: int) -> TxReceipt:
        """Sends tokens."""
        return self.chain.transact(self.token.functions.transfer(checked_address(to), amount_wei), signer)

    def ensure_allowance(self, signer: Signer, spender: str, amount_wei: int) -> None:
        """Approves `spender` for `amount_wei` unless it may spend that much already."""
        if self.allowance(signer.address, spender) < amount_wei:
            self.chain.transact(self.token.functions.approve(spender, amount_wei), signer)

    def require_balance(self, address: str, amount_wei: int, what: str) -> None:
        """Raises ConfigError before anything is sent when `address` cannot pay `amount_wei`."""
        balance = self.balance_of(address)
        if balance < amount_wei:
            raise ConfigError(
                f"{what} of {format_tokens(amount_wei, self.decimals, self.symbol)} is over the balance of "
                f"{address}: {format_tokens(balance, self.decimals, self.symbol)}"
            )

    # ------------------------------------------------------------ stake

    def stake(self, signer: Signer, amount_wei: int, role: Role) -> TxReceipt:
        """Stakes `amount_wei` for `role`, approving the stake manager first when needed. What the stake
        manager would refuse is refused here first, before the approval is sent and paid for."""
        if amount_wei <= 0:
            raise ConfigError("stake amount must be more than zero")
        current = self.stake_account(signer.address)
        if current.role not in (Role.NONE, role) and (current.staked or current.unbonding):
            raise ConfigError(
                f"{signer.address} is staked as a {current.role.name.lower()}: an address holds one role, so "
                f"stake as a {role.name.lower()} from another account (or unstake and withdraw first)"
            )
        self.require_balance(signer.address, amount_wei, "stake")
        self.ensure_allowance(signer, self.stakes.address, amount_wei)
        return self.chain.transact(self.stakes.functions.stake(amount_wei, int(role)), signer)

    def request_unstake(self, signer: Signer, amount_wei: int) -> TxReceipt:
        """Moves unlocked stake to unbonding."""
        return self.chain.transact(self.stakes.functions.requestUnstake(amount_wei), signer)

    def withdraw(self, signer: Signer) -> TxReceipt:
        """Withdraws unbonded stake."""
        return self.chain.transact(self.stakes.functions.withdraw(), signer)

    def stake_account(self, address: str) -> StakeAccount:
        """The stake account of `address`."""
        value = self.chain.call(self.stakes.functions.accountOf(checked_address(address)))
        return StakeAccount(value[0], value[1], Role(value[2]), value[3], value[4])

    # ------------------------------------------------------------ tasks

    def create_task(self, signer: Signer, params: TaskParams, model_cid: str, env_cid: str) -> int:
        """Creates a task escrowing the bounty (approving it first); returns the task id."""
        checked_cid(model_cid, "model CID")
        checked_cid(env_cid, "environment CID")
        self.require_balance(signer.address, params.bounty_wei, "bounty")
        self.ensure_allowance(signer, self.market.address, params.bounty_wei)
        function = self.market.functions.createTask(params.as_contract_tuple(), model_cid, env_cid)
        receipt = self.chain.transact(function, signer)
        (event,) = self.market.events.TaskCreated().process_receipt(receipt, errors=DISCARD)
        return int(event["args"]["taskId"])

    def join_task(self, signer: Signer, task_id: int, stake_wei: int | None = None) -> TxReceipt:
        """Joins a task as a validator, locking `stake_wei` (default: the task's minimum): the weight of
        its seat in every draw."""
        if stake_wei is None:
            stake_wei = self.task(task_id).min_validator_stake
        return self.chain.transact(self.market.functions.joinTask(task_id, stake_wei), signer)

    def leave_task(self, signer: Signer, task_id: int) -> TxReceipt:
        """Leaves an ended task."""
        return self.chain.transact(self.market.functions.leaveTask(task_id), signer)

    def submit_work(
        self,
        signer: Signer,
        task_id: int,
        round_index: int,
        rollout_cid: str,
        update_cid: str,
        work_units: int,
        proofs_digest: bytes,
        base_round: int | None = None,
        tag: bytes | None = None,
    ) -> int:
        """Submits a round's work, computed from the agreed checkpoint of `base_round` (default: the round's
        own, the only one a task without pipelining takes); returns the submission id. `tag` is 32 random bytes
        unless given (a canary's is `canary_tag` of its salt): real work and canaries look alike."""
        checked_cid(rollout_cid, "rollout CID")
        checked_cid(update_cid, "update CID")
        base = round_index if base_round is None else base_round
        function = self.market.functions.submitWork(
            task_id,
            round_index,
            base,
            rollout_cid,
            update_cid,
            work_units,
            proofs_digest,
            tag or secrets.token_bytes(32),
        )
        self.chain.transact(function, signer)
        return submission_id(task_id, round_index, signer.address)

    def reveal_canary(self, signer: Signer, submission: int, salt: bytes) -> TxReceipt:
        """Reveals a canary the signer (the task's creator) planted, by the salt its tag was made from: after the
        validate deadline, before the middle of the challenge window."""
        return self.chain.transact(self.market.functions.revealCanary(submission, salt), signer)

    def open_next_round(self, signer: Signer, task_id: int) -> TxReceipt:
        """Opens the next round ahead of finality (a task with `max_staleness` above 0)."""
        return self.chain.transact(self.market.functions.openNextRound(task_id), signer)

    def fix_check_seed(self, signer: Signer, task_id: int) -> TxReceipt:
        """For every live round past its submission window and before its validate deadline: requests its check
        seed from a block ahead, or fixes it from that block's prevrandao once the block exists (its header is
        sent; the oldest round waiting for one is served first)."""
        return self.chain.transact(self.market.functions.fixCheckSeed(task_id, self._seed_header(task_id)), signer)

    def _seed_header(self, task_id: int) -> bytes:
        """The header of the block the oldest round still being checked waits for (mined, hash still known),
        else empty. A round past its validate deadline is skipped, as the market skips it: it stays unverified,
        and its block must not take the place of a live round's."""
        task = self.task(task_id)
        head, now = self.chain.block_number(), self.chain.now()
        for round_index in range(task.current_round, task.open_round + 1):
            state = self.round(task_id, round_index)
            deadlines = self.deadlines(task_id, round_index)
            if now < deadlines.submit:
                break
            waiting = state.check_seed == bytes(32) and state.seed_block and now < deadlines.validate
            if waiting and 0 < head - state.seed_block <= HASH_HORIZON:
                return self.block_header(state.seed_block)
        return b""

    def block_header(self, number: int) -> bytes:
        """The RLP header of block `number`, checked against its hash (`protocol/chain/seeds.py`)."""
        return header_rlp(self.chain.w3.eth.get_block(number))

    def fix_dispute_seed(self, signer: Signer, submission: int) -> TxReceipt | None:
        """Fixes a dispute's committee seed from its seed block's header, or — when that block's hash is gone —
        moves the seed block ahead (the block-moving call). None while the seed block is still to come or the
        seed is fixed already."""
        state = self.dispute_state(submission)
        head = self.chain.block_number()
        if not state.open or state.seed != bytes(32) or head <= state.seed_block:
            return None
        header = self.block_header(state.seed_block) if head - state.seed_block <= HASH_HORIZON else b""
        return self.chain.transact(self.market.functions.fixDisputeSeed(submission, header), signer)

    def commit_attestation(
        self, signer: Signer, submission: int, valid: bool, evidence_cid: str, salt: bytes
    ) -> TxReceipt:
        """Commits to a verdict on an assigned submission in the commit phase (`vote_commitment` hides it: keep
        `salt` until the reveal, see `attest`)."""
        checked_cid(evidence_cid, "evidence CID")
        commitment = vote_commitment(submission, signer.address, valid, evidence_cid, salt)
        return self.chain.transact(self.market.functions.commitAttestation(submission, commitment), signer)

    def attest(self, signer: Signer, submission: int, valid: bool, evidence_cid: str, salt: bytes) -> TxReceipt:
        """Reveals the verdict committed with `commit_attestation`, in the reveal phase: the vote counts from here."""
        checked_cid(evidence_cid, "evidence CID")
        return self.chain.transact(self.market.functions.attest(submission, valid, evidence_cid, salt), signer)

    def dispute(self, signer: Signer, submission: int, claim_valid: bool | None = None) -> TxReceipt:
        """Disputes a submission's outcome, paying the task's bond (approved first). `claim_valid` is what the
        disputer claims (default: the opposite of the outcome now); the chain refuses the dispute
        (`MarketOutcomeChanged`) when the outcome changed before it landed."""
        task_id = submission >> 192
        bond = self.task(task_id).dispute_bond
        if claim_valid is None:
            claim_valid = self.submission(submission).rejected
        self.require_balance(signer.address, bond, "dispute bond")
        self.ensure_allowance(signer, self.market.address, bond)
        return self.chain.transact(self.market.functions.dispute(submission, claim_valid), signer)

    def require_committee(self, submission: int) -> None:
        """ConfigError, in one line, when no sound committee could judge a dispute on `submission`: its round's
        check never started (no check seed by its validate deadline), so the round is unverified and the market
        refuses the dispute (`MarketNoCommittee`)."""
        task_id, round_index = submission >> 192, (submission >> 160) & 0xFFFFFFFF
        if self.round(task_id, round_index).check_seed == bytes(32):
            raise ConfigError(
                f"no committee can judge a dispute on submission {hex(submission)}: task {task_id} round "
                f"{round_index} was never checked (no check seed by its validate deadline), so it ends unverified "
                "and nothing in it is paid or slashed (nothing sent)"
            )

    def dispute_votes_revealed_from(self, submission: int) -> int:
        """Where a dispute's reveal phase starts: the last quarter of its voting time, a challenge window from its
        filing (`Disputes._revealFrom`): commitments before, reveals from here to its deadline."""
        state = self.dispute_state(submission)
        return reveal_from(state.deadline, self.task(submission >> 192).challenge_window_s)

    def commit_dispute_vote(
        self, signer: Signer, submission: int, valid: bool, evidence_cid: str, salt: bytes
    ) -> TxReceipt:
        """Commits a committee member to a hidden vote on a dispute, in its commit phase (see `vote_dispute`)."""
        checked_cid(evidence_cid, "evidence CID")
        commitment = vote_commitment(submission, signer.address, valid, evidence_cid, salt)
        return self.chain.transact(self.market.functions.commitDisputeVote(submission, commitment), signer)

    def vote_dispute(self, signer: Signer, submission: int, valid: bool, evidence_cid: str, salt: bytes) -> TxReceipt:
        """Reveals a committee member's vote committed with `commit_dispute_vote`, in the dispute's reveal phase."""
        checked_cid(evidence_cid, "evidence CID")
        function = self.market.functions.voteDispute(submission, valid, evidence_cid, salt)
        return self.chain.transact(function, signer)

    def resolve_dispute(self, signer: Signer, submission: int) -> TxReceipt:
        """Resolves a dispute."""
        return self.chain.transact(self.market.functions.resolveDispute(submission), signer)

    def propose_checkpoint(
        self, signer: Signer, task_id: int, round_index: int, checkpoint_cid: str, epoch: int | None = None
    ) -> TxReceipt:
        """Proposes the round's next checkpoint as an aggregator, computed in checkpoint epoch `epoch` (default: the
        round's epoch now); the chain refuses it once a dispute or a canary's reveal changed the included set."""
        checked_cid(checkpoint_cid, "checkpoint CID")
        if epoch is None:
            epoch = self.round(task_id, round_index).checkpoint_epoch
        function = self.market.functions.proposeCheckpoint(task_id, round_index, epoch, checkpoint_cid)
        return self.chain.transact(function, signer)

    def finalise_round(self, signer: Signer, task_id: int) -> TxReceipt:
        """Finalises the task's current round."""
        return self.chain.transact(self.market.functions.finaliseRound(task_id), signer)

    def settle(self, signer: Signer, submission: int) -> TxReceipt:
        """Settles a submission of a finalised round."""
        return self.chain.transact(self.market.functions.settle(submission), signer)

    def claim(self, signer: Signer) -> int:
        """Withdraws the caller's credits; returns the amount."""
        amount = self.credit_of(signer.address)
        self.chain.transact(self.market.functions.claim(), signer)
        return amount

    def refund(self, signer: Signer, task_id: int) -> int:
        """The creator takes back what the ended task did not pay; returns the amount."""
        amount = self.task(task_id).pool
        self.chain.transact(self.market.functions.refund(task_id), signer)
        return amount

    # ------------------------------------------------------------ views

    def task_count(self) -> int:
        """Number of tasks."""
        return int(self.chain.call(self.market.functions.taskCount()))

    def task(self, task_id: int) -> TaskState:
        """A task's state; ConfigError when it does not exist."""
        value = self.chain.call(self.market.functions.getTask(task_id))
        if int(value[0], 16) == 0:
            raise ConfigError(f"unknown task {task_id}: there are {self.task_count()} tasks")
        return TaskState(*value)

    def round(self, task_id: int, round_index: int) -> RoundState:
        """A round's state."""
        return RoundState(*self.chain.call(self.market.functions.getRound(task_id, round_index)))

    def submission(self, submission: int) -> SubmissionState:
        """A submission's state."""
        return SubmissionState(*self.chain.call(self.market.functions.getSubmission(submission)))

    def dispute_state(self, submission: int) -> DisputeState:
        """A dispute's state."""
        return DisputeState(*self.chain.call(self.market.functions.getDispute(submission)))

    def deadlines(self, task_id: int, round_index: int) -> Deadlines:
        """A round's deadlines."""
        return Deadlines(*self.chain.call(self.lens.functions.deadlinesOf(task_id, round_index)))

    def final_from(self, task_id: int, round_index: int) -> int:
        """When the round may be finalised (disputes aside): its challenge deadline, or a challenge window after
        its checkpoint was fixed when that came later (a round opened ahead of finality)."""
        return int(self.chain.call(self.lens.functions.finalFromOf(task_id, round_index)))

    def is_sampled(self, submission: int) -> bool:
        """Whether the submission is sampled."""
        return bool(self.chain.call(self.lens.functions.isSampled(submission)))

    def assigned_validators(self, submission: int) -> list[str]:
        """The validators assigned to a submission."""
        return list(self.chain.call(self.lens.functions.assignedValidators(submission)))

    def aggregators(self, task_id: int, round_index: int) -> list[str]:
        """The round's aggregation committee."""
        return list(self.chain.call(self.lens.functions.aggregatorsOf(task_id, round_index)))

    def has_proposed(self, task_id: int, round_index: int, aggregator: str) -> bool:
        """Whether `aggregator` proposed a checkpoint for the round since proposals were last voided."""
        return bool(self.chain.call(self.market.functions.hasProposed(task_id, round_index, aggregator)))

    def dispute_committee(self, submission: int) -> list[str]:
        """The dispute committee of a submission."""
        return list(self.chain.call(self.lens.functions.disputeCommittee(submission)))

    def members_of(self, task_id: int) -> list[Member]:
        """A task's validators in joining order, with where each one's range of seat stake starts."""
        return [
            Member(str(account), int(start))
            for account, start in self.chain.call(self.market.functions.membersOf(task_id))
        ]

    def validators_of(self, task_id: int) -> list[str]:
        """A task's validators, in joining order."""
        return [member.account for member in self.members_of(task_id)]

    def seat_of(self, task_id: int, address: str) -> Seat:
        """A validator's seat in a task."""
        return Seat(*self.chain.call(self.market.functions.seatOf(task_id, checked_address(address))))

    def credit_of(self, address: str) -> int:
        """Claimable credits of `address`."""
        return int(self.chain.call(self.market.functions.creditOf(checked_address(address))))

    def commitment_of(
        self, task_id: int, round_index: int, base_round: int, trainer: str, proofs_digest: bytes
    ) -> bytes:
        """The commitment the market would emit."""
        function = self.lens.functions.commitmentOf(task_id, round_index, base_round, trainer, proofs_digest)
        return bytes(self.chain.call(function))

    def events(
        self, contract: str, event_name: str, from_block: int | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """Returns the decoded logs of any event of "TaskMarket", "StakeManager" or "DevToken" since
        the deployment (or `from_block`), each as its arguments plus `blockNumber` and `transactionHash`."""
        source = {"TaskMarket": self.market, "StakeManager": self.stakes, "DevToken": self.token}.get(contract)
        if source is None:
            raise ConfigError(f"unknown contract {contract!r}: TaskMarket, StakeManager or DevToken")
        start = self.deployment.deployBlock if from_block is None else from_block
        logs = self.chain.events(source, event_name, start, argument_filters=filters or None)
        return [
            dict(log["args"]) | {"blockNumber": log["blockNumber"], "transactionHash": log["transactionHash"]}
            for log in logs
        ]

    def task_params(self, task_id: int) -> TaskParams:
        """The numbers the task was created with (from its TaskCreated event)."""
        created = self.events("TaskMarket", "TaskCreated", taskId=task_id)
        if not created:
            raise ConfigError(f"unknown task {task_id}: no TaskCreated event")
        return TaskParams.from_contract(created[0]["params"])

    def task_cids(self, task_id: int) -> tuple[str, str]:
        """The task's initial checkpoint CID and environment spec CID (from its TaskCreated event)."""
        created = self.events("TaskMarket", "TaskCreated", taskId=task_id)
        if not created:
            raise ConfigError(f"unknown task {task_id}: no TaskCreated event")
        return str(created[0]["modelCid"]), str(created[0]["envCid"])

    def checkpoint_cid(self, task_id: int, round_index: int) -> str:
        """The CID of a round's checkpoint (what its work may start from and its aggregate builds on): the
        initial model or an agreed checkpoint. ChainError while it is not fixed (a round opened ahead whose
        round before is not final)."""
        digest = self.round(task_id, round_index).checkpoint
        if digest == bytes(32):
            raise ChainError(f"task {task_id} round {round_index} has no checkpoint yet: the round before is not final")
        agreed = [str(e["checkpointCid"]) for e in self.events("TaskMarket", "CheckpointAgreed", taskId=task_id)]
        cid = checkpoint_digests(self.task_cids(task_id)[0], agreed).get(digest)
        if cid is not None:
            return cid
        raise ChainError(f"no event names the checkpoint of task {task_id} round {round_index}")

    def live_rounds(self, task: TaskState) -> range:
        """The rounds of a task that are open and not final, oldest first (one unless it pipelines)."""
        return range(task.current_round, task.open_round + 1) if not task.ended else range(0)

    def submitted(self, task_id: int, round_index: int, trainer: str) -> dict[str, Any] | None:
        """The WorkSubmitted event of a trainer in a round, or None."""
        found = self.events("TaskMarket", "WorkSubmitted", taskId=task_id, round=round_index, trainer=trainer)
        return found[0] if found else None

    def submissions(self, task_id: int, round_index: int | None = None) -> list[dict[str, Any]]:
        """The WorkSubmitted events of a task (one round, or all), oldest first."""
        filters: dict[str, Any] = {"taskId": task_id}
        if round_index is not None:
            filters["round"] = round_index
        return self.events("TaskMarket", "WorkSubmitted", **filters)

    def previous_update(self, task_id: int, trainer: str, round_index: int) -> str | None:
        """The update CID of `trainer`'s submission in the task with the highest round below `round_index`
        (None: it has none): the one whose residual its next `topk` update starts from."""
        found = [e for e in self.events("TaskMarket", "WorkSubmitted", taskId=task_id, trainer=trainer)
                 if int(e["round"]) < round_index]  # fmt: skip
        latest = max(found, key=lambda e: (int(e["round"]), int(e["blockNumber"])), default=None)
        return str(latest["updateCid"]) if latest is not None else None


def stake_check(crucible: Crucible, min_stake_wei: int) -> Callable[[str], bool]:
    """A relay's upload check against StakeManager: staked plus unbonding at least `min_stake_wei`. A yes is
    cached for 30 s, a no for 2 s (so a newly staked address is admitted soon)."""
    cache: dict[str, tuple[float, bool]] = {}

    def check(address: str) -> bool:
        now = time.monotonic()
        if address in cache:
            checked_at, result = cache[address]
            if now - checked_at < (30 if result else 2):
                return result
        account = crucible.stake_account(address)
        result = account.staked + account.unbonding >= max(min_stake_wei, 1)
        cache[address] = (now, result)
        return result

    return check
