"""The HTTP sessions of a JSON-RPC connection: one per thread, as web3 keeps them, that read the environment's
proxy, CA bundle and .netrc settings once, when made.

A requests session left to trust the environment reads it again at every request: each request scanned all of
`os.environ` twice for proxies and looked for a .netrc file, about 0.4 ms of CPU, a third of a view call's
whole cost. A role process makes several requests a block, so that was a real share of an idle one's CPU.
The settings are those the environment gives when the connection is made; a later change is not seen.
"""

from __future__ import annotations

import threading
from typing import Any

import requests
from requests.utils import get_netrc_auth

# What a request's failure to reach the node looks like: retried by the provider, then RpcUnreachable.
TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.HTTPError)


class SessionPerThread:
    """What web3's HTTP provider takes as its session: `post` runs on this thread's own session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    def post(self, *args: Any, **kwargs: Any) -> requests.Response:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self._session()
        return session.post(*args, **kwargs)

    def _session(self) -> requests.Session:
        session = requests.Session()
        settings = session.merge_environment_settings(self.url, {}, None, None, None)
        session.proxies.update(settings["proxies"])
        session.verify = settings["verify"]
        session.cert = settings["cert"]
        session.auth = get_netrc_auth(self.url)
        session.trust_env = False  # the environment was read above, once
        return session
