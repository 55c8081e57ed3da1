// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @dev The forge cheatcodes these tests use. forge-std on npm is a 2022 release without its
///      ds-test dependency, so the project keeps the few declarations it needs here.
interface Vm {
    function warp(uint256 timestamp) external;
    function roll(uint256 blockNumber) external;
    function prank(address sender) external;
    function startPrank(address sender) external;
    function stopPrank() external;
    function expectRevert(bytes calldata revertData) external;
    function expectRevert(bytes4 selector) external;
    function expectRevert() external;
    function expectEmit() external;
    function label(address account, string calldata name) external;
    function chainId(uint256 id) external;
    function addr(uint256 privateKey) external pure returns (address);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function assume(bool condition) external pure;
    function prevrandao(bytes32 value) external;
    function snapshotState() external returns (uint256 snapshotId);
    function revertToState(uint256 snapshotId) external returns (bool success);
    function setBlockhash(uint256 blockNumber, bytes32 blockHash) external;
}

/// @dev Assertions that revert with a message, which is how forge marks a test failed.
abstract contract Test {
    bool public IS_TEST = true;
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    function assertTrue(bool condition, string memory message) internal pure {
        if (!condition) revert(message);
    }

    function assertEq(uint256 actual, uint256 expected, string memory message) internal pure {
        if (actual != expected) {
            revert(string.concat(message, ": got ", _str(actual), ", expected ", _str(expected)));
        }
    }

    function assertEq(address actual, address expected, string memory message) internal pure {
        if (actual != expected) revert(message);
    }

    function assertEq(bytes32 actual, bytes32 expected, string memory message) internal pure {
        if (actual != expected) revert(message);
    }

    function assertEq(bool actual, bool expected, string memory message) internal pure {
        if (actual != expected) revert(message);
    }

    function bound(uint256 x, uint256 min, uint256 max) internal pure returns (uint256) {
        if (max <= min) return min;
        return min + x % (max - min + 1);
    }

    function _str(uint256 value) internal pure returns (string memory) {
        if (value == 0) return "0";
        bytes memory digits;
        while (value != 0) {
            digits = abi.encodePacked(bytes1(uint8(48 + value % 10)), digits);
            value /= 10;
        }
        return string(digits);
    }
}
