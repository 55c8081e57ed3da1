"""The trainer node: rollouts with TOPLOC proofs, the local update, publication by CID and the
on-chain commitment, round after round; red-team adversaries for tests and demos."""
