"""The auditor: an index of the market's events, the audit that re-runs every check from chain events
and CIDs, its report types, and the money check."""
