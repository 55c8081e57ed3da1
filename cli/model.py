"""`crucible model init|publish|eval`."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.output import emit_json, key_value_table, stderr, stdout
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from protocol.ml.envs.spec import EnvSpec

app = typer.Typer(no_args_is_help=True, help="Make, publish and evaluate models.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
# Warm-up steps per size: enough for a partly right model (RL needs a signal), little enough to be quick.
WARMUP_STEPS = {"tiny": 600, "small": 600, "base": 600}


def _spec(env: str) -> EnvSpec:
    """An environment name, or a spec file."""
    from protocol.ml.envs.spec import default_spec, load_spec_file

    path = Path(env)
    if env.endswith(".json") or path.exists():
        return load_spec_file(path)
    return default_spec(env)


@app.command()
def init(
    env: str = typer.Option(..., "--env", help="Environment name or spec file the model is warmed up on."),
    out: Path = typer.Option(..., "--out", help="New folder for the model (must not exist or be empty)."),
    size: str = typer.Option("tiny", "--size", help="tiny, small or base."),
    steps: int = typer.Option(None, "--steps", help="Warm-up steps (default: by size)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the initial weights and the warm-up problems."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    json_output: bool = JSON,
) -> None:
    """Create a model with a character tokenizer and warm it up with a short supervised run."""
    from protocol.ml.evaluation import evaluate
    from protocol.ml.model import SIZES, checked_device, parameter_count, save_folder
    from protocol.ml.training import initial_model

    if size not in SIZES:
        raise ConfigError(f"unknown model size {size!r}: one of {', '.join(SIZES)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder: nothing was written")
    steps = WARMUP_STEPS[size] if steps is None else steps
    if steps < 0:
        raise ConfigError(f"--steps must be at least 0, got {steps}")
    spec = _spec(env)
    started = time.perf_counter()
    from protocol.runtime.reporter import Reporter

    with Reporter("model", json_output, stderr).progress("warming up", steps) as advance:
        model, tokenizer, loss = initial_model(
            spec.env(), size, steps, seed, checked_device(device), on_step=lambda step, value: advance(1)
        )
    warmup_s = time.perf_counter() - started
    with Reporter("model", json_output, stderr).progress("held-out answers", 2 * spec.eval_size) as advance:
        result = evaluate(model, tokenizer, spec, on_answers=advance)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".crucible-model-", dir=out.parent) as scratch:
        save_folder(model.cpu(), Path(scratch) / "model")
        if out.exists():
            out.rmdir()
        shutil.move(str(Path(scratch) / "model"), out)
    document = {
        "out": str(out),
        "environment": spec.environment,
        "size": size,
        "parameters": parameter_count(model),
        "steps": steps,
        "loss": round(loss, 4) if steps else None,
        "warmup_s": round(warmup_s, 1),
        "accuracy": result.accuracy,
        "mean_reward": round(result.mean_reward, 4),
        "sampled_accuracy": result.sampled_accuracy,
    }
    if json_output:
        emit_json(document)
    else:
        stdout.print(key_value_table(f"Model in {out}", list(document.items())))


@app.command("import")
def import_(
    source: str = typer.Argument(..., help="A Hugging Face model folder, a .gguf file, or a packaged model (smollm2)."),
    out: Path = typer.Option(..., "--out", help="New folder for the clean model (must not exist or be empty)."),
    topk: int = typer.Option(128, "--topk", help="TOPLOC top-k the model must support (its hidden size at least)."),
    json_output: bool = JSON,
) -> None:
    """Write a local model as a clean folder: config, float32 safetensors, tokenizer, chat template."""
    from protocol.ml.importing import import_model
    from protocol.runtime.reporter import Reporter

    with Reporter("model", json_output, stderr).progress(f"importing {source}", 1) as advance:
        document = import_model(source, out, topk)
        advance(1)
    if json_output:
        emit_json(document)
    else:
        stdout.print(key_value_table(f"Model in {out}", list(document.items())))


@app.command()
def publish(
    folder: Path = typer.Argument(..., help="A Hugging Face model folder."),
    to: str = typer.Option(None, "--to", help="A local store folder or relay URLs (default: the local store)."),
    account: str = typer.Option("dev0", "--account", help="Who signs relay uploads."),
    json_output: bool = JSON,
) -> None:
    """Store a model folder as a checkpoint manifest and print its CID."""
    from protocol.accounts import load_signer
    from protocol.artifacts.backends import open_store, relay_urls
    from protocol.ml.model import publish as publish_model

    signer = load_signer(account) if to and relay_urls(to) else None
    cid = publish_model(folder, open_store(to, signer))
    if json_output:
        emit_json({"cid": cid})
    else:
        stdout.print(cid)


@app.command("eval")
def eval_(
    model: str = typer.Argument(..., help="A checkpoint CID, a model folder or a packaged model (smollm2)."),
    env: str = typer.Option(..., "--env", help="Environment name or spec file."),
    problems: int = typer.Option(None, "--problems", help="Held-out problems (default: the spec's eval_size)."),
    source: str = typer.Option(None, "--from", help="Where a CID is fetched from: a store folder or relay URLs."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    json_output: bool = JSON,
) -> None:
    """Report held-out accuracy of a model on an environment."""
    from protocol.artifacts.backends import open_store
    from protocol.ml.evaluation import evaluate
    from protocol.ml.importing import PACKAGED, model_folder
    from protocol.ml.model import checked_device, load_model
    from protocol.runtime.reporter import Reporter

    spec = _spec(env)
    if problems is not None and problems < 1:
        raise ConfigError(f"--problems must be at least 1, got {problems}")
    if model in PACKAGED:
        model = str(model_folder(model))
    with stderr.status(f"loading {model}", spinner="dots"):
        loaded = load_model(model, open_store(source), checked_device(device))
    answers = 2 * (problems or spec.eval_size)
    with Reporter("model", json_output, stderr).progress("held-out answers", answers) as advance:
        result = evaluate(loaded.model, loaded.tokenizer, spec, problems, on_answers=advance)
    document = {
        "accuracy": result.accuracy,
        "mean_reward": result.mean_reward,
        "sampled_accuracy": result.sampled_accuracy,
        "sampled_mean_reward": result.sampled_mean_reward,
        "problems": result.problems,
    }
    if json_output:
        emit_json(document)
    else:
        figures = f"sampled at the task's temperature {result.sampled_accuracy:.3f}, {result.problems} problems"
        stdout.print(f"held-out accuracy {result.accuracy:.3f} greedy ({figures})")
