"""The validator: duties read from the chain every pass, spot-checks with protocol.work.checks,
attestations with evidence, checkpoint proposals, dispute votes and fees."""
