"""`crucible explorer serve`: a FastAPI app, rendered on the server from the event index.

Pages work without JavaScript; `/api/...` returns the same documents as JSON (OpenAPI at `/docs`).
A background thread keeps the index in sync with the chain and computes the held-out accuracy of
each agreed checkpoint once (cached in the index). Bad input gets a 4xx page naming the problem.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from auditor.audit import Auditor
from auditor.index import EventIndex
from explorer.charts import line_chart
from explorer.views import BadInput, NotFound, Views, parse_address, parse_cid, parse_submission
from protocol.artifacts.store import Store
from protocol.chain.client import Crucible
from protocol.chain.ids import submission_text
from protocol.errors import CrucibleError

TEMPLATES = Path(__file__).parent / "templates"
MAX_ID = 2**64


def templates() -> Environment:
    """The Jinja environment of the explorer and the audit's HTML report."""
    environment = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    environment.filters["short"] = lambda text: text if len(str(text)) <= 18 else f"{str(text)[:10]}…{str(text)[-6:]}"
    # Submission ids as people read them everywhere: 0x-hex (documents carry it; evidence keeps decimal).
    environment.filters["sid"] = lambda value: submission_text(int(str(value), 0))
    environment.filters["pct"] = lambda value: "-" if value is None else f"{100 * value:.1f}%"
    environment.globals["line_chart"] = line_chart
    return environment


class Syncer:
    """Keeps an index of its own in sync and evaluates agreed checkpoints, on a background thread."""

    def __init__(self, make_auditor: Callable[[], Auditor], every_s: float, evaluate: bool) -> None:
        self.make_auditor = make_auditor
        self.every_s = every_s
        self.evaluate = evaluate
        self.stop = threading.Event()
        self.error: str | None = None
        # A task whose checkpoints cannot be read (a model CID no store serves) is warned about on its
        # own pages; the index and every other task keep being served.
        self.task_warnings: dict[int, str] = {}
        self.thread = threading.Thread(target=self._run, daemon=True, name="explorer-sync")

    def _run(self) -> None:
        auditor = self.make_auditor()
        try:
            while not self.stop.is_set():
                self.sync_once(auditor)
                self.stop.wait(self.every_s)
        finally:
            auditor.index.close()

    def sync_once(self, auditor: Auditor) -> None:
        """One pass: the index brought up to the chain, then every new agreed checkpoint evaluated. A
        failure of the index is shown on every page; a task's unreadable artifacts on that task's only."""
        try:
            auditor.index.sync()
            self.error = None
        except CrucibleError as error:
            self.error = str(error)  # tried again next time
            return
        if not self.evaluate:
            return
        for task_id in auditor.index.task_ids():
            try:
                env_cid = str(auditor.created(task_id).args["envCid"])
                for cid in auditor.checkpoint_cids(task_id).values():
                    if auditor.index.evaluation(cid) is None:
                        auditor.accuracy(cid, env_cid)
                self.task_warnings.pop(task_id, None)
            except CrucibleError as error:
                self.task_warnings[task_id] = f"its checkpoints cannot be evaluated: {error}"


