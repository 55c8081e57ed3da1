"""A Kubo (go-ipfs) node as a store, through its RPC API (`/api/v0/...`) over httpx."""

from __future__ import annotations

import httpx

from protocol.artifacts.cid import cid_of_bytes, verify_bytes
from protocol.artifacts.store import safe_cid
from protocol.errors import ArtifactError, OwnFault, SourcesUnreachable


class KuboStore:
    """put (`add` with CIDv1 raw leaves), get (`cat`, verified), has (`block/stat`), pin (`pin/add`)."""

    def __init__(self, api_url: str, timeout_s: float = 60.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s)

    def _post(self, path: str, **kwargs: object) -> httpx.Response:
        try:
            response = self.http.post(f"{self.api_url}/api/v0/{path}", **kwargs)  # type: ignore[arg-type]
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # This machine's own IPFS node is down: nothing is known of the bytes.
            raise SourcesUnreachable(f"Kubo at {self.api_url} is unreachable: {error}") from None
        except httpx.HTTPError as error:
            # Kubo answered too slowly or broke off: it found no provider in time.
            raise ArtifactError(f"Kubo at {self.api_url} gave no answer: {error}") from None
        return response

    def put(self, data: bytes) -> str:
        expected = cid_of_bytes(data)
        response = self._post(
            "add", params={"cid-version": "1", "raw-leaves": "true", "pin": "true"}, files={"file": ("blob", data)}
        )
        if response.status_code != 200:
            raise ArtifactError(f"Kubo refused the add: {response.text.strip()}")
        cid = str(response.json()["Hash"])
        if cid != expected:
            raise ArtifactError(f"Kubo assigned {cid} where {expected} was expected (different chunker settings?)")
        return cid

    def get(self, cid: str) -> bytes:
        response = self._post("cat", params={"arg": safe_cid(cid)})
        if response.status_code != 200:
            raise ArtifactError(f"Kubo cannot cat {cid}: {response.text.strip()}")
        if not verify_bytes(response.content, cid):
            raise OwnFault(f"Kubo returned bytes that do not hash to {cid}")
        return response.content

    def has(self, cid: str) -> bool:
        response = self._post("block/stat", params={"arg": safe_cid(cid), "offline": "true"})
        return response.status_code == 200

    def pin(self, cid: str) -> None:
        response = self._post("pin/add", params={"arg": safe_cid(cid)})
        if response.status_code != 200:
            raise ArtifactError(f"Kubo cannot pin {cid}: {response.text.strip()}")
