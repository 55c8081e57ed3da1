// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ProtocolFixture} from "../utils/ProtocolFixture.sol";
import {IStakeManager} from "../../src/interfaces/IStakeManager.sol";
import {ITaskMarket} from "../../src/interfaces/ITaskMarket.sol";
import {Ids} from "../../src/libraries/Ids.sol";

/// @dev Drives one task through random sequences of stake, unstake, withdraw, submit, attest,
///      dispute, vote, resolve, propose, finalise, settle, claim, refund and time warps. Every
///      action checks its preconditions and returns early instead of reverting. Validators 0-3
///      are honest and diligent (they attest before each deadline the handler crosses);
///      validator 4 always votes the opposite of the truth, so every committee of 3 drawn from
///      5 has an honest majority and every dispute committee of 2 at least one honest member.
///      Some cheats are canaries the creator planted (tagged from a salt only it knows) and reveals, or not,
///      in the first half of the challenge window.
///      With `maxStaleness` above 0 (the pipelined suite) it also opens rounds ahead of finality and
///      submits to any open round on any base, in the bound or not: the market must refuse the latter.
contract Handler is ProtocolFixture {
    uint256 internal constant TOKEN = 1e18;
    uint256 internal constant BOND = 350 * TOKEN;

    uint256 public taskId;
    address public creator;
    address public auditor;
    address[] public trainers;
    address[] public validators;
    /// One operator's two validator addresses: they vote together, for cheats and against honest work.
    mapping(address validator => bool) public isLiar;

    uint256[] public submissions;
    mapping(uint256 submissionId => bool) public isCheat;
    mapping(uint256 submissionId => bool) public settledByHandler;
    mapping(uint256 submissionId => bool) public isCanary;

    // Ghost totals, each the handler's own count, never read back from the contracts' books.
    uint256 public ghost_openBonds;
    uint256 public ghost_honestSlashed;
    /// Settled submissions whose check or dispute committee the liars held a majority of.
    uint256 public ghost_capturedChecks;
    /// Check seeds that are not the hash of the block their request named (safety: nobody steers them).
    uint256 public ghost_steeredSeeds;
    /// Check seeds fixed after their round's validate deadline (an unverified round turned verified).
    uint256 public ghost_lateSeeds;
    mapping(uint256 round => bool) internal ghost_seedChecked;
    uint256 public ghost_sampledCheatsUnslashed;
    uint256 public ghost_doubleSettles;
    uint256 public ghost_foreignClaims;
    uint256 public ghost_maxSubmitGas;
    /// Commitments a copier got in after a verdict showed, and verdicts that showed before their reveal phase (both
    /// must stay zero: commit-reveal).
    uint256 public ghost_copiedCommitments;
    uint256 public ghost_verdictsBeforeReveal;
    uint256 public ghost_copyAttempts;
    uint256 public ghost_maxCommitGas;
    uint256 public ghost_maxRevealGas;
    uint256 public ghost_maxClaimGas;
    mapping(bytes32 commitment => bool) public ghost_commitmentSeen;
    uint256 public ghost_commitmentRepeats;
    /// How far the run got, for the reach check at the end of each run.
    uint256 public ghost_settles;
    uint256 public ghost_finalises;
    /// Validators that left the ended task, and those that got out with a vote not yet settled.
    uint256 public ghost_leaves;
    uint256 public ghost_leftWithVotesUnsettled;
    /// Submissions the market took whose base was not agreed, after their round, or beyond the bound; and
    /// refused ones whose base was within it.
    uint256 public ghost_basesOutOfBoundAccepted;
    uint256 public ghost_basesInBoundRefused;
    /// Rounds finalised out of order, and rounds opened ahead beyond the bound.
    uint256 public ghost_finalisedOutOfOrder;
    uint256 public ghost_openedBeyondBound;
    uint256 public ghost_openedAhead;
    uint256 public ghost_staleSubmissions;
    /// Revealed canaries: settled ones whose owner was slashed or paid, and "valid" votes on them left unslashed.
    uint256 public ghost_canariesRevealed;
    uint256 public ghost_canaryOwnersCharged;
    uint256 public ghost_canaryValidVotesUnslashed;

    constructor(uint256 numberOfValidators, uint8 maxStaleness) {
        creator = vm.addr(1);
        auditor = vm.addr(2);
        for (uint256 i = 0; i < 3; ++i) {
            trainers.push(vm.addr(10 + i));
        }
        for (uint256 i = 0; i < numberOfValidators; ++i) {
            validators.push(vm.addr(20 + i));
        }
        isLiar[validators[numberOfValidators - 1]] = true;
        isLiar[validators[numberOfValidators - 2]] = true;
        _deployProtocol(_holders(creator, auditor, trainers, validators), 100_000 * TOKEN, 50);
        ITaskMarket.TaskParams memory p;
        p.bounty = uint96(900 * TOKEN);
        p.rounds = 3;
        p.sampleRatePpm = 500_000;
        p.validatorsPerCheck = 3;
        p.validatorFeeBps = 1000;
        p.finderShareBps = 5000;
        // Deters with a third of the seat stake colluding (Params.deters): at p = 1/2, h = 20/27, the cheat's
        // gain (1 - p h) 270 + p c 30 = 175 is below the slash it expects to lose, p (8/27 600 + 12/27 500) = 200;
        // and no appeal pays: the bond is at least (7/20) (270 + 600 + 30 + 30) = 325.5.
        p.slashAmount = uint96(600 * TOKEN);
        p.validatorSlash = uint96(10 * TOKEN);
        p.minTrainerStake = uint96(600 * TOKEN);
        p.minValidatorStake = uint96(100 * TOKEN);
        p.disputeBond = uint96(BOND);
        p.maxWorkUnits = 10_000;
        p.submitWindow = 100;
        p.validateWindow = 100;
        p.challengeWindow = 100;
        p.colludingSharePpm = 333_333;
        p.maxStaleness = maxStaleness;
        p.canaryRatePpm = 500_000;
        vm.prank(creator);
        taskId = market.createTask(p, "bafy-model", "bafy-env");
        for (uint256 i = 0; i < validators.length; ++i) {
            vm.startPrank(validators[i]);
            stakes.stake(200 * TOKEN, IStakeManager.Role.Validator);
            market.joinTask(taskId, 100 * TOKEN);
            vm.stopPrank();
        }
        for (uint256 i = 0; i < trainers.length; ++i) {
            vm.prank(trainers[i]);
            stakes.stake(800 * TOKEN, IStakeManager.Role.Trainer);
        }
    }

    function submissionCount() external view returns (uint256) {
        return submissions.length;
    }

    function trainerCount() external view returns (uint256) {
        return trainers.length;
    }

    function validatorCount() external view returns (uint256) {
        return validators.length;
    }

    // ------------------------------------------------------------ actions

    function stake(uint256 actorSeed, uint256 amount) external {
        address trainer = trainers[actorSeed % trainers.length];
        amount = bound(amount, 1, 2000 * TOKEN);
        if (token.balanceOf(trainer) < amount) return;
        vm.prank(trainer);
        stakes.stake(amount, IStakeManager.Role.Trainer);
    }

    function requestUnstake(uint256 actorSeed, uint256 amount) external {
        address trainer = trainers[actorSeed % trainers.length];
        uint256 free = stakes.freeStake(trainer);
        if (free == 0) return;
        vm.prank(trainer);
        stakes.requestUnstake(bound(amount, 1, free));
    }

    function withdraw(uint256 actorSeed) external {
        address trainer = trainers[actorSeed % trainers.length];
        IStakeManager.Account memory account = stakes.accountOf(trainer);
        if (account.unbonding == 0 || block.timestamp < account.releaseAt) return;
        vm.prank(trainer);
        stakes.withdraw();
    }

    /// A trainer submits to an open round the seed picks, on a base it picks: its own round, or the newest
    /// agreed one, and now and then any round from 3 before to 1 after that (the market must refuse those
    /// out of the bound).
    function submit(uint256 actorSeed, uint256 units, bool cheat, bool canary) external {
        canary = canary && cheat;
        address trainer = trainers[actorSeed % trainers.length];
        uint256 round;
        uint256 base;
        bool inBound;
        {
            ITaskMarket.Task memory task = market.getTask(taskId);
            if (task.ended || stakes.freeStake(trainer) < task.minTrainerStake) return;
            (round, base, inBound) = _pickRoundAndBase(actorSeed, task);
        }
        uint256 id = lens.submissionIdOf(taskId, round, trainer);
        {
            (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, round);
            if (block.timestamp >= submitDeadline || market.getSubmission(id).workUnits != 0) return;
        }
        // Trainers re-use one proofs file per kind of work across rounds: the replay the commitment must stop.
        (bool taken, uint256 gasUsed) =
            _trySubmit(trainer, round, base, bound(units, 1, 10_000), keccak256(abi.encode(cheat)), _tagOf(id, canary));
        if (!taken) {
            if (inBound) ++ghost_basesInBoundRefused;
            return;
        }
        if (!inBound) ++ghost_basesOutOfBoundAccepted;
        _recordMax(gasUsed, 0);
        if (base < round) ++ghost_staleSubmissions;
        submissions.push(id);
        isCheat[id] = cheat;
        isCanary[id] = canary;
        _recordCommitment(lens.commitmentOf(taskId, round, base, trainer, keccak256(abi.encode(cheat))));
    }

    /// @dev A canary's tag opens with the creator's salt; real work's is random.
    function _tagOf(uint256 id, bool canary) internal pure returns (bytes32) {
        return canary ? bytes32(Ids.canaryTag(_saltOf(id), id)) : keccak256(abi.encode(id, "tag"));
    }

    function _trySubmit(address trainer, uint256 round, uint256 base, uint256 units, bytes32 proofs, bytes32 tag)
        internal
        returns (bool taken, uint256 gasUsed)
    {
        vm.prank(trainer);
        uint256 gasBefore = gasleft();
        try market.submitWork(taskId, round, base, "bafy-rollouts", "bafy-update", uint64(units), proofs, tag) {
            return (true, gasBefore - gasleft());
        } catch {
            return (false, 0);
        }
    }

    function _pickRoundAndBase(uint256 actorSeed, ITaskMarket.Task memory task)
        internal
        pure
        returns (uint256 round, uint256 base, bool inBound)
    {
        round = task.currentRound + (actorSeed >> 8) % (uint256(task.openRound) - task.currentRound + 1);
        base = (actorSeed >> 16) % 4 == 0 ? task.currentRound : round;
        if ((actorSeed >> 24) % 8 == 7) base = base + 1 - _min((actorSeed >> 32) % 5, base + 1);
        inBound = base <= task.currentRound && base <= round && round - base <= task.maxStaleness;
    }

    function _recordCommitment(bytes32 commitment) internal {
        if (ghost_commitmentSeen[commitment]) ++ghost_commitmentRepeats;
        ghost_commitmentSeen[commitment] = true;
    }

    /// The liar's attestation, or a diligent validator's early one.
    function attest(uint256 submissionSeed, uint256 validatorSeed) external {
        if (submissions.length == 0) return;
        uint256 id = submissions[submissionSeed % submissions.length];
        if (!_inAttestWindow(id)) return;
        _fixSeed(_roundOf(id));
        address[] memory assigned = lens.assignedValidators(id);
        if (assigned.length == 0) return;
        address validator = assigned[validatorSeed % assigned.length];
        _attestIfNotYet(id, validator, assigned);
    }

    /// A copier: a validator assigned to a check (or seated on its dispute's committee) that has not committed
    /// waits for others' verdicts and commits the majority it sees. Every such commitment must be refused (the commit
    /// phase closes before any verdict shows), and no verdict may show before its reveal phase.
    function copyVotes(uint256 submissionSeed, uint256 memberSeed, bool inDispute) external {
        if (submissions.length == 0) return;
        uint256 id = submissions[submissionSeed % submissions.length];
        if (inDispute) return _copyDisputeVote(id, memberSeed);
        ITaskMarket.Submission memory sub = market.getSubmission(id);
        if (sub.votedMask == 0) return; // nothing to copy yet
        if (block.timestamp < _revealFrom(id)) ++ghost_verdictsBeforeReveal;
        address[] memory assigned = lens.assignedValidators(id);
        uint256 j = _uncommitted(sub.committedMask, assigned.length, memberSeed);
        if (j == type(uint256).max) return;
        bool seen = 2 * _popcount(sub.invalidMask) < _popcount(sub.votedMask); // the majority revealed so far
        ++ghost_copyAttempts;
        vm.prank(assigned[j]);
        try market.commitAttestation(id, keccak256(abi.encode(id, assigned[j], seen, "copied", bytes32(0)))) {
            ++ghost_copiedCommitments;
        } catch {}
    }

    /// The first position from `seed` on whose holder has not committed (max when every one has).
    function _uncommitted(uint256 committed, uint256 size, uint256 seed) internal pure returns (uint256) {
        for (uint256 k = 0; k < size; ++k) {
            uint256 j = (seed % size + k) % size;
            if (committed & (1 << j) == 0) return j;
        }
        return type(uint256).max;
    }

    function _copyDisputeVote(uint256 id, uint256 memberSeed) internal {
        ITaskMarket.Dispute memory d = market.getDispute(id);
        if (d.votedMask == 0 || !d.open) return;
        if (block.timestamp < _disputeRevealFrom(d)) ++ghost_verdictsBeforeReveal;
        address[] memory committee = lens.disputeCommittee(id);
        uint256 j = _uncommitted(d.committedMask, committee.length, memberSeed);
        if (j == type(uint256).max) return;
        bool seen = 2 * _popcount(d.validMask) > _popcount(d.votedMask);
        ++ghost_copyAttempts;
        vm.prank(committee[j]);
        try market.commitDisputeVote(id, keccak256(abi.encode(id, committee[j], seen, "copied", bytes32(0)))) {
            ++ghost_copiedCommitments;
        } catch {}
    }

    function dispute(uint256 submissionSeed, bool frivolous) external {
        for (uint256 k = 0; k < submissions.length; ++k) {
            uint256 id = submissions[(submissionSeed % submissions.length + k) % submissions.length];
            if (_tryDispute(id, frivolous)) return;
        }
    }

    function _tryDispute(uint256 id, bool frivolous) internal returns (bool) {
        ITaskMarket.Submission memory sub = market.getSubmission(id);
        if (sub.disputed || !_inChallengeWindow(id)) return false;
        (,, address trainer) = _decode(id);
        address disputer;
        // A revealed canary is known bad: only a frivolous dispute (by anyone but its owner) calls it valid.
        if (sub.canary && sub.rejected) disputer = frivolous ? auditor : address(0);
        else if (sub.rejected && (!isCheat[id] || frivolous)) disputer = trainer;
        else if (!sub.rejected && (isCheat[id] || frivolous)) disputer = auditor;
        if (disputer == address(0) || token.balanceOf(disputer) < BOND) return false;
        vm.prank(disputer);
        market.dispute(id, sub.rejected);
        ghost_openBonds += BOND;
        // Anyone (here, a validator's client) fixes the committee's seed from its block's prevrandao.
        _fixDisputeSeedWith(id, _mixOf(market.getDispute(id).seedBlock));
        return true;
    }

    function voteDispute(uint256 submissionSeed, uint256 memberSeed) external {
        if (submissions.length == 0) return;
        uint256 id = submissions[submissionSeed % submissions.length];
        ITaskMarket.Dispute memory d = market.getDispute(id);
        if (!d.open || block.timestamp >= d.deadline) return;
        address[] memory committee = lens.disputeCommittee(id);
        if (committee.length == 0) return;
        _disputeVoteInPhase(id, committee, memberSeed % committee.length);
    }

    /// The committee member at `j`'s vote in the phase the dispute is in: its commitment, or its reveal. A member
    /// holding several positions votes them all at once: its first position's bit tells.
    function _disputeVoteInPhase(uint256 id, address[] memory committee, uint256 j) internal {
        ITaskMarket.Dispute memory d = market.getDispute(id);
        uint256 bit = 1 << _firstAt(committee, j);
        bool valid = isLiar[committee[j]] ? isCheat[id] : !isCheat[id];
        bytes32 salt = keccak256(abi.encode("dispute vote", committee[j], id));
        if (block.timestamp < _disputeRevealFrom(d)) {
            if (d.committedMask & bit != 0) {
                // An eager revealer: the market must refuse a reveal in the commit phase.
                if (d.votedMask & bit != 0) return;
                vm.prank(committee[j]);
                try market.voteDispute(id, valid, "bafy-evidence", salt) {
                    ++ghost_verdictsBeforeReveal;
                } catch {}
                return;
            }
            vm.prank(committee[j]);
            market.commitDisputeVote(id, keccak256(abi.encode(id, committee[j], valid, "bafy-evidence", salt)));
        } else if (d.committedMask & bit != 0 && d.votedMask & bit == 0) {
            vm.prank(committee[j]);
            market.voteDispute(id, valid, "bafy-evidence", salt);
        }
    }

    function _disputeRevealFrom(ITaskMarket.Dispute memory d) internal view returns (uint256) {
        return d.deadline - market.getTask(taskId).challengeWindow / 4;
    }

    function resolveDispute(uint256 submissionSeed) external {
        if (submissions.length == 0) return;
        uint256 id = submissions[submissionSeed % submissions.length];
        ITaskMarket.Dispute memory d = market.getDispute(id);
        if (!d.open) return;
        _voteHonestly(id, false);
        d = market.getDispute(id);
        if (block.timestamp < d.deadline) {
            uint256 size = market.getTask(taskId).validatorsPerCheck;
            uint256 validVotes = _popcount(d.validMask);
            uint256 invalidVotes = _popcount(d.votedMask & ~uint256(d.validMask));
            if (2 * validVotes <= size && 2 * invalidVotes <= size) return;
        }
        market.resolveDispute(id);
        ghost_openBonds -= BOND;
    }

    /// Anyone opens the next round ahead of finality whenever the market allows it; an attempt beyond the
    /// bound must be refused.
    function openAhead() external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.ended || task.openRound + 1 >= task.rounds) return;
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, task.openRound);
        if (block.timestamp < submitDeadline) return;
        try market.openNextRound(taskId) {
            ++ghost_openedAhead;
            if (task.openRound + 1 - task.currentRound > task.maxStaleness) ++ghost_openedBeyondBound;
        } catch {}
    }

    function propose(uint256 aggregatorSeed, bool odd) external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.ended) return;
        uint256 round = task.currentRound;
        (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, round);
        if (block.timestamp < validateDeadline) return;
        address[] memory aggregators = lens.aggregatorsOf(taskId, round);
        if (aggregators.length == 0) return;
        address aggregator = aggregators[aggregatorSeed % aggregators.length];
        if (market.hasProposed(taskId, round, aggregator)) return;
        uint256 epoch = market.getRound(taskId, round).checkpointEpoch;
        vm.prank(aggregator);
        market.proposeCheckpoint(taskId, round, epoch, odd && isLiar[aggregator] ? "bafy-wrong" : "bafy-next");
    }

    function finalise() external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.ended) return;
        if (block.timestamp < lens.finalFromOf(taskId, task.currentRound)) return;
        if (market.getRound(taskId, task.currentRound).openDisputes != 0) return;
        market.finaliseRound(taskId);
        ++ghost_finalises;
        // Rounds finalise in order: this one, and none after it.
        if (!market.getRound(taskId, task.currentRound).finalised) ++ghost_finalisedOutOfOrder;
        for (uint256 r = task.currentRound + 1; r <= task.openRound; ++r) {
            if (market.getRound(taskId, r).finalised) ++ghost_finalisedOutOfOrder;
        }
    }

    /// Settles the first unsettled submission of a finalised round from the seed on; when every
    /// one is settled, tries to settle one again.
    function settle(uint256 submissionSeed) external {
        uint256 again;
        for (uint256 k = 0; k < submissions.length; ++k) {
            uint256 id = submissions[(submissionSeed % submissions.length + k) % submissions.length];
            (uint256 tid, uint256 round,) = _decode(id);
            if (!market.getRound(tid, round).finalised) continue;
            if (!settledByHandler[id]) return _settle(id);
            // Prefer a case where only the settled flag stands between a second settlement and a
            // second payment or slash: the trainer still has stake locked elsewhere, and the
            // submission was rejected or its round still has budget for its units.
            (,, address trainer) = _decode(id);
            ITaskMarket.Submission memory sub = market.getSubmission(id);
            bool payable_ = sub.rejected || market.getRound(tid, round).unitsRemaining >= sub.workUnits;
            if (again == 0 || (stakes.accountOf(trainer).locked != 0 && payable_)) again = id;
        }
        if (again == 0) return;
        // Safety property 2: a second settlement must never go through.
        try market.settle(again) {
            ++ghost_doubleSettles;
        } catch {}
    }

    function _saltOf(uint256 id) internal pure returns (bytes32) {
        return keccak256(abi.encode("salt", id));
    }

    /// The creator reveals a canary from the seed on (the market refuses those out of the window, over the
    /// rate or disputed).
    function revealCanary(uint256 submissionSeed) external {
        for (uint256 k = 0; k < submissions.length; ++k) {
            uint256 id = submissions[(submissionSeed % submissions.length + k) % submissions.length];
            if (!isCanary[id] || market.getSubmission(id).canary) continue;
            vm.prank(creator);
            try market.revealCanary(id, _saltOf(id)) {
                ++ghost_canariesRevealed;
            } catch {}
            return;
        }
    }

    function _settle(uint256 id) internal {
        ITaskMarket.Submission memory sub = market.getSubmission(id);
        // Revealed, and not overturned as a false canary by a dispute: settled as a canary whatever the votes.
        if (sub.canary && !market.getDispute(id).upheld) return _settleCanary(id, sub);
        (,, address trainer) = _decode(id);
        bool sampled = lens.isSampled(id);
        bool captured = _liarMajority(lens.assignedValidators(id))
            || (market.getSubmission(id).disputed && _liarMajority(lens.disputeCommittee(id)));
        uint256 stakeBefore = _stakeOf(trainer);
        market.settle(id);
        settledByHandler[id] = true;
        ++ghost_settles;
        bool slashed = _stakeOf(trainer) < stakeBefore;
        // Stake-weighted draws can hand the liars a majority of a check's positions (with their share of
        // the stake as the chance per position, which the deterrence rule prices in). The safety claims
        // hold wherever honest validators held a majority of the check and of any dispute committee.
        if (captured) {
            ++ghost_capturedChecks;
            return;
        }
        if (slashed && !isCheat[id]) ++ghost_honestSlashed;
        if (!slashed && isCheat[id] && sampled) ++ghost_sampledCheatsUnslashed;
    }

    /// A revealed canary: its owner neither slashed nor paid, every position voted "valid" on it slashed.
    function _settleCanary(uint256 id, ITaskMarket.Submission memory sub) internal {
        (,, address owner) = _decode(id);
        address[] memory assigned = lens.isSampled(id) ? lens.assignedValidators(id) : new address[](0);
        uint256[] memory before = new uint256[](assigned.length);
        for (uint256 j = 0; j < assigned.length; ++j) {
            before[j] = _stakeOf(assigned[j]);
        }
        uint256 ownerStake = _stakeOf(owner);
        uint256 ownerCredit = market.creditOf(owner);
        market.settle(id);
        settledByHandler[id] = true;
        ++ghost_settles;
        if (_stakeOf(owner) != ownerStake || market.creditOf(owner) != ownerCredit) ++ghost_canaryOwnersCharged;
        for (uint256 j = 0; j < assigned.length; ++j) {
            bool votedValid = sub.votedMask & ~sub.invalidMask & (1 << j) != 0;
            if (votedValid && _firstAt(assigned, j) == j && _stakeOf(assigned[j]) >= before[j]) {
                ++ghost_canaryValidVotesUnslashed;
            }
        }
    }

    function claim(uint256 actorSeed) external {
        address account = _anyActor(actorSeed);
        uint256 owed = market.creditOf(account);
        if (owed == 0) return;
        address other = _anyActor(actorSeed ^ 1); // (not + 1: the fuzzer sends type(uint256).max)
        uint256 otherOwed = market.creditOf(other);
        uint256 before = token.balanceOf(account);
        vm.prank(account);
        uint256 gasBefore = gasleft();
        market.claim();
        _recordMax(0, gasBefore - gasleft());
        // Safety property 5: a claim pays its caller what it was owed, and only that.
        if (token.balanceOf(account) - before != owed) ++ghost_foreignClaims;
        if (other != account && market.creditOf(other) != otherOwed) ++ghost_foreignClaims;
    }

    /// A validator leaves the ended task whenever it likes, settled or not: the market must refuse it
    /// while a vote it cast is unsettled (its stake answers for the vote until then).
    function leave(uint256 validatorSeed) external {
        if (!market.getTask(taskId).ended) return;
        address validator = validators[validatorSeed % validators.length];
        if (market.seatOf(taskId, validator).slot == 0) return;
        uint256 unsettled = _unsettledVotesOf(validator);
        vm.prank(validator);
        try market.leaveTask(taskId) {
            ++ghost_leaves;
            if (unsettled != 0) ++ghost_leftWithVotesUnsettled;
        } catch {}
    }

    /// The handler's own count: votes the validator cast on submissions the handler has not settled.
    function _unsettledVotesOf(address validator) internal view returns (uint256 count) {
        for (uint256 k = 0; k < submissions.length; ++k) {
            uint256 id = submissions[k];
            if (settledByHandler[id] || !lens.isSampled(id)) continue;
            address[] memory assigned = lens.assignedValidators(id);
            uint256 committed = market.getSubmission(id).committedMask;
            for (uint256 j = 0; j < assigned.length; ++j) {
                if (assigned[j] == validator && committed & (1 << j) != 0) ++count;
            }
        }
    }

    function refund() external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (!task.ended || task.pool == 0) return;
        vm.prank(creator);
        market.refund(taskId);
    }

    /// Moves time on by up to 150 s, or, with `toNextDeadline`, to the current round's next deadline (or
    /// the time it may be finalised).
    function warp(uint256 seconds_, bool toNextDeadline) external {
        uint256 target = block.timestamp + bound(seconds_, 1, 150);
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (!task.ended) {
            (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline) =
                lens.deadlinesOf(taskId, task.currentRound);
            if (toNextDeadline) {
                if (block.timestamp < submitDeadline) target = submitDeadline;
                else if (block.timestamp < validateDeadline) target = validateDeadline;
                else if (block.timestamp < challengeDeadline) target = challengeDeadline;
                else target = _max(target, lens.finalFromOf(taskId, task.currentRound));
            }
            _diligence(task, target);
        }
        vm.warp(_max(target, block.timestamp));
        vm.roll(block.number + 1);
    }

    function _max(uint256 a, uint256 b) internal pure returns (uint256) {
        return a > b ? a : b;
    }

    function _min(uint256 a, uint256 b) internal pure returns (uint256) {
        return a < b ? a : b;
    }

    // ------------------------------------------------------------ helpers

    /// Diligent validators and committee members: before time passes a live round's or an open dispute's reveal
    /// phase, the honest ones commit (in the commit phase) and, the clock moved on to the reveal phase, reveal. The
    /// points are taken in time order (the earliest reveal phase first), so time only moves forward and no commit
    /// phase is skipped.
    function _diligence(ITaskMarket.Task memory task, uint256 target) internal {
        bool[] memory roundDone = new bool[](uint256(task.openRound) + 1);
        bool[] memory disputeDone = new bool[](submissions.length);
        while (true) {
            (uint256 best, uint256 kind, uint256 which) = (type(uint256).max, 0, 0);
            for (uint256 r = task.currentRound; r <= task.openRound; ++r) {
                (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, r);
                uint256 revealFrom = validateDeadline - task.validateWindow / 4;
                if (roundDone[r] || target < revealFrom || block.timestamp >= validateDeadline) continue;
                if (revealFrom < best) (best, kind, which) = (revealFrom, 1, r);
            }
            for (uint256 k = 0; k < submissions.length; ++k) {
                ITaskMarket.Dispute memory d = market.getDispute(submissions[k]);
                if (disputeDone[k] || !d.open || d.seed == 0 || block.timestamp >= d.deadline) continue;
                uint256 revealFrom = _disputeRevealFrom(d);
                if (target >= revealFrom && revealFrom < best) (best, kind, which) = (revealFrom, 2, k);
            }
            if (kind == 0) return;
            if (kind == 1) {
                roundDone[which] = true;
                _attestRoundHonestly(which);
            } else {
                disputeDone[which] = true;
                _voteHonestly(submissions[which], true);
            }
        }
    }

    /// The honest validators' whole votes on the round: committed in its commit phase (the clock moved to the
    /// submission deadline and the seed fixed first, when due), then, the clock moved to its reveal phase, revealed.
    function _attestRoundHonestly(uint256 round) internal {
        (uint256 submitDeadline, uint256 validateDeadline,) = lens.deadlinesOf(taskId, round);
        if (block.timestamp < submitDeadline) {
            vm.warp(submitDeadline);
            vm.roll(block.number + 1);
        }
        _fixSeed(round);
        uint256 revealFrom = validateDeadline - market.getTask(taskId).validateWindow / 4;
        // The round's sampled submissions and their assigned validators, drawn once for both passes.
        uint256[] memory ids = new uint256[](submissions.length);
        address[][] memory holders = new address[][](submissions.length);
        uint256 count;
        for (uint256 i = 0; i < submissions.length; ++i) {
            (, uint256 r,) = _decode(submissions[i]);
            if (r != round || !lens.isSampled(submissions[i])) continue;
            ids[count] = submissions[i];
            holders[count++] = lens.assignedValidators(submissions[i]);
        }
        for (uint256 pass = 0; pass < 2; ++pass) {
            if (pass == 1 && block.timestamp < revealFrom) {
                vm.warp(revealFrom);
                vm.roll(block.number + 1);
            }
            for (uint256 i = 0; i < count; ++i) {
                for (uint256 j = 0; j < holders[i].length; ++j) {
                    if (!isLiar[holders[i][j]]) _attestIfNotYet(ids[i], holders[i][j], holders[i]);
                }
            }
        }
    }

    /// `validator`'s vote in the phase it is in: its commitment in the commit phase, its reveal in the reveal phase.
    function _attestIfNotYet(uint256 id, address validator, address[] memory assigned) internal {
        uint256 slot;
        while (assigned[slot] != validator) ++slot;
        ITaskMarket.Submission memory sub = market.getSubmission(id);
        bool valid = isLiar[validator] ? isCheat[id] : !isCheat[id];
        bytes32 salt = keccak256(abi.encode("vote", validator, id));
        uint256 gasBefore;
        uint256 used;
        if (block.timestamp < _revealFrom(id)) {
            if (sub.committedMask & (1 << slot) != 0) {
                // An eager revealer: the market must refuse a reveal in the commit phase.
                if (sub.votedMask & (1 << slot) != 0) return;
                vm.prank(validator);
                try market.attest(id, valid, "bafy-evidence", salt) {
                    ++ghost_verdictsBeforeReveal;
                } catch {}
                return;
            }
            bytes32 commitment = keccak256(abi.encode(id, validator, valid, "bafy-evidence", salt));
            vm.prank(validator);
            gasBefore = gasleft();
            market.commitAttestation(id, commitment);
            used = gasBefore - gasleft();
            if (used > ghost_maxCommitGas) ghost_maxCommitGas = used;
        } else {
            if (sub.committedMask & (1 << slot) == 0 || sub.votedMask & (1 << slot) != 0) return;
            vm.prank(validator);
            gasBefore = gasleft();
            market.attest(id, valid, "bafy-evidence", salt);
            used = gasBefore - gasleft();
            if (used > ghost_maxRevealGas) ghost_maxRevealGas = used;
        }
    }

    /// Where the reveal phase of `id`'s round starts (the validate window's last quarter).
    function _revealFrom(uint256 id) internal view returns (uint256) {
        (uint256 tid, uint256 round,) = _decode(id);
        (, uint256 validateDeadline,) = lens.deadlinesOf(tid, round);
        return validateDeadline - market.getTask(tid).validateWindow / 4;
    }

    /// Honest committee members vote in the phase the dispute is in; with `toReveal`, those that committed reveal
    /// too, the clock moved on to its reveal phase.
    function _voteHonestly(uint256 id, bool toReveal) internal {
        ITaskMarket.Dispute memory d = market.getDispute(id);
        if (!d.open || block.timestamp >= d.deadline || d.seed == 0) return;
        address[] memory committee = lens.disputeCommittee(id);
        for (uint256 pass = 0; pass < (toReveal ? 2 : 1); ++pass) {
            if (pass == 1 && block.timestamp < _disputeRevealFrom(d)) {
                vm.warp(_disputeRevealFrom(d));
                vm.roll(block.number + 1);
            }
            for (uint256 j = 0; j < committee.length; ++j) {
                if (!isLiar[committee[j]]) _disputeVoteInPhase(id, committee, j);
            }
        }
    }

    /// Requests the round's check seed and, once its block has passed, fixes it (time stays put: the blocks
    /// come within the same second). `fixCheckSeed` does so for every live round past its submission window.
    function _fixSeed(uint256 round) internal {
        if (market.getRound(taskId, round).checkSeed != 0) return;
        _requestAndFixSeeds(taskId);
        _checkSeedIsItsBlocks(round);
    }

    /// A seed grinder, playing the producer of whatever block it likes: any actor calls `fixCheckSeed` at a
    /// block of its choosing (up to 300 blocks on, so sometimes past the 256-block horizon) with the header of
    /// the requested block filled as it likes (`extra`), or with none. Whoever calls, whenever, with whatever
    /// block contents, a seed once fixed must come from the prevrandao of the block its request named.
    function grindSeed(uint256 blocks, uint256 actorSeed, bytes32 extra) external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.ended) return;
        uint256 round = task.currentRound;
        (uint256 submitDeadline, uint256 validateDeadline,) = lens.deadlinesOf(taskId, round);
        if (block.timestamp < submitDeadline || market.getRound(taskId, round).checkSeed != 0) return;
        if (block.timestamp >= validateDeadline) return;
        vm.roll(block.number + bound(blocks, 0, 300));
        uint256 at = market.getRound(taskId, round).seedBlock;
        bytes memory header;
        if (at != 0 && at < block.number && block.number <= at + 256) {
            header = _seedHeaderWith(at, _mixOf(at), extra);
        }
        vm.prank(_anyActor(actorSeed));
        market.fixCheckSeed(taskId, header);
        for (; round <= task.openRound; ++round) {
            _checkSeedIsItsBlocks(round);
        }
    }

    /// An unverified round stays unverified: once a round's validate deadline passed without a check seed, a
    /// validator joins late (as a cheat's own sybil would) and calls `fixCheckSeed`; no seed may be fixed.
    function joinLate(uint256 actorSeed) external {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.ended) return;
        uint256 round = task.currentRound;
        (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, round);
        if (block.timestamp < validateDeadline || market.getRound(taskId, round).checkSeed != 0) return;
        address late = vm.addr(1000 + (actorSeed % 2));
        if (stakes.accountOf(late).staked == 0) {
            validators.push(late); // an honest late joiner, counted in every stake total from now on
            vm.prank(creator);
            token.transfer(late, 200 * TOKEN);
            vm.startPrank(late);
            token.approve(address(stakes), type(uint256).max);
            stakes.stake(200 * TOKEN, IStakeManager.Role.Validator);
            market.joinTask(taskId, 100 * TOKEN);
            vm.stopPrank();
        }
        vm.roll(block.number + 3);
        vm.prank(late);
        market.fixCheckSeed(taskId, "");
        if (market.getRound(taskId, round).checkSeed != 0) ++ghost_lateSeeds;
    }

    function _checkSeedIsItsBlocks(uint256 round) internal {
        ITaskMarket.Round memory rd = market.getRound(taskId, round);
        if (rd.checkSeed == 0 || ghost_seedChecked[round]) return;
        ghost_seedChecked[round] = true;
        if (rd.checkSeed != keccak256(abi.encode(_mixOf(rd.seedBlock), taskId, round, "check"))) {
            ++ghost_steeredSeeds;
        }
    }

    /// @dev Whether the liars hold more than half of the positions.
    function _liarMajority(address[] memory holders) internal view returns (bool) {
        uint256 held;
        for (uint256 j = 0; j < holders.length; ++j) {
            if (isLiar[holders[j]]) ++held;
        }
        return 2 * held > holders.length;
    }

    /// @dev The first index at which `list[j]` appears.
    function _firstAt(address[] memory list, uint256 j) internal pure returns (uint256 i) {
        while (list[i] != list[j]) ++i;
    }

    function _inAttestWindow(uint256 id) internal view returns (bool) {
        (uint256 tid, uint256 round,) = _decode(id);
        (uint256 submitDeadline, uint256 validateDeadline,) = lens.deadlinesOf(tid, round);
        return block.timestamp >= submitDeadline && block.timestamp < validateDeadline;
    }

    function _inChallengeWindow(uint256 id) internal view returns (bool) {
        (uint256 tid, uint256 round,) = _decode(id);
        (, uint256 validateDeadline, uint256 challengeDeadline) = lens.deadlinesOf(tid, round);
        return block.timestamp >= validateDeadline && block.timestamp < challengeDeadline;
    }

    function _anyActor(uint256 seed) internal view returns (address) {
        uint256 total = trainers.length + validators.length + 1;
        uint256 i = seed % total;
        if (i < trainers.length) return trainers[i];
        if (i < trainers.length + validators.length) return validators[i - trainers.length];
        return auditor;
    }

    function _stakeOf(address operator) public view returns (uint256) {
        IStakeManager.Account memory account = stakes.accountOf(operator);
        return account.staked + account.unbonding;
    }

    function _recordMax(uint256 submitGas, uint256 claimGas) internal {
        if (submitGas > ghost_maxSubmitGas) ghost_maxSubmitGas = submitGas;
        if (claimGas > ghost_maxClaimGas) ghost_maxClaimGas = claimGas;
    }

    function _roundOf(uint256 id) internal pure returns (uint256 round) {
        (, round,) = _decode(id);
    }

    function _decode(uint256 id) internal pure returns (uint256 tid, uint256 round, address trainer) {
        tid = id >> 192;
        round = (id >> 160) & type(uint32).max;
        trainer = address(uint160(id));
    }

    function _popcount(uint256 mask) internal pure returns (uint256 count) {
        while (mask != 0) {
            mask &= mask - 1;
            ++count;
        }
    }
}
