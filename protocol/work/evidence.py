"""The evidence file a validator stores by CID and names in its attestation: what it checked, what
it measured, the thresholds, and where a failing submission failed (docs/formats.md)."""

from __future__ import annotations

from typing import Any

from protocol.artifacts.manifest import canonical_json
from protocol.errors import ArtifactError
from protocol.files import bounded_json
from protocol.work.checks import Claim, Verdict

SCHEMA = "crucible.evidence"
VERSION = 1
MAX_EVIDENCE_BYTES = 1024 * 1024


def evidence_document(submission: int, validator: str, claim: Claim, verdict: Verdict, purpose: str) -> dict[str, Any]:
    """The evidence of one check of a submission (`purpose`: "attest", "dispute", or "audit")."""
    context = claim.context
    return {
        "schema": SCHEMA,
        "schema_version": VERSION,
        "purpose": purpose,
        "submission": str(submission),
        "chain_id": context.chain_id,
        "market": context.market,
        "task_id": context.task_id,
        "round": context.round_index,
        "base_round": context.base_round,
        "trainer": context.node,
        "validator": validator,
        "rollout_cid": claim.rollout_cid,
        "update_cid": claim.update_cid,
        "checkpoint_cid": context.checkpoint_cid,
        "env_cid": context.env_cid,
        "valid": verdict.valid,
        "failed_check": verdict.failed_check,
        "checks": [result.as_json() for result in verdict.results],
    }


def evidence_bytes(document: dict[str, Any]) -> bytes:
    """Canonical JSON of an evidence document (bounded)."""
    data = canonical_json(document)
    if len(data) > MAX_EVIDENCE_BYTES:
        raise ArtifactError(f"evidence is {len(data)} bytes, above the {MAX_EVIDENCE_BYTES} bound")
    return data


def parse_evidence(data: bytes, source: str) -> dict[str, Any]:
    """Parses an evidence file, refusing one of another schema or over the size bound."""
    document = bounded_json(data, MAX_EVIDENCE_BYTES, f"evidence {source}", ArtifactError)
    if not isinstance(document, dict) or document.get("schema") != SCHEMA or document.get("schema_version") != VERSION:
        raise ArtifactError(f"evidence {source} is not a {SCHEMA} v{VERSION} document")
    return document