def create_app(
    crucible: Crucible,
    index_path: Path,
    store: Store,
    relay_url: str | None = None,
    sync_every_s: float = 2.0,
    evaluate: bool = True,
    confirmations: int = 0,
) -> FastAPI:
    """The explorer over `index_path` (kept in sync with `crucible`'s chain), reading artifacts from `store`."""
    pages_index = EventIndex(crucible, index_path, confirmations)
    pages_index.sync()
    views = Views(Auditor(crucible, pages_index, store, rerun=False), relay_url)
    syncer = Syncer(
        lambda: Auditor(crucible, EventIndex(crucible, index_path, confirmations), store, rerun=False),
        sync_every_s,
        evaluate,
    )
    lock = threading.Lock()  # one SQLite connection serves the pages, one request at a time
    environment = templates()
    environment.globals["ipfs"] = views.artifact_url  # a CID's bytes, checked against it by whoever fetches

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        syncer.thread.start()
        yield
        syncer.stop.set()
        pages_index.close()

    app = FastAPI(
        title="Crucible explorer",
        version="1",
        description="Tasks, rounds, submissions, verdicts, evidence, accounts and validators of a Crucible deployment.",
        lifespan=lifespan,
    )

    def html(template: str, http_status: int = 200, **context: Any) -> HTMLResponse:
        shown = {"sync_error": syncer.error, "indexed_block": pages_index.last_block} | context
        body = environment.get_template(template).render(**shown)
        return HTMLResponse(body, status_code=http_status)

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def error_response(request: Request, status: int, message: str) -> Response:
        if wants_json(request):
            return JSONResponse({"error": message, "status": status}, status_code=status)
        return html("error.html", http_status=status, status=status, message=message)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, error: NotFound) -> Response:
        return error_response(request, 404, str(error))

    @app.exception_handler(BadInput)
    async def bad_input(request: Request, error: BadInput) -> Response:
        return error_response(request, 400, str(error))

    @app.exception_handler(CrucibleError)
    async def unavailable(request: Request, error: CrucibleError) -> Response:
        # The chain or a store did not answer: the page cannot be built now, try again later.
        return error_response(request, 503, str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in error.errors()
        )
        return error_response(request, 400, f"bad request: {problems}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        return error_response(request, error.status_code, str(error.detail))

    def data(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with lock:
            return build()

    # ------------------------------------------------------------ pages and their JSON twins

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def home_page() -> HTMLResponse:
        return html("home.html", **data(views.home))

    @app.get("/api/tasks", summary="Every task")
    def home_api() -> dict[str, Any]:
        return data(views.home)

    @app.get("/tasks/{task_id}", response_class=HTMLResponse, include_in_schema=False)
    def task_page(task_id: int = PathParam(ge=0, le=MAX_ID)) -> HTMLResponse:
        document = data(lambda: views.task(task_id)) | {"warning": syncer.task_warnings.get(task_id)}
        return html("task.html", **document, charts=_task_charts(document))

    @app.get("/api/tasks/{task_id}", summary="A task: parameters, rounds, accuracy, money check")
    def task_api(task_id: int = PathParam(ge=0, le=MAX_ID)) -> dict[str, Any]:
        return data(lambda: views.task(task_id)) | {"warning": syncer.task_warnings.get(task_id)}

    @app.get("/tasks/{task_id}/rounds/{round_index}", response_class=HTMLResponse, include_in_schema=False)
    def round_page(task_id: int = PathParam(ge=0, le=MAX_ID), round_index: int = PathParam(ge=0, le=65535)) -> Any:
        return html("round.html", **data(lambda: views.round(task_id, round_index)))

    @app.get("/api/tasks/{task_id}/rounds/{round_index}", summary="A round: submissions, verdicts, checkpoint")
    def round_api(task_id: int = PathParam(ge=0, le=MAX_ID), round_index: int = PathParam(ge=0, le=65535)) -> Any:
        return data(lambda: views.round(task_id, round_index))

    @app.get("/submissions/{submission}", response_class=HTMLResponse, include_in_schema=False)
    def submission_page(submission: str) -> HTMLResponse:
        value = parse_submission(submission)
        return html("submission.html", **data(lambda: views.submission(value)))

    @app.get("/api/submissions/{submission}", summary="A submission: artifacts, assignment, votes, outcome")
    def submission_api(submission: str) -> dict[str, Any]:
        value = parse_submission(submission)
        return data(lambda: views.submission(value))

    @app.get("/evidence/{cid}", response_class=HTMLResponse, include_in_schema=False)
    def evidence_page(cid: str) -> HTMLResponse:
        checked = parse_cid(cid)
        return html("evidence.html", **data(lambda: views.evidence(checked)))

    @app.get("/api/evidence/{cid}", summary="A validator's evidence document, fetched and checked against its CID")
    def evidence_api(cid: str) -> dict[str, Any]:
        checked = parse_cid(cid)
        return data(lambda: views.evidence(checked))

    @app.get("/accounts/{address}", response_class=HTMLResponse, include_in_schema=False)
    def account_page(address: str, page: int = Query(1, ge=1, le=1_000_000)) -> HTMLResponse:
        checked = parse_address(address)
        return html("account.html", **data(lambda: views.account(checked, page)))

    @app.get("/api/accounts/{address}", summary="An account: stake, credits, slashes, history")
    def account_api(address: str, page: int = Query(1, ge=1, le=1_000_000)) -> dict[str, Any]:
        checked = parse_address(address)
        return data(lambda: views.account(checked, page))

    @app.get("/validators", response_class=HTMLResponse, include_in_schema=False)
    def validators_page() -> HTMLResponse:
        return html("validators.html", **data(views.validators))

    @app.get("/api/validators", summary="Validators' agreement with final outcomes")
    def validators_api() -> dict[str, Any]:
        return data(views.validators)

    @app.get("/events", response_class=HTMLResponse, include_in_schema=False)
    def events_page(page: int = Query(1, ge=1, le=1_000_000)) -> HTMLResponse:
        return html("events.html", **data(lambda: views.events(page)))

    @app.get("/api/events", summary="Every indexed event, newest first, paginated")
    def events_api(page: int = Query(1, ge=1, le=1_000_000)) -> dict[str, Any]:
        return data(lambda: views.events(page))

    @app.get("/search", include_in_schema=False)
    def search(q: str = Query(..., min_length=1, max_length=200)) -> RedirectResponse:
        return RedirectResponse(data(lambda: {"to": views.search(q)})["to"], status_code=303)

    @app.get("/ipfs/{cid}", summary="An artifact's bytes from the explorer's store, checked against its CID")
    def artifact(cid: str) -> Response:
        checked = parse_cid(cid)
        try:
            body = store.get(checked)
        except CrucibleError as error:
            raise NotFound(f"{checked} is not available: {error}") from None
        return Response(body, media_type="application/octet-stream")

    @app.get("/healthz", summary="Liveness and the indexed block")
    def healthz() -> dict[str, Any]:
        return {"ok": syncer.error is None, "indexed_block": pages_index.last_block, "sync_error": syncer.error}

    return app


def _task_charts(document: dict[str, Any]) -> list[str]:
    rounds = document["rounds"]
    labels = [f"r{r['round']}" for r in rounds]
    accuracy = [r["accuracy"] for r in rounds]
    sampled = [r["sampled_accuracy"] for r in rounds]
    if document.get("final_checkpoint"):
        labels.append("final")
        accuracy.append(document["final_accuracy"])
        sampled.append(document["final_sampled_accuracy"])
    rewards = [int(r["rewards_wei"]) / 10 ** document["decimals"] for r in rounds]
    return [
        line_chart("Held-out accuracy of each round's checkpoint", labels, {"greedy": accuracy, "sampled": sampled}),
        line_chart("Trainer rewards per round (tokens)", labels[: len(rounds)], {"rewards": list(rewards)}),
    ]
