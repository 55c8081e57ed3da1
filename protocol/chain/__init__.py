"""The chain layer: one connection (nonces, fees, receipts, decoded reverts), typed calls of the contracts,
deployments and address books, ids and commitments and the draws computed as the contracts compute
them, task parameters, and the local devnet."""
