// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "./Test.sol";
import {DevToken} from "../../src/DevToken.sol";
import {StakeManager} from "../../src/StakeManager.sol";
import {TaskMarket} from "../../src/TaskMarket.sol";
import {TaskMarketLens} from "../../src/TaskMarketLens.sol";
import {ITaskMarket} from "../../src/interfaces/ITaskMarket.sol";

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

    /// @dev A block header as the market reads one ({Seeds}): an RLP list whose field 8 is `number`, field 12
    ///      (`extraData`) is `extra` — what the block's producer may fill as it likes — and field 13 (`mixHash`,
    ///      the prevrandao) is `mix`; the other fields are empty. Made the chain's hash of block `number`, as a
    ///      real node's header would be.
    function _seedHeaderWith(uint256 number, bytes32 mix, bytes32 extra) internal returns (bytes memory header) {
        bytes memory numberItem;
        if (number == 0) numberItem = hex"80";
        else if (number < 0x80) numberItem = abi.encodePacked(uint8(number));
        else numberItem = abi.encodePacked(uint8(0x88), uint64(number));
        bytes memory payload =
            abi.encodePacked(hex"8080808080808080", numberItem, hex"808080", uint8(0xa0), extra, uint8(0xa0), mix);
        header = abi.encodePacked(uint8(0xf8), uint8(payload.length), payload);
        vm.setBlockhash(number, keccak256(header));
    }

    function _seedHeader(uint256 number, bytes32 mix) internal returns (bytes memory) {
        return _seedHeaderWith(number, mix, bytes32(0));
    }

    /// @dev The prevrandao the test chain gives block `number` (a real chain's RANDAO mix is as unknown ahead).
    function _mixOf(uint256 number) internal pure returns (bytes32) {
        return keccak256(abi.encode(number, "prevrandao"));
    }

    /// @dev Fixes the check seed rounds of `taskId` requested from block `seedBlock`, as its producer's
    ///      prevrandao `mix` makes it (the block must be behind the current one).
    function _fixSeedWith(uint256 taskId, uint256 seedBlock, bytes32 mix) internal {
        market.fixCheckSeed(taskId, _seedHeader(seedBlock, mix));
    }

    /// @dev Requests the seed of every live round of `taskId` past its submission deadline, rolls past the
    ///      blocks requested and fixes each from the chain's prevrandao ({_mixOf}).
    function _requestAndFixSeeds(uint256 taskId) internal {
        market.fixCheckSeed(taskId, "");
        vm.roll(block.number + 3);
        ITaskMarket.Task memory task = market.getTask(taskId);
        for (uint256 r = task.currentRound; r <= task.openRound; ++r) {
            ITaskMarket.Round memory rd = market.getRound(taskId, r);
            if (rd.checkSeed == 0 && rd.seedBlock != 0 && rd.seedBlock < block.number) {
                _fixSeedWith(taskId, rd.seedBlock, _mixOf(rd.seedBlock));
            }
        }
    }

    /// @dev Fixes a dispute's committee seed from prevrandao `mix` of its seed block, rolling past that block.
    function _fixDisputeSeedWith(uint256 id, bytes32 mix) internal {
        uint256 at = market.getDispute(id).seedBlock;
        if (block.number <= at) vm.roll(at + 1);
        market.fixDisputeSeed(id, _seedHeader(at, mix));
    }
}
