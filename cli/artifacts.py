"""`crucible artifacts cid|put|get|pin` and `crucible relay serve`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import typer

from cli.context import context
from cli.output import emit_json, stderr, stdout
from protocol.artifacts.backends import open_store, relay_urls
from protocol.config import crucible_home
from protocol.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Content-addressed artifacts: CIDs, stores and relays.")
relay_app = typer.Typer(no_args_is_help=True, help="Run a relay that serves and mirrors artifacts.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


@app.command()
def cid(
    file: Path = typer.Argument(..., help="The file."),
    cid_version: int = typer.Option(1, "--cid-version", help="1 (raw leaves, the default) or 0."),
    json_output: bool = JSON,
) -> None:
    """Print the CID Kubo would give the file."""
    from protocol.artifacts.cid import cid_of_file

    if not file.is_file():
        raise ConfigError(f"no such file: {file}")
    value = cid_of_file(file, cid_version)
    if json_output:
        emit_json({"cid": value})
    else:
        stdout.print(value)


@app.command()
def put(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="The file."),
    to: str = typer.Option(
        ..., "--to", help="A local store folder, relay URLs separated by commas, or kubo:API_URL (an IPFS node)."
    ),
    account: str = typer.Option("dev0", "--account", help="Who signs relay uploads."),
    json_output: bool = JSON,
) -> None:
    """Store a file in a local store or upload it (signed) to each relay."""
    from protocol.artifacts.fetch import upload
    from protocol.artifacts.store import LocalStore

    if not file.is_file():
        raise ConfigError(f"no such file: {file}")
    relays = relay_urls(to)
    if to.startswith("kubo:"):
        value = open_store(to).put(file.read_bytes())
    elif relays is None:
        value = LocalStore(Path(to)).put_file(file)
    else:
        signer = context(ctx).signer(account)
        value = ""
        for url in relays:
            value = upload(url, file, signer)
    if json_output:
        emit_json({"cid": value})
    else:
        stdout.print(value)


@app.command()
def get(
    cid_text: str = typer.Argument(..., metavar="CID", help="The CID."),
    sources: str = typer.Option(
        ..., "--from", help="A local store folder, relay URLs separated by commas, or kubo:API_URL (an IPFS node)."
    ),
    out: Path = typer.Option(..., "--out", help="Where to write the bytes (nothing is written unless all check out)."),
    json_output: bool = JSON,
) -> None:
    """Fetch a CID, check every byte against it, then write it to --out."""
    from protocol.artifacts.fetch import Fetcher, FetchReport
    from protocol.artifacts.store import LocalStore, safe_cid

    value = safe_cid(cid_text)
    data: bytes | None = None  # the bytes, when they came whole from an IPFS node
    if sources.startswith("kubo:"):
        data = open_store(sources).get(value)  # checked against the CID
        report = FetchReport(value, len(data))
    elif (relays := relay_urls(sources)) is None:
        store = LocalStore(Path(sources))
        if not store.has(value):
            raise ConfigError(f"{value} is not in the local store {sources}")
        report = FetchReport(value, store.size_of(value))
    else:
        store = LocalStore(crucible_home() / "store")
        report = Fetcher(relays, store, show_progress=not json_output).fetch_many([value])[0]
    # Re-checked as it is copied, then renamed into place: --out appears whole or not at all.
    out.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    os.close(descriptor)
    try:
        if data is None:
            store.get(value)
            shutil.copyfile(store.path_for(value), temporary)
        else:
            Path(temporary).write_bytes(data)
        os.replace(temporary, out)
    finally:
        Path(temporary).unlink(missing_ok=True)
    if json_output:
        emit_json(
            {"cid": value, "size": report.size, "relays": report.relays, "resumed_from": report.resumed_from,
             "rejected": report.rejected, "out": str(out)}
        )  # fmt: skip
    else:
        stderr.print(f"{value}: {report.size} bytes verified")
        stdout.print(str(out))


@app.command()
def pin(
    cid_text: str = typer.Argument(..., metavar="CID", help="The CID."),
    store_dir: str = typer.Option(None, "--store", help="A local store folder (default: the state folder's)."),
    kubo: str = typer.Option(None, "--kubo", help="Pin on an IPFS node instead: its (Kubo) RPC API URL."),
    json_output: bool = JSON,
) -> None:
    """Pin a CID in a local store or on an IPFS node."""
    from protocol.artifacts.store import LocalStore, safe_cid

    value = safe_cid(cid_text)
    if kubo:
        open_store(f"kubo:{kubo}").pin(value)
    else:
        LocalStore(Path(store_dir) if store_dir else crucible_home() / "store").pin(value)
    if json_output:
        emit_json({"cid": value, "pinned": True})
    else:
        stdout.print(f"pinned {value}")


@relay_app.command()
def serve(
    ctx: typer.Context,
    port: int = typer.Option(..., "--port", help="TCP port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    store_dir: Path = typer.Option(None, "--store", help="Store folder (default: the state folder's relay-PORT)."),
    follow: list[str] = typer.Option([], "--follow", help="A relay to mirror (repeatable)."),
    peers: list[str] = typer.Option(
        [], "--peer", help="A relay to take shards from before the one followed (repeatable)."
    ),
    fan_in: int = typer.Option(1, "--fan-in", min=1, max=16, help="Shards this relay fetches at once."),
    max_serving: int = typer.Option(32, "--max-serving", min=1, help="Responses served at once (more: 503)."),
    max_upload_mb: float = typer.Option(256, "--max-upload-mb", help="Largest upload accepted, in MiB."),
    uploads_per_minute: int = typer.Option(120, "--uploads-per-minute", help="Uploads a minute per address."),
    rate_limit_mbps: float = typer.Option(0, "--rate-limit-mbps", help="Cap on bytes sent, MB/s (0: none)."),
    require_stake: bool = typer.Option(False, "--require-stake", help="Only addresses with stake may upload."),
) -> None:
    """Serve /ipfs/{cid}, accept signed uploads, and mirror the relays followed."""
    import uvicorn

    from protocol.artifacts.relay import RelaySettings, create_app
    from protocol.chain.client import stake_check as chain_stake_check

    for url in [*follow, *peers]:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{url!r} is not a relay URL (http:// or https://)")
    stake_check = None
    if require_stake:
        cli = context(ctx)
        crucible = cli.crucible()
        stake_check = chain_stake_check(crucible, 1)
        stderr.print(f"uploads need stake in StakeManager {crucible.deployment.StakeManager}")
    settings = RelaySettings(
        store_dir=store_dir or crucible_home() / f"relay-{port}",
        max_upload_bytes=int(max_upload_mb * 1024 * 1024),
        uploads_per_minute=uploads_per_minute,
        serve_bytes_per_s=int(rate_limit_mbps * 1_000_000),
        follow=list(follow),
        peers=list(peers),
        fan_in=fan_in,
        max_serving=max_serving,
        stake_check=stake_check,
    )
    stderr.print(f"relay on http://{host}:{port}, store {settings.store_dir}")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
