"""`crucible explorer serve`: the web explorer."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.context import STORE_HELP, context
from cli.output import stderr
from protocol.errors import ConfigError

RELAY_HELP = (
    "Relay whose /ipfs/{cid} artifact links point to (default: the first relay of --store, else this explorer's "
    "own /ipfs/{cid})."
)
app = typer.Typer(no_args_is_help=True, help="The web explorer over the event index.")


@app.command()
def serve(
    ctx: typer.Context,
    port: int = typer.Option(8600, "--port", help="TCP port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    store: str = typer.Option(None, "--store", help=STORE_HELP),
    relay: str = typer.Option(
        None,
        "--relay",
        help="Relay whose /ipfs/{cid} artifact links point to (default: "
        "the first relay of --store, else this explorer's own /ipfs/{cid}).",
    ),
    index: Path = typer.Option(None, "--index", help="The SQLite event index (default: the state folder's)."),
    confirmations: int = typer.Option(0, "--confirmations", help="Index only blocks this many deep."),
    sync_every: float = typer.Option(2.0, "--sync-every", help="Seconds between index syncs."),
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Compute checkpoints' held-out accuracy."),
    json_output: bool = typer.Option(False, "--json", help="Print the address as one JSON line once serving."),
) -> None:
    """Serve the explorer: tasks, rounds, submissions, evidence, accounts, validators; JSON under /api."""
    import socket

    import uvicorn

    from auditor.index import default_index_path
    from explorer.app import create_app
    from protocol.artifacts.backends import open_store, relay_urls

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0 to 65535, got {port}")
    if sync_every <= 0:
        raise ConfigError("--sync-every must be above 0")
    crucible = context(ctx).crucible()
    relays = relay_urls(store) if store else None
    links = relay or (relays[0] if relays else None)
    app_ = create_app(crucible, index or default_index_path(crucible), open_store(store), links, sync_every, evaluate,
                      confirmations)  # fmt: skip
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    url = f"http://{host}:{listener.getsockname()[1]}"
    if json_output:
        print(json.dumps({"event": "serving", "url": url}), flush=True)
    else:
        stderr.print(f"explorer at {url}")
    server = uvicorn.Server(uvicorn.Config(app_, log_level="warning"))
    server.run(sockets=[listener])
