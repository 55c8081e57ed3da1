"""The trainer node (rollouts with proofs, local updates, submissions): built by its own issue."""
