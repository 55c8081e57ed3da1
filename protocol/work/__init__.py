"""The rules of a round's work: what a trainer owes (its round context, prompts and seeds), the rollout
file, the checks a validator or auditor runs on a submission, and the evidence file of a verdict."""
