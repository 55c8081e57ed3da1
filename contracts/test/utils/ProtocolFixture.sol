// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "./Test.sol";
import {DevToken} from "../../src/DevToken.sol";
import {StakeManager} from "../../src/StakeManager.sol";
import {TaskMarket} from "../../src/TaskMarket.sol";
import {TaskMarketLens} from "../../src/TaskMarketLens.sol";

/// @dev The protocol deployed and bound, every holder funded and approving both contracts:
///      shared by the unit tests' BaseTest and the invariant suite's Handler, with the market's lens.
abstract contract ProtocolFixture is Test {
    DevToken public token;
    StakeManager public stakes;
    TaskMarket public market;
    TaskMarketLens public lens;

    /// @dev [creator, auditor, trainers..., validators...], the order both suites fund.
    function _holders(address creator, address auditor, address[] memory trainers, address[] memory validators)
        internal
        pure
        returns (address[] memory holders)
    {
        holders = new address[](2 + trainers.length + validators.length);
        holders[0] = creator;
        holders[1] = auditor;
        for (uint256 i = 0; i < trainers.length; ++i) {
            holders[2 + i] = trainers[i];
        }
        for (uint256 i = 0; i < validators.length; ++i) {
            holders[2 + trainers.length + i] = validators[i];
        }
    }

    function _deployProtocol(address[] memory holders, uint256 fundsEach, uint64 unbondingPeriod) internal {
        uint256[] memory amounts = new uint256[](holders.length);
        for (uint256 i = 0; i < holders.length; ++i) {
            amounts[i] = fundsEach;
        }
        token = new DevToken(holders, amounts);
        stakes = new StakeManager(token, unbondingPeriod);
        market = new TaskMarket(token, stakes);
        lens = new TaskMarketLens(market);
        stakes.bindMarket(address(market));
        for (uint256 i = 0; i < holders.length; ++i) {
            vm.startPrank(holders[i]);
            token.approve(address(stakes), type(uint256).max);
            token.approve(address(market), type(uint256).max);
            vm.stopPrank();
        }
    }
}
