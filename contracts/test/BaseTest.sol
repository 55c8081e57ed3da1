// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ProtocolFixture} from "./utils/ProtocolFixture.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";

/// @dev Deployed contracts, labelled actors with tokens and approvals, and lifecycle helpers.
abstract contract BaseTest is ProtocolFixture {
    uint256 internal constant TOKEN = 1e18;
    uint256 internal constant FUNDS = 1_000_000 * TOKEN;
    uint64 internal constant UNBONDING = 7 days;
    /// @dev Enough that a dispute committee of 3 can be drawn apart from the 3 assigned validators.
    uint256 internal constant VALIDATORS = 8;

    address internal creator;
    address internal auditor;
    address[] internal trainers;
    address[] internal validators;

    function setUp() public virtual {
        creator = _actor("creator", 1);
        auditor = _actor("auditor", 2);
        for (uint256 i = 0; i < 3; ++i) {
            trainers.push(_actor(string.concat("trainer", _str(i)), 10 + i));
        }
        for (uint256 i = 0; i < VALIDATORS; ++i) {
            validators.push(_actor(string.concat("validator", _str(i)), 20 + i));
        }

        _deployProtocol(_holders(creator, auditor, trainers, validators), FUNDS, UNBONDING);
    }

    function _actor(string memory name, uint256 privateKey) internal returns (address account) {
        account = vm.addr(privateKey);
        vm.label(account, name);
    }

    function _params() internal pure returns (ITaskMarket.TaskParams memory p) {
        p.bounty = uint96(1000 * TOKEN);
        p.rounds = 2;
        p.sampleRatePpm = 1_000_000;
        p.validatorsPerCheck = 3;
        p.validatorFeeBps = 1000;
        p.finderShareBps = 5000;
        p.slashAmount = uint96(500 * TOKEN);
        p.validatorSlash = uint96(10 * TOKEN);
        p.minTrainerStake = uint96(500 * TOKEN);
        p.minValidatorStake = uint96(100 * TOKEN);
        // At least the bond with which no appeal pays at a third colluding (Params.leastDisputeBond: 361 with
        // two rounds, 536 with one).
        p.disputeBond = uint96(600 * TOKEN);
        p.maxWorkUnits = 1_000_000;
        p.submitWindow = 100;
        p.validateWindow = 100;
        p.challengeWindow = 100;
        p.colludingSharePpm = 333_333;
    }

    function _createTask(ITaskMarket.TaskParams memory p) internal returns (uint256 taskId) {
        vm.prank(creator);
        taskId = market.createTask(p, "bafy-model", "bafy-env");
    }

    /// @dev A task with every trainer and validator staked and every validator joined.
    function _readyTask(ITaskMarket.TaskParams memory p) internal returns (uint256 taskId) {
        taskId = _createTask(p);
        for (uint256 i = 0; i < trainers.length; ++i) {
            _stake(trainers[i], IStakeManager.Role.Trainer, 1000 * TOKEN);
        }
        for (uint256 i = 0; i < validators.length; ++i) {
            _stake(validators[i], IStakeManager.Role.Validator, 200 * TOKEN);
            vm.prank(validators[i]);
            market.joinTask(taskId, p.minValidatorStake);
        }
    }

    /// @dev `account`, given `staked` tokens by the creator, stakes them as a validator and joins `taskId`
    ///      with a seat of `seat`.
    function _joinAsNewValidator(address account, uint256 taskId, uint256 staked, uint256 seat) internal {
        vm.prank(creator);
        token.transfer(account, staked);
        vm.startPrank(account);
        token.approve(address(stakes), type(uint256).max);
        stakes.stake(staked, IStakeManager.Role.Validator);
        market.joinTask(taskId, seat);
        vm.stopPrank();
    }

    function _stake(address operator, IStakeManager.Role role, uint256 amount) internal {
        vm.prank(operator);
        stakes.stake(amount, role);
    }

    function _submit(uint256 taskId, uint256 round, address trainer, uint64 units) internal returns (uint256 id) {
        vm.prank(trainer);
        id = market.submitWork(
            taskId,
            round,
            round,
            "bafy-rollouts",
            "bafy-update",
            units,
            keccak256("proofs"),
            keccak256(abi.encode("tag", trainer, round))
        );
    }

    /// @dev Past the submission deadline with the check seed fixed. Draws may give one validator several
    ///      positions of a check (that is how stake weighs; ValidatorSeats.t.sol tests it): to let these
    ///      tests speak of "the three assigned validators", this takes the first seed block prevrandao (the
    ///      test plays the block's producer) whose draws seat distinct validators on every check and on the
    ///      aggregators.
    function _warpToValidate(uint256 taskId, uint256 round) internal {
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, round);
        vm.warp(submitDeadline);
        vm.roll(block.number + 1);
        market.fixCheckSeed(taskId, ""); // requests the seed from a block two ahead
        uint256 seedBlock = market.getRound(taskId, round).seedBlock;
        vm.roll(seedBlock + 1);
        for (uint256 i = 1; i < 64; ++i) {
            uint256 before = vm.snapshotState();
            _fixSeedWith(taskId, seedBlock, keccak256(abi.encode(i)));
            assertTrue(market.getRound(taskId, round).checkSeed != 0, "check seed fixed");
            if (_drawsDistinct(taskId, round)) return;
            vm.revertToState(before);
        }
        revert("no seed with distinct draws");
    }

    /// @dev `disputer` disputes `id`, and its committee is drawn from the first seed block prevrandao (the test
    ///      plays the block's producer) that seats distinct validators none of whom was assigned to `id`: the
    ///      market draws over the whole seat stake, and these tests speak of a committee apart from the check.
    function _disputeApart(address disputer, uint256 id) internal returns (address[] memory committee) {
        address[] memory assigned = lens.assignedValidators(id);
        bool rejected = market.getSubmission(id).rejected;
        vm.prank(disputer);
        market.dispute(id, rejected);
        for (uint256 i = 1; i < 128; ++i) {
            uint256 before = vm.snapshotState();
            _fixDisputeSeedWith(id, keccak256(abi.encode("committee", i)));
            committee = lens.disputeCommittee(id);
            if (_distinct(committee) && !_anyIn(assigned, committee)) return committee;
            vm.revertToState(before);
        }
        revert("no seed with a committee of distinct validators apart from the check");
    }

    function _anyIn(address[] memory list, address[] memory accounts) internal pure returns (bool) {
        for (uint256 j = 0; j < accounts.length; ++j) {
            if (_isIn(list, accounts[j])) return true;
        }
        return false;
    }

    function _drawsDistinct(uint256 taskId, uint256 round) internal view returns (bool) {
        if (!_distinct(lens.aggregatorsOf(taskId, round))) return false;
        for (uint256 i = 0; i < trainers.length; ++i) {
            uint256 id = lens.submissionIdOf(taskId, round, trainers[i]);
            if (market.getSubmission(id).workUnits != 0 && !_distinct(lens.assignedValidators(id))) return false;
        }
        return true;
    }

    function _distinct(address[] memory list) internal pure returns (bool) {
        for (uint256 i = 1; i < list.length; ++i) {
            for (uint256 j = 0; j < i; ++j) {
                if (list[i] == list[j]) return false;
            }
        }
        return true;
    }

    function _warpToChallenge(uint256 taskId, uint256 round) internal {
        (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, round);
        vm.warp(validateDeadline);
        vm.roll(block.number + 1);
    }

    function _warpToFinal(uint256 taskId, uint256 round) internal {
        (,, uint256 challengeDeadline) = lens.deadlinesOf(taskId, round);
        vm.warp(challengeDeadline);
        vm.roll(block.number + 1);
    }

    function _attestAll(uint256 id, bool valid) internal returns (address[] memory assigned) {
        assigned = lens.assignedValidators(id);
        for (uint256 j = 0; j < assigned.length; ++j) {
            if (_firstAt(assigned, j) != j) continue; // one vote covers every position it holds
            _vote(assigned[j], id, valid, "bafy-evidence");
        }
    }

    /// @dev `validator`'s whole vote on `id`: its commitment now (in the commit phase), its reveal at the reveal
    ///      phase's start, and time back where it was, so tests keep speaking of votes one after another. Sound
    ///      because one seat's commit and another's reveal commute: a commitment reads nothing a reveal writes, and
    ///      nothing on chain records when a vote was revealed. The phases themselves are tested apart
    ///      (CommitReveal.t.sol), without going back in time.
    function _vote(address validator, uint256 id, bool valid, string memory evidenceCid) internal {
        _commitVote(validator, id, valid, evidenceCid);
        uint256 now_ = block.timestamp;
        _warpToReveal(id);
        _revealVote(validator, id, valid, evidenceCid);
        vm.warp(now_);
    }

    /// @dev `member`'s whole vote on the dispute on `id`, as `_vote` does an attestation: committed now, revealed at
    ///      the dispute's reveal phase (the last quarter of its voting time), and time back where it was.
    function _disputeVote(address member, uint256 id, bool valid, string memory evidenceCid) internal {
        vm.prank(member);
        market.commitDisputeVote(id, _voteCommitment(member, id, valid, evidenceCid));
        uint256 now_ = block.timestamp;
        vm.warp(_disputeRevealFrom(id));
        vm.prank(member);
        market.voteDispute(id, valid, evidenceCid, _voteSalt(member, id));
        vm.warp(now_);
    }

    function _disputeRevealFrom(uint256 id) internal view returns (uint256) {
        return market.getDispute(id).deadline - market.getTask(id >> 192).challengeWindow / 4;
    }

    function _commitVote(address validator, uint256 id, bool valid, string memory evidenceCid) internal {
        vm.prank(validator);
        market.commitAttestation(id, _voteCommitment(validator, id, valid, evidenceCid));
    }

    function _revealVote(address validator, uint256 id, bool valid, string memory evidenceCid) internal {
        vm.prank(validator);
        market.attest(id, valid, evidenceCid, _voteSalt(validator, id));
    }

    /// @dev Independent of `Ids.voteCommitment` on purpose: what a client computes from the interface's words.
    function _voteCommitment(address validator, uint256 id, bool valid, string memory evidenceCid)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(id, validator, valid, evidenceCid, _voteSalt(validator, id)));
    }

    function _voteSalt(address validator, uint256 id) internal pure returns (bytes32) {
        return keccak256(abi.encode("vote salt", validator, id));
    }

    /// @dev To the start of the reveal phase of `id`'s round: the validate window's last quarter.
    function _warpToReveal(uint256 id) internal {
        vm.warp(_revealFrom(id));
    }

    function _revealFrom(uint256 id) internal view returns (uint256) {
        uint256 taskId = id >> 192;
        (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, (id >> 160) & type(uint32).max);
        return validateDeadline - market.getTask(taskId).validateWindow / 4;
    }

    /// @dev The first index at which `list[j]` appears.
    function _firstAt(address[] memory list, uint256 j) internal pure returns (uint256 i) {
        while (list[i] != list[j]) ++i;
    }

    function _isIn(address[] memory list, address account) internal pure returns (bool) {
        for (uint256 i = 0; i < list.length; ++i) {
            if (list[i] == account) return true;
        }
        return false;
    }

    /// @dev A task validator assigned to nothing in `assigned` (there are 8 validators, 3 assigned).
    function _unassignedValidator(address[] memory assigned) internal view returns (address) {
        for (uint256 i = 0; i < validators.length; ++i) {
            if (!_isIn(assigned, validators[i])) return validators[i];
        }
        revert("every validator is assigned");
    }

    /// @dev Safety property 1, from the tasks' state and the test's own count of open bonds: the
    ///      market holds every round budget not yet credited, every task's pool, the open bonds and
    ///      the unclaimed credits, to the wei; the stake manager holds every actor's stake.
    function _assertMarketConserved(uint256 taskCount, uint256 openBonds) internal view {
        uint256 expected = market.totalCredits() + openBonds;
        for (uint256 t = 1; t <= taskCount; ++t) {
            expected += _taskHoldings(t);
        }
        assertEq(token.balanceOf(address(market)), expected, "market balance");
        uint256 staked;
        for (uint256 i = 0; i < trainers.length; ++i) {
            staked += _stakeOf(trainers[i]);
        }
        for (uint256 i = 0; i < validators.length; ++i) {
            staked += _stakeOf(validators[i]);
        }
        assertEq(token.balanceOf(address(stakes)), staked, "stake manager balance");
    }

    function _taskHoldings(uint256 taskId) internal view returns (uint256 holdings) {
        ITaskMarket.Task memory task = market.getTask(taskId);
        holdings = task.pool;
        uint256 perRound = task.bounty / task.rounds;
        for (uint256 r = 0; r < task.rounds; ++r) {
            ITaskMarket.Round memory rd = market.getRound(taskId, r);
            if (rd.finalised) {
                holdings += rd.trainerBudgetRemaining + rd.feeRemaining;
            } else {
                holdings += r == task.rounds - 1 ? task.bounty - perRound * (task.rounds - 1) : perRound;
            }
        }
    }

    function _stakeOf(address operator) internal view returns (uint256) {
        IStakeManager.Account memory account = stakes.accountOf(operator);
        return account.staked + account.unbonding;
    }
}
