"""What every long-running role shares: the participant (signer, store, state file, tolerated races,
settling and claiming), the reporter (JSON-line events, progress) and the node's journal."""
