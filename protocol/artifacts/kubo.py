"""An IPFS node as a store, through the Kubo RPC API (`/api/v0/...`) over httpx.

Tested against js-ipfs 0.66 (whose HTTP RPC mirrors Kubo's; `make test` runs one) and written to
what Kubo's documentation says it needs. What differs between the two, and is handled here:
- every call is a POST (Kubo refuses GET on the RPC API);
- `add` answers CIDv1 in base58btc on js-ipfs unless `cid-base=base32` is sent (Kubo's default is
  base32 already); `Size` is a string on Kubo and a number on js-ipfs (never read here);
- `cat` and `block/stat` of a CID the node does not hold wait for a provider forever on js-ipfs, even
  offline: each read sends the RPC's own `timeout=` so the node gives up (HTTP 500) before httpx does.
"""

from __future__ import annotations

import json

import httpx

from protocol.artifacts.cid import cid_of_bytes, verify_bytes
from protocol.artifacts.store import safe_cid
from protocol.errors import ArtifactError, ConfigError, OwnFault, SourcesUnreachable


class KuboStore:
    """put (`add` with CIDv1 raw leaves), get (`cat`, verified), has (`block/stat`), pin (`pin/add`)."""

    def __init__(self, api_url: str, timeout_s: float = 60.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        # httpx waits a little longer than the node, so a slow read ends with the node's own answer.
        self.http = httpx.Client(timeout=timeout_s + 10)

    def _post(self, path: str, **kwargs: object) -> httpx.Response:
        try:
            response = self.http.post(f"{self.api_url}/api/v0/{path}", **kwargs)  # type: ignore[arg-type]
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # This machine's own IPFS node is down: nothing is known of the bytes.
            raise SourcesUnreachable(f"the IPFS node at {self.api_url} is unreachable: {error}") from None
        except httpx.TimeoutException as error:
            # The node kept looking past its own timeout: it found no provider in time.
            raise ArtifactError(f"the IPFS node at {self.api_url} gave no answer: {error}") from None
        except httpx.HTTPError as error:
            # The node broke off mid-answer (it died, or its connection did): this machine's fault.
            raise SourcesUnreachable(f"the IPFS node at {self.api_url} broke off: {error}") from None
        if response.status_code in (404, 405):  # both daemons answer 500 with a Message for a failed command
            raise ConfigError(
                f"{self.api_url} does not answer the Kubo RPC API (/api/v0/{path}: {response.status_code})"
            )
        return response

    def _read_params(self, cid: str) -> dict[str, str]:
        return {"arg": safe_cid(cid), "timeout": f"{max(1, round(self.timeout_s))}s"}

    def put(self, data: bytes) -> str:
        expected = cid_of_bytes(data)
        response = self._post(
            "add",
            params={"cid-version": "1", "raw-leaves": "true", "pin": "true", "cid-base": "base32"},
            files={"file": ("blob", data)},
        )
        if response.status_code != 200:
            raise ArtifactError(f"the IPFS node refused the add: {_message(response)}")
        try:
            cid = str(json.loads(response.text.strip().splitlines()[-1])["Hash"])
        except (ValueError, KeyError, IndexError):
            raise ConfigError(f"{self.api_url} does not answer the Kubo RPC API (add gave no Hash)") from None
        if cid != expected:
            raise ArtifactError(f"the IPFS node assigned {cid} where {expected} was expected (other chunker settings?)")
        return cid

    def get(self, cid: str) -> bytes:
        response = self._post("cat", params=self._read_params(cid))
        if response.status_code != 200:
            raise ArtifactError(f"the IPFS node cannot cat {cid}: {_message(response)}")
        if not verify_bytes(response.content, cid):
            raise OwnFault(f"the IPFS node returned bytes that do not hash to {cid}")
        return response.content

    def has(self, cid: str) -> bool:
        response = self._post("block/stat", params={**self._read_params(cid), "offline": "true"})
        return response.status_code == 200

    def pin(self, cid: str) -> None:
        response = self._post("pin/add", params=self._read_params(cid))
        if response.status_code != 200:
            raise ArtifactError(f"the IPFS node cannot pin {cid}: {_message(response)}")


def _message(response: httpx.Response) -> str:
    """The node's error message (`{"Message": ...}` on both daemons), else its text."""
    try:
        return str(response.json()["Message"])
    except (ValueError, KeyError, TypeError):
        return response.text.strip()[:200]
