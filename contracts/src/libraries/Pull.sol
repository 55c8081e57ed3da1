// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// @title Pull
/// @notice Takes tokens in and checks that exactly the amount sent arrived, so that the books never
///         record more than the contract holds: a fee-on-transfer token is refused at its first transfer
///         in (a bounty, a stake, a bond) instead of leaving the market short when it pays out.
library Pull {
    using SafeERC20 for IERC20;

    /// @notice The token delivered a different amount than was sent (a fee on transfer, say).
    error TokenTransferMismatch(address token, uint256 sent, uint256 received);

    /// @dev `amount` from the caller (`msg.sender`, never anyone else) to this contract, or a revert naming
    ///      what arrived instead.
    function fromSender(IERC20 token, uint256 amount) internal {
        uint256 before = token.balanceOf(address(this));
        token.safeTransferFrom(msg.sender, address(this), amount);
        uint256 received = token.balanceOf(address(this)) - before;
        if (received != amount) revert TokenTransferMismatch(address(token), amount, received);
    }
}
