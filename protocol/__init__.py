"""Crucible's shared core, in layers that import only downwards: errors/config/values/files/accounts,
then chain, artifacts, ml, work and runtime (see docs/architecture.md)."""
