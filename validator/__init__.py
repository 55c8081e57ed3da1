"""The validator and auditor (spot-checks, attestations, disputes): built by their own issue."""
