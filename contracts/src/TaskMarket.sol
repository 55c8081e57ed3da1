// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {ITaskMarket} from "./interfaces/ITaskMarket.sol";
import {Canaries} from "./libraries/Canaries.sol";
import {Disputes} from "./libraries/Disputes.sol";
import {Draws} from "./libraries/Draws.sol";
import {Ids} from "./libraries/Ids.sol";
import {Params} from "./libraries/Params.sol";
import {Payouts} from "./libraries/Payouts.sol";
import {Pull} from "./libraries/Pull.sol";
import {Seats} from "./libraries/Seats.sol";
import {Seeds} from "./libraries/Seeds.sol";
import {Votes} from "./libraries/Votes.sol";

/// @title TaskMarket
/// @notice Crucible's task lifecycle: tasks, rounds, work, checks, agreement and settlement. Disputes are their
///         own module ({Disputes}); the draws, seeds, parameters, budgets and payouts are libraries
///         (`libraries/`); views anyone can recompute from this contract's state are in {TaskMarketLens}. See
///         {ITaskMarket} and docs/contracts.md.
contract TaskMarket is ITaskMarket, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @notice The bounty token, the same as the stake token.
    IERC20 public immutable token;
    /// @notice Where operators' stake is held, locked and slashed.
    IStakeManager public immutable stakeManager;

    /// @notice The block this market was deployed in: none of its events is older (a reader of its history
    ///         starts there). It shares one slot with the task counter, so the first task does not pay for
    ///         that slot going from zero.
    uint64 public deployedAt;
    uint64 private _taskCount;
    Payouts.Ledger private _ledger;
    mapping(uint256 taskId => Task) private _tasks;
    mapping(uint256 taskId => mapping(uint256 round => Round)) private _rounds;
    mapping(uint256 submissionId => Submission) private _submissions;
    mapping(uint256 submissionId => Dispute) private _disputes;
    // slither-disable-next-line uninitialized-state
    mapping(uint256 taskId => Member[]) private _members;
    mapping(uint256 taskId => mapping(address validator => Seat)) private _seats;
    mapping(bytes32 proposalKey => uint256) private _proposalVotes;
    mapping(bytes32 voterKey => bool) private _proposalVoted;
    mapping(uint256 submissionId => mapping(address validator => bytes32)) private _commitments;
    mapping(uint256 submissionId => mapping(address validator => bytes32)) private _disputeCommitments;

    /// @param bountyToken The ERC-20 for bounties (and stake).
    /// @param stakes The StakeManager; it must hold `bountyToken` and be bound to this market.
    constructor(IERC20 bountyToken, IStakeManager stakes) {
        token = bountyToken;
        stakeManager = stakes;
        deployedAt = uint64(block.number);
    }

    // ---------------------------------------------------------------- tasks

    /// @inheritdoc ITaskMarket
    function createTask(TaskParams calldata params, string calldata modelCid, string calldata envCid)
        external
        nonReentrant
        returns (uint256 taskId)
    {
        if (bytes(modelCid).length == 0 || bytes(envCid).length == 0) revert MarketEmptyCid();
        Params.check(params);
        taskId = ++_taskCount;
        Task storage task = _tasks[taskId];
        // Grouped by the storage slot each field packs into.
        task.creator = msg.sender;
        task.rounds = params.rounds;
        task.validatorsPerCheck = params.validatorsPerCheck;
        task.sampleRatePpm = uint24(params.sampleRatePpm);
        task.validatorFeeBps = params.validatorFeeBps;
        task.finderShareBps = params.finderShareBps;
        task.minTrainerStake = params.minTrainerStake;
        task.maxWorkUnits = params.maxWorkUnits;
        task.submitWindow = params.submitWindow;
        task.validateWindow = params.validateWindow;
        task.challengeWindow = params.challengeWindow;
        task.maxStaleness = params.maxStaleness;
        task.bounty = params.bounty;
        task.canaryRatePpm = uint24(params.canaryRatePpm);
        task.slashAmount = params.slashAmount;
        task.validatorSlash = params.validatorSlash;
        task.minValidatorStake = params.minValidatorStake;
        task.disputeBond = params.disputeBond;
        emit TaskCreated(taskId, msg.sender, params, modelCid, envCid);
        _openRound(taskId, 0, keccak256(bytes(modelCid)));
        Pull.fromSender(token, params.bounty);
    }

    /// @inheritdoc ITaskMarket
    function joinTask(uint256 taskId, uint256 stake) external {
        Task storage task = _existingTask(taskId);
        if (task.ended) revert MarketTaskEnded(taskId);
        if (stake < task.minValidatorStake) revert MarketParameterBelow("stake", stake, task.minValidatorStake);
        Seat storage seat = _seats[taskId][msg.sender];
        if (seat.slot != 0) revert MarketAlreadyJoined(taskId, msg.sender);
        Member[] storage members = _members[taskId];
        uint256 from = _seatStake(taskId);
        members.push(Member(msg.sender, from.toUint96()));
        seat.slot = uint32(members.length);
        seat.from = uint96(from);
        seat.stake = (from + stake).toUint96() - uint96(from);
        emit ValidatorJoined(taskId, msg.sender, members.length - 1, from, stake);
        stakeManager.lock(msg.sender, IStakeManager.Role.Validator, stake);
    }

    /// @inheritdoc ITaskMarket
    function leaveTask(uint256 taskId) external {
        uint256 stake = Seats.leave(_existingTask(taskId), _seats[taskId][msg.sender], taskId);
        stakeManager.unlock(msg.sender, stake);
    }

    // ---------------------------------------------------------------- work

    /// @inheritdoc ITaskMarket
    function openNextRound(uint256 taskId) external {
        Task storage task = _existingTask(taskId);
        uint256 next = Params.checkOpenAhead(task, taskId);
        (uint256 submitDeadline,,) = _deadlines(task, _rounds[taskId][next - 1]);
        _within(submitDeadline, type(uint256).max);
        task.openRound = uint16(next);
        // Its checkpoint is the one round `next - 1` agrees, fixed when that round is final.
        _openRound(taskId, next, 0);
    }

    /// @inheritdoc ITaskMarket
    function submitWork(
        uint256 taskId,
        uint256 round,
        uint256 baseRound,
        string calldata rolloutCid,
        string calldata updateCid,
        uint64 workUnits,
        bytes32 proofsDigest,
        bytes32 tag
    ) external returns (uint256 submissionId) {
        Task storage task = _existingTask(taskId);
        _checkSubmission(task, taskId, round, baseRound, workUnits);
        if (bytes(rolloutCid).length == 0 || bytes(updateCid).length == 0) revert MarketEmptyCid();
        submissionId = _record(task, taskId, round, baseRound, workUnits, tag);
        _emitWorkSubmitted(taskId, round, baseRound, submissionId, rolloutCid, updateCid, workUnits, proofsDigest);
        stakeManager.lock(msg.sender, IStakeManager.Role.Trainer, task.minTrainerStake);
    }

    /// @dev Split out of {submitWork} to keep its stack shallow: within the round's submission window, stores the
    ///      caller's first submission to it.
    function _record(Task storage task, uint256 taskId, uint256 round, uint256 baseRound, uint64 workUnits, bytes32 tag)
        private
        returns (uint256 submissionId)
    {
        Round storage rd = _rounds[taskId][round];
        (uint256 submitDeadline,,) = _deadlines(task, rd);
        _within(rd.openedAt, submitDeadline);
        submissionId = Ids.submissionId(taskId, round, msg.sender);
        Submission storage sub = _submissions[submissionId];
        if (sub.workUnits != 0) revert MarketDuplicateSubmission(submissionId);
        sub.workUnits = workUnits;
        sub.baseRound = uint16(baseRound);
        sub.tag = bytes12(tag);
        rd.submissionCount += 1;
        rd.includedUnits += workUnits;
    }

    /// @dev Reverts unless the task takes work in `round` (open, and not ended), `baseRound` is an agreed
    ///      round at most `maxStaleness` before it, and `workUnits` is in 1..maxWorkUnits. (In the market, not
    ///      in `Params`: a delegate call would take `submitWork` over its gas bound.)
    function _checkSubmission(Task storage task, uint256 taskId, uint256 round, uint256 baseRound, uint256 workUnits)
        private
        view
    {
        if (task.ended) revert MarketTaskEnded(taskId);
        uint256 current = task.currentRound;
        if (round < current || round > task.openRound) revert MarketWrongRound(taskId, round, current);
        // The base is agreed (its checkpoint is fixed), not after the round, and within the staleness bound.
        if (baseRound > current || baseRound > round || round - baseRound > task.maxStaleness) {
            revert MarketBaseOutOfBound(taskId, round, baseRound, current, task.maxStaleness);
        }
        if (workUnits == 0 || workUnits > task.maxWorkUnits) {
            revert MarketWorkUnitsOutOfRange(workUnits, task.maxWorkUnits);
        }
    }

    /// @dev Split out of {submitWork} to keep its stack shallow.
    function _emitWorkSubmitted(
        uint256 taskId,
        uint256 round,
        uint256 baseRound,
        uint256 submissionId,
        string calldata rolloutCid,
        string calldata updateCid,
        uint64 workUnits,
        bytes32 proofsDigest
    ) private {
        bytes32 commitment = Ids.commitment(address(this), taskId, round, baseRound, msg.sender, proofsDigest);
        emit WorkSubmitted(
            taskId, round, msg.sender, submissionId, baseRound, rolloutCid, updateCid, workUnits, commitment
        );
    }

    /// @inheritdoc ITaskMarket
    function fixCheckSeed(uint256 taskId, bytes calldata header) external {
        Task storage task = _existingTask(taskId);
        uint256 round = task.currentRound;
        (uint256 submitDeadline,,) = _deadlines(task, _rounds[taskId][round]);
        _within(submitDeadline, type(uint256).max);
        (uint256 number, bytes32 mix) = header.length == 0 ? (0, bytes32(0)) : Seeds.read(header);
        // Rounds open in order, each after the one before stopped taking work: those past their own
        // submission deadline come first. At most `maxStaleness + 1` (bounded by Params) are live.
        for (; round <= task.openRound; ++round) {
            Round storage rd = _rounds[taskId][round];
            uint256 validateDeadline;
            (submitDeadline, validateDeadline,) = _deadlines(task, rd);
            if (block.timestamp < submitDeadline) break;
            // A check starts before its validate deadline or never: the round is then unverified for good,
            // whoever joins later.
            if (rd.checkSeed == 0 && block.timestamp < validateDeadline) {
                _seedStep(taskId, task, round, rd, number, mix);
            }
        }
    }

    /// @dev One round's step of {fixCheckSeed}: fix its seed from the given header when that is its seed block's,
    ///      or ask for a block when none was asked for or the one asked for is past the 256-block horizon. (A
    ///      requested block still to come, or mined and awaiting its header, is left as it is.)
    function _seedStep(uint256 taskId, Task storage task, uint256 round, Round storage rd, uint256 number, bytes32 mix)
        private
    {
        uint256 at = rd.seedBlock;
        if (at != 0 && at == number) {
            bytes32 seed = Draws.checkSeedFrom(mix, taskId, round);
            rd.checkSeed = seed;
            emit CheckSeedFixed(taskId, round, seed, rd.validatorCount);
        } else if (at == 0 || block.number > at + 256) {
            uint256 count = _members[taskId].length;
            // Below this a check could not have `validatorsPerCheck` distinct voters even in principle.
            if (count < task.validatorsPerCheck) revert MarketTooFewValidators(taskId, count, task.validatorsPerCheck);
            rd.seedBlock = uint64(block.number + Seeds.DELAY);
            rd.validatorCount = uint32(count);
            rd.seatStake = uint96(_seatStake(taskId));
            emit CheckSeedRequested(taskId, round, rd.seedBlock, rd.validatorCount);
        }
    }

    /// @inheritdoc ITaskMarket
    function commitAttestation(uint256 submissionId, bytes32 commitment) external {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Votes.commit(
            _tasks[taskId],
            _rounds[taskId][round],
            _existingSubmission(submissionId),
            _seats[taskId][msg.sender],
            _commitments[submissionId],
            submissionId,
            commitment
        );
    }

    /// @inheritdoc ITaskMarket
    function attest(uint256 submissionId, bool valid, string calldata evidenceCid, bytes32 salt) external {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Votes.reveal(
            _tasks[taskId],
            _rounds[taskId][round],
            _submissions[submissionId],
            _commitments[submissionId],
            submissionId,
            valid,
            evidenceCid,
            salt
        );
    }

    /// @inheritdoc ITaskMarket
    function revealCanary(uint256 submissionId, bytes32 salt) external {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Canaries.reveal(_tasks[taskId], _rounds[taskId][round], _existingSubmission(submissionId), submissionId, salt);
    }

    // ---------------------------------------------------------------- disputes ({Disputes})

    /// @inheritdoc ITaskMarket
    function dispute(uint256 submissionId, bool claimValid) external nonReentrant {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Submission storage sub = _existingSubmission(submissionId);
        Disputes.file(
            _tasks[taskId],
            _rounds[taskId][round],
            sub,
            _disputes[submissionId],
            _seats[taskId][msg.sender],
            token,
            submissionId,
            claimValid
        );
    }

    /// @inheritdoc ITaskMarket
    function fixDisputeSeed(uint256 submissionId, bytes calldata header) external {
        Disputes.fixSeed(_disputes[submissionId], submissionId, header);
    }

    /// @inheritdoc ITaskMarket
    function commitDisputeVote(uint256 submissionId, bytes32 commitment) external {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Disputes.commitVote(
            _tasks[taskId],
            _rounds[taskId][round],
            _disputes[submissionId],
            _seats[taskId][msg.sender],
            _disputeCommitments[submissionId],
            submissionId,
            commitment
        );
    }

    /// @inheritdoc ITaskMarket
    function voteDispute(uint256 submissionId, bool valid, string calldata evidenceCid, bytes32 salt) external {
        Disputes.vote(
            _tasks[Ids.taskOf(submissionId)],
            _disputes[submissionId],
            _disputeCommitments[submissionId],
            submissionId,
            valid,
            evidenceCid,
            salt
        );
    }

    /// @inheritdoc ITaskMarket
    function resolveDispute(uint256 submissionId) external nonReentrant {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        Disputes.resolve(
            _tasks[taskId],
            _rounds[taskId][round],
            _submissions[submissionId],
            _disputes[submissionId],
            _members[taskId],
            _ledger,
            submissionId
        );
    }

    // ---------------------------------------------------------------- aggregation and rounds

    /// @inheritdoc ITaskMarket
    function proposeCheckpoint(uint256 taskId, uint256 round, uint256 epoch, string calldata checkpointCid) external {
        Task storage task = _existingTask(taskId);
        if (round != task.currentRound) revert MarketWrongRound(taskId, round, task.currentRound);
        Round storage rd = _rounds[taskId][round];
        if (rd.finalised) revert MarketRoundFinalised(taskId, round);
        // Computed for another included set: a dispute or a canary's reveal changed it meanwhile.
        if (epoch != rd.checkpointEpoch) revert MarketWrongEpoch(taskId, round, rd.checkpointEpoch);
        if (bytes(checkpointCid).length == 0) revert MarketEmptyCid();
        uint256 held = _aggregatorVotes(task, taskId, round, rd);
        bytes32 voterKey = keccak256(abi.encode(taskId, round, epoch, msg.sender));
        if (_proposalVoted[voterKey]) revert MarketAlreadyProposed(taskId, round, msg.sender);
        _proposalVoted[voterKey] = true;
        bytes32 digest = keccak256(bytes(checkpointCid));
        // Each aggregator position held is a vote.
        uint256 votes = _proposalVotes[keccak256(abi.encode(taskId, round, epoch, digest))] += held;
        emit CheckpointProposed(taskId, round, msg.sender, digest, checkpointCid);
        if (rd.agreedNext == 0 && 2 * votes > task.validatorsPerCheck) {
            rd.agreedNext = digest;
            emit CheckpointAgreed(taskId, round, digest, checkpointCid);
        }
    }

    /// @dev After the validate deadline, the aggregator positions the caller holds (refused when none): its votes.
    function _aggregatorVotes(Task storage task, uint256 taskId, uint256 round, Round storage rd)
        private
        view
        returns (uint256 held)
    {
        (, uint256 validateDeadline,) = _deadlines(task, rd);
        _within(validateDeadline, type(uint256).max);
        bytes32 seed = _checkSeed(taskId, round, rd);
        (, uint256 bits) = _held(taskId, Draws.aggregators(seed, rd.seatStake, task.validatorsPerCheck));
        held = Draws.popcount(bits);
        // slither-disable-next-line incorrect-equality
        if (held == 0) revert MarketNotAggregator(taskId, round, msg.sender);
    }

    /// @inheritdoc ITaskMarket
    function finaliseRound(uint256 taskId) external {
        Task storage task = _existingTask(taskId);
        if (task.ended) revert MarketTaskEnded(taskId);
        uint256 round = task.currentRound;
        Round storage rd = _rounds[taskId][round];
        _within(_finalFrom(task, rd), type(uint256).max);
        if (rd.openDisputes != 0) revert MarketOpenDisputes(taskId, round, rd.openDisputes);
        // Settling draws from the check seed; a round nobody submitted to needs none. A round whose seed was
        // not fixed by its validate deadline (too few validators, or nobody fixed it) was never checked and
        // never will be: finalised unverified, its work is neither paid nor slashed.
        if (rd.submissionCount != 0 && rd.checkSeed == 0) rd.unverified = true;
        rd.finalised = true;
        (uint256 trainerBudget, uint256 feeBudget) =
            Payouts.roundBudgets(task.bounty, task.rounds, round, task.validatorFeeBps);
        uint256 unallocated = 0;
        if (rd.includedUnits != 0 && !rd.unverified) {
            rd.unitsRemaining = rd.includedUnits;
            rd.trainerBudgetRemaining = uint128(trainerBudget);
        } else {
            unallocated += trainerBudget;
            trainerBudget = 0;
        }
        if (rd.attestCount != 0) {
            rd.checksRemaining = rd.attestCount;
            rd.feeRemaining = uint128(feeBudget);
        } else {
            unallocated += feeBudget;
            feeBudget = 0;
        }
        task.pool += uint96(unallocated);
        bytes32 next = rd.agreedNext != 0 ? rd.agreedNext : rd.checkpoint;
        emit RoundFinalised(taskId, round, rd.includedUnits, trainerBudget, feeBudget, next);
        if (round + 1 < task.rounds) {
            task.currentRound = uint16(round + 1);
            if (task.openRound > round) {
                // Opened ahead (`maxStaleness`): it has taken work since; now it knows what it aggregates onto.
                Round storage following = _rounds[taskId][round + 1];
                following.checkpoint = next;
                following.checkpointAt = uint40(block.timestamp);
                emit CheckpointFixed(taskId, round + 1, next);
            } else {
                task.openRound = uint16(round + 1);
                _openRound(taskId, round + 1, next);
            }
        } else {
            task.ended = true;
            emit TaskEnded(taskId);
        }
    }

    // ---------------------------------------------------------------- payments

    /// @inheritdoc ITaskMarket
    // The external calls here go to the StakeManager, an immutable contract of this protocol with no
    // callbacks; with `nonReentrant` on every paying entry point, the writes after them are safe.
    // slither-disable-next-line reentrancy-no-eth,reentrancy-benign,reentrancy-events
    function settle(uint256 submissionId) external nonReentrant {
        (uint256 taskId, uint256 round, address trainer) = Ids.decode(submissionId);
        Submission storage sub = _existingSubmission(submissionId);
        Round storage rd = _rounds[taskId][round];
        if (!rd.finalised) revert MarketRoundNotFinalised(taskId, round);
        if (sub.settled) revert MarketAlreadySettled(submissionId);
        sub.settled = true;
        Task storage task = _tasks[taskId];
        stakeManager.unlock(trainer, task.minTrainerStake);
        if (rd.unverified) {
            // Nobody could check it, so nothing is paid or slashed (and nobody voted).
            emit Settled(submissionId, false, 0, 0);
            return;
        }
        address[] memory assigned = Draws.isSampled(rd.checkSeed, submissionId, task.sampleRatePpm)
            ? _holders(taskId, Draws.assigned(rd.checkSeed, submissionId, rd.seatStake, task.validatorsPerCheck))
            : new address[](0);
        Committee memory committee = _upheldCommittee(taskId, submissionId);
        _settleTrainer(taskId, task, rd, sub, submissionId, assigned, committee);
        uint256 penalties = _settleValidators(taskId, task, rd, sub, submissionId, assigned);
        if (penalties != 0) {
            // Wrong votes pay the committee that overturned them; otherwise they return to the task.
            uint256 paid = _splitAmong(
                taskId, committee.members, committee.mask, penalties, CreditKind.CommitteeShare, address(0)
            );
            task.pool += (penalties - paid).toUint96();
        }
    }

    function _settleTrainer(
        uint256 taskId,
        Task storage task,
        Round storage rd,
        Submission storage sub,
        uint256 submissionId,
        address[] memory assigned,
        Committee memory committee
    ) private {
        address trainer = address(uint160(submissionId));
        if (sub.canary && sub.rejected) {
            // Its owner planted it: neither paid nor slashed. Its reward share pays those who caught it.
            uint256 prize = _rewardShare(rd, sub.workUnits);
            uint256 paid = _splitAmong(taskId, assigned, sub.invalidMask, prize, CreditKind.CanaryPrize, address(0));
            task.pool += (prize - paid).toUint96();
            emit Settled(submissionId, true, 0, 0);
        } else if (sub.rejected) {
            uint256 slashed = _slashTrainer(taskId, task, trainer, sub.invalidMask, assigned, committee);
            emit Settled(submissionId, true, 0, slashed);
        } else {
            uint256 reward = _rewardTrainer(taskId, rd, trainer, sub.workUnits);
            emit Settled(submissionId, false, reward, 0);
        }
    }

    /// @dev A dispute committee's members and the bits of those on the winning side; empty unless
    ///      a dispute on the submission was upheld.
    struct Committee {
        address[] members;
        uint256 mask;
        address disputer;
    }

    function _upheldCommittee(uint256 taskId, uint256 submissionId) private view returns (Committee memory committee) {
        Dispute storage d = _disputes[submissionId];
        if (!d.upheld) return committee;
        // The task id is the caller's already.
        // slither-disable-next-line unused-return
        (, uint256 round) = Ids.taskAndRound(submissionId);
        committee.members = _holders(
            taskId, Draws.committee(d.seed, _rounds[taskId][round].seatStake, _tasks[taskId].validatorsPerCheck)
        );
        committee.mask = d.claimValid ? d.validMask : d.votedMask & ~d.validMask;
        committee.disputer = d.disputer;
    }

    /// @dev Slashes the trainer; the finders' share goes to the validators who voted invalid, or,
    ///      when a dispute proved the fault, to the committee's majority and the disputer.
    // The external calls here go to the StakeManager, an immutable contract of this protocol with no
    // callbacks; with `nonReentrant` on every paying entry point, the writes after them are safe.
    // slither-disable-next-line reentrancy-no-eth,reentrancy-benign,reentrancy-events
    function _slashTrainer(
        uint256 taskId,
        Task storage task,
        address trainer,
        uint256 invalidMask,
        address[] memory assigned,
        Committee memory committee
    ) private returns (uint256 slashed) {
        // What a trainer keeps is not the market's concern (its stake answers only for its submissions).
        // slither-disable-next-line unused-return
        (slashed,) = stakeManager.slash(trainer, task.slashAmount);
        uint256 finderShare = slashed * task.finderShareBps / Payouts.BPS;
        uint256 paid = committee.disputer != address(0)
            ? _splitAmong(
                taskId, committee.members, committee.mask, finderShare, CreditKind.FinderShare, committee.disputer
            )
            : _splitAmong(taskId, assigned, invalidMask, finderShare, CreditKind.FinderShare, address(0));
        task.pool += (slashed - paid).toUint96();
    }

    /// @dev Credits the trainer its share of the round's trainer budget, pro rata to work units.
    ///      The last included submission takes the rounding remainder, so the budget is paid to the wei.
    function _rewardTrainer(uint256 taskId, Round storage rd, address trainer, uint64 workUnits)
        private
        returns (uint256 reward)
    {
        reward = _rewardShare(rd, workUnits);
        _credit(taskId, trainer, reward, CreditKind.TrainerReward);
    }

    /// @dev Takes `workUnits`' share of what is left of the round's trainer budget (the last units all of it).
    function _rewardShare(Round storage rd, uint64 workUnits) private returns (uint256 share) {
        share = rd.unitsRemaining == workUnits
            ? rd.trainerBudgetRemaining
            : uint256(rd.trainerBudgetRemaining) * workUnits / rd.unitsRemaining;
        rd.unitsRemaining -= workUnits;
        rd.trainerBudgetRemaining -= uint128(share);
    }

    /// @dev Pays each assigned validator that voted with the final outcome its check fee; slashes each that voted
    ///      against it or committed a vote it never revealed (withholding a reveal it saw would lose costs what
    ///      losing does), and marks each that did not vote. Returns the slashes' sum.
    // The external calls here go to the StakeManager, an immutable contract of this protocol with no
    // callbacks; with `nonReentrant` on every paying entry point, the writes after them are safe.
    // slither-disable-next-line reentrancy-no-eth,reentrancy-benign,reentrancy-events
    function _settleValidators(
        uint256 taskId,
        Task storage task,
        Round storage rd,
        Submission storage sub,
        uint256 submissionId,
        address[] memory assigned
    ) private returns (uint256 penalties) {
        for (uint256 j = 0; j < assigned.length; ++j) {
            uint256 bit = 1 << j;
            bool revealed = sub.votedMask & bit != 0;
            if (!revealed) emit ValidatorMissed(submissionId, assigned[j]);
            if (sub.committedMask & bit == 0) continue;
            _seats[taskId][assigned[j]].pendingVotes -= 1;
            // Each committed position takes an equal share of the round's fee budget; the last one the remainder.
            uint256 share = rd.checksRemaining == 1 ? rd.feeRemaining : rd.feeRemaining / rd.checksRemaining;
            rd.checksRemaining -= 1;
            rd.feeRemaining -= uint128(share);
            bool votedInvalid = sub.invalidMask & bit != 0;
            if (revealed && votedInvalid == sub.rejected) {
                _credit(taskId, assigned[j], share, CreditKind.ValidatorFee);
            } else {
                task.pool += uint96(share);
                penalties += _penalise(taskId, task, submissionId, assigned[j]);
            }
        }
    }

    /// @dev Slashes a validator whose vote lost; one left below the task's minimum stake loses its seat.
    // The external calls go to the StakeManager (see `settle`).
    // slither-disable-next-line reentrancy-no-eth,reentrancy-benign,reentrancy-events
    function _penalise(uint256 taskId, Task storage task, uint256 submissionId, address validator)
        private
        returns (uint256 penalty)
    {
        Seat storage seat = _seats[taskId][validator];
        uint256 staked;
        (penalty, staked) = stakeManager.slash(validator, task.validatorSlash);
        emit ValidatorPenalised(submissionId, validator, penalty);
        if (staked < task.minValidatorStake && !seat.benched) {
            seat.benched = true;
            emit ValidatorBenched(taskId, validator, staked);
        }
    }

    /// @inheritdoc ITaskMarket
    function claim() external nonReentrant returns (uint256 amount) {
        amount = _ledger.credits[msg.sender];
        if (amount == 0) revert MarketNothingToClaim(msg.sender);
        _ledger.credits[msg.sender] = 0;
        _ledger.total -= amount;
        emit Claimed(msg.sender, amount);
        token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc ITaskMarket
    function refund(uint256 taskId) external nonReentrant returns (uint256 amount) {
        Task storage task = _existingTask(taskId);
        if (msg.sender != task.creator) revert MarketNotCreator(taskId, msg.sender);
        if (!task.ended) revert MarketTaskNotEnded(taskId);
        amount = task.pool;
        if (amount == 0) revert MarketNothingToRefund(taskId);
        task.pool = 0;
        emit Refunded(taskId, msg.sender, amount);
        token.safeTransfer(msg.sender, amount);
    }

    // ---------------------------------------------------------------- views

    /// @inheritdoc ITaskMarket
    function getTask(uint256 taskId) external view returns (Task memory) {
        return _tasks[taskId];
    }

    /// @inheritdoc ITaskMarket
    function getRound(uint256 taskId, uint256 round) external view returns (Round memory) {
        return _rounds[taskId][round];
    }

    /// @inheritdoc ITaskMarket
    function getSubmission(uint256 submissionId) external view returns (Submission memory) {
        return _submissions[submissionId];
    }

    /// @inheritdoc ITaskMarket
    function getDispute(uint256 submissionId) external view returns (Dispute memory) {
        return _disputes[submissionId];
    }

    /// @inheritdoc ITaskMarket
    function taskCount() external view returns (uint256) {
        return _taskCount;
    }

    /// @inheritdoc ITaskMarket
    function membersOf(uint256 taskId) external view returns (Member[] memory) {
        return _members[taskId];
    }

    /// @inheritdoc ITaskMarket
    function seatOf(uint256 taskId, address validator) external view returns (Seat memory) {
        return _seats[taskId][validator];
    }

    /// @inheritdoc ITaskMarket
    function totalCredits() external view returns (uint256) {
        return _ledger.total;
    }

    /// @inheritdoc ITaskMarket
    function creditOf(address account) external view returns (uint256) {
        return _ledger.credits[account];
    }

    /// @inheritdoc ITaskMarket
    function hasProposed(uint256 taskId, uint256 round, address aggregator) external view returns (bool) {
        return _proposalVoted[keccak256(abi.encode(taskId, round, _rounds[taskId][round].checkpointEpoch, aggregator))];
    }

    // ---------------------------------------------------------------- internals

    function _openRound(uint256 taskId, uint256 round, bytes32 checkpoint) private {
        Round storage rd = _rounds[taskId][round];
        rd.workSeed = keccak256(abi.encode(block.prevrandao, blockhash(block.number - 1), taskId, round, "work"));
        rd.openedAt = uint40(block.timestamp);
        // Zero for a round opened ahead: fixed when the round before it is final.
        rd.checkpoint = checkpoint;
        emit RoundOpened(taskId, round, checkpoint, rd.workSeed, rd.openedAt);
    }

    /// @dev The round's check seed; reverts while it is not fixed ({fixCheckSeed} fixes it).
    function _checkSeed(uint256 taskId, uint256 round, Round storage rd) private view returns (bytes32 seed) {
        seed = rd.checkSeed;
        if (seed == 0) revert MarketCheckSeedPending(taskId, round, rd.seedBlock);
    }

    /// @dev The caller's seat in the task (refused when it lost it to a slash) and the bits of the
    ///      `drawn` positions its range holds.
    function _held(uint256 taskId, uint256[] memory drawn) private view returns (Seat storage seat, uint256 bits) {
        seat = _seats[taskId][msg.sender];
        if (seat.benched) revert MarketValidatorBenched(taskId, msg.sender);
        bits = Draws.bitsWithin(drawn, seat.from, seat.stake);
    }

    /// @dev The task's seat stake: where the next member's range starts.
    function _seatStake(uint256 taskId) private view returns (uint256) {
        Member[] storage members = _members[taskId];
        if (members.length == 0) return 0;
        Member storage last = members[members.length - 1];
        return last.from + _seats[taskId][last.account].stake;
    }

    function _holders(uint256 taskId, uint256[] memory drawn) private view returns (address[] memory) {
        return Seats.holders(_members[taskId], drawn);
    }

    function _splitAmong(
        uint256 taskId,
        address[] memory members,
        uint256 mask,
        uint256 amount,
        CreditKind kind,
        address extra
    ) private returns (uint256) {
        return Payouts.splitAmong(_ledger, taskId, members, mask, amount, kind, extra);
    }

    function _credit(uint256 taskId, address account, uint256 amount, CreditKind kind) private {
        Payouts.credit(_ledger, taskId, account, amount, kind);
    }

    function _existingTask(uint256 taskId) private view returns (Task storage task) {
        task = _tasks[taskId];
        if (task.creator == address(0)) revert MarketUnknownTask(taskId);
    }

    function _existingSubmission(uint256 submissionId) private view returns (Submission storage sub) {
        sub = _submissions[submissionId];
        if (sub.workUnits == 0) revert MarketUnknownSubmission(submissionId);
    }

    function _within(uint256 opensAt, uint256 closesAt) private view {
        Ids.within(opensAt, closesAt);
    }

    /// @dev When a round may be finalised: after its challenge window, and a whole challenge window after
    ///      its checkpoint was fixed (the same time for a round opened on its checkpoint), so its aggregators
    ///      always have one to propose in.
    function _finalFrom(Task storage task, Round storage rd) private view returns (uint256) {
        return Ids.finalFrom(rd.openedAt, rd.checkpointAt, task.submitWindow, task.validateWindow, task.challengeWindow);
    }

    function _deadlines(Task storage task, Round storage rd)
        private
        view
        returns (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline)
    {
        return Ids.deadlines(rd.openedAt, task.submitWindow, task.validateWindow, task.challengeWindow);
    }
}
