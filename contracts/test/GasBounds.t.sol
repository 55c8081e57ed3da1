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

    function _attestGas(uint256 validatorCount) internal returns (uint256 used) {
        (uint256 taskId,) = _taskWithValidators(validatorCount);
        _stake(trainers[0], IStakeManager.Role.Trainer, 1000 * TOKEN);
        uint256 id = _submit(taskId, 0, trainers[0], 10);
        _warpToValidate(taskId, 0);
        address[] memory assigned = lens.assignedValidators(id);
        vm.prank(assigned[2]); // (the seed is one with three distinct holders: see `_warpToValidate`)
        uint256 before = gasleft();
        market.attest(id, false, "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy");
        used = before - gasleft();
    }

    function test_AttestGasBoundedInValidatorCount() public {
        uint256 small = _attestGas(5);
        uint256 middle = _attestGas(64);
        uint256 many = _attestGas(300);
        assertTrue(small <= 80_000 && middle <= 80_000 && many <= 80_000, "attest within 80k");
        // Three hashed positions whatever the count: no growth beyond a few hundred gas of calldata noise.
        assertTrue(many <= small + 500 && middle <= small + 500, "no growth from 5 to 300 validators");
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
