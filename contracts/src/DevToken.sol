// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

/// @title DevToken
/// @notice The devnet's bounty and stake token: a plain ERC-20 with EIP-2612 permit, its whole
///         supply minted once at deployment to the given holders. On other chains any ERC-20 that delivers
///         exactly what is sent: fee-on-transfer tokens are refused at their first transfer in
///         (`Pull.TokenTransferMismatch`) and rebasing tokens are not supported (docs/contracts.md).
contract DevToken is ERC20, ERC20Permit {
    /// @notice The holders and amounts differ in length.
    error DevTokenLengthMismatch(uint256 holders, uint256 amounts);

    /// @param holders Accounts that receive the initial supply (the devnet's dev accounts).
    /// @param amounts Amount in wei minted to each holder, in the same order.
    constructor(address[] memory holders, uint256[] memory amounts)
        ERC20("Crucible Dev Token", "CRU")
        ERC20Permit("Crucible Dev Token")
    {
        if (holders.length != amounts.length) {
            revert DevTokenLengthMismatch(holders.length, amounts.length);
        }
        for (uint256 i = 0; i < holders.length; ++i) {
            _mint(holders[i], amounts[i]);
        }
    }
}
