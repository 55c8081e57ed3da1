// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";

/// @dev Safety property 7: the hot calls' gas stays within the documented bounds as the number of
///      validators and submissions grows (docs/contracts.md: `attest` hashes the check's k positions and
///      compares them with the caller's range, whatever the validator count). Gas is measured with gasleft()
///      around the call inside one test transaction, so storage touched earlier is warm: these
///      figures are for comparison; bench/gas.py measures real transactions on Anvil.
contract GasBoundsTest is BaseTest {
    function _taskWithValidators(uint256 count) internal returns (uint256 taskId, address[] memory extra) {
        taskId = _createTask(_params());
        extra = new address[](count);
        for (uint256 i = 0; i < count; ++i) {
            extra[i] = vm.addr(1000 + i);
            _joinAsNewValidator(extra[i], taskId, 200 * TOKEN, 100 * TOKEN);
        }
    }

    /// @dev The execution gas of one validator's whole vote on a check it holds one position of: its commitment and
    ///      its reveal (each transaction adds 21,000 and its calldata on top: `bench/gas.py` measures receipts).
    function _voteGas(uint256 validatorCount) internal returns (uint256 committed, uint256 revealed) {
        (uint256 taskId,) = _taskWithValidators(validatorCount);
        _stake(trainers[0], IStakeManager.Role.Trainer, 1000 * TOKEN);
        uint256 id = _submit(taskId, 0, trainers[0], 10);
        _warpToValidate(taskId, 0);
        address voter = lens.assignedValidators(id)[2]; // (the seed is one with three distinct holders)
        string memory evidence = "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy";
        bytes32 commitment = _voteCommitment(voter, id, false, evidence);
        vm.prank(voter);
        uint256 before = gasleft();
        market.commitAttestation(id, commitment);
        committed = before - gasleft();
        _warpToReveal(id);
        bytes32 salt = _voteSalt(voter, id);
        vm.prank(voter);
        before = gasleft();
        market.attest(id, false, evidence, salt);
        revealed = before - gasleft();
    }

    /// @dev Each half of a vote within 80,000 execution gas (the bound of every hot call here), flat in the number of
    ///      validators. What a whole vote costs in receipts (intrinsic gas and cold storage counted, which one test
    ///      transaction here hides) is `bench/gas.py`'s to measure: docs/benchmarks.md.
    function test_VoteGasBoundedInValidatorCount() public {
        uint256[3] memory counts = [uint256(5), 64, 300];
        uint256[3] memory whole;
        for (uint256 i = 0; i < 3; ++i) {
            (uint256 committed, uint256 revealed) = _voteGas(counts[i]);
            assertTrue(committed <= 80_000 && revealed <= 80_000, "each half of a vote within 80k");
            whole[i] = committed + revealed;
        }
        // Three hashed positions whatever the count: no growth beyond a few hundred gas of calldata noise.
        assertTrue(whole[2] <= whole[0] + 500 && whole[1] <= whole[0] + 500, "no growth from 5 to 300 validators");
    }

    function test_SubmitWorkGasIndependentOfSubmissions() public {
        uint256 taskId = _createTask(_params());
        uint256 first;
        uint256 last;
        for (uint256 i = 0; i < 40; ++i) {
            address trainer = vm.addr(5000 + i);
            vm.prank(creator);
            token.transfer(trainer, 500 * TOKEN);
            vm.startPrank(trainer);
            token.approve(address(stakes), type(uint256).max);
            stakes.stake(500 * TOKEN, IStakeManager.Role.Trainer);
            uint256 before = gasleft();
            market.submitWork(
                taskId, 0, 0, "bafy-rollouts", "bafy-update", 100, keccak256("p"), keccak256(abi.encode("tag", i))
            );
            uint256 used = before - gasleft();
            vm.stopPrank();
            if (i == 1) first = used;
            if (i == 39) last = used;
            assertTrue(used <= 80_000, "submitWork within 80k");
        }
        // A few gas of difference come from the counters' growing non-zero bytes, not from a loop.
        assertTrue(last <= first + 100, "the 40th submission costs what the 2nd did");
    }
}
