"""Models: Llama-architecture causal LMs made locally, saved as folders or checkpoint manifests.

A model is loaded from a Hugging Face folder or from a checkpoint manifest's CID; both give the
model and its tokenizer. torch and transformers load on first use.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.artifacts.manifest import load_hf_model, load_manifest, save_hf_model
from protocol.artifacts.store import Store
from protocol.errors import ArtifactError, ConfigError
from protocol.ml.tokenizer import CharTokenizer, HuggingFaceTokenizer, Tokenizer, tokenizer_from_config
from protocol.values import checked_cid

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# hidden size, layers, attention heads, MLP width. The hidden size is at least TOPLOC's top-k (128).
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (128, 2, 4, 512),
    "small": (256, 4, 8, 1024),
    "base": (512, 8, 8, 2048),
}
MAX_POSITIONS = 256
# What a Hugging Face tokenizer is made of: a checkpoint manifest carries those present, by CID.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


def quiet_transformers() -> None:
    """No hub access, no tqdm bars of transformers' own (we draw ours), warnings only as errors."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's own bar
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


@dataclass
class LoadedModel:
    """A model ready to use, its tokenizer, and the checkpoint CID it came from (None for a folder)."""

    model: PreTrainedModel
    tokenizer: Tokenizer
    checkpoint_cid: str | None


def create_model(size: str, tokenizer: CharTokenizer, seed: int) -> Any:
    """Returns a fresh Llama model of a named size, initialised from `seed`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    quiet_transformers()

    if size not in SIZES:
        raise ConfigError(f"unknown model size {size!r}: one of {', '.join(SIZES)}")
    hidden, layers, heads, width = SIZES[size]
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        intermediate_size=width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_id,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
    )
    config.crucible_tokenizer = tokenizer.config()
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # initialisation draws from torch's generator: seed it, then restore it
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(generator_state)
    return model.eval()


def save_folder(model: PreTrainedModel, folder: Path) -> None:
    """Writes the model as a Hugging Face folder (config.json + safetensors)."""
    quiet_transformers()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))


def load_folder(folder: Path, device: str = "cpu") -> LoadedModel:
    """Loads a local Hugging Face causal LM folder and its tokenizer."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{folder} is not a Hugging Face model folder (no config.json)")
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load the model in {folder}: {str(error).splitlines()[0]}") from None
    tokenizer = tokenizer_from_config(model.config.to_dict(), folder)
    return LoadedModel(model.to(device).eval(), tokenizer, None)


def publish(folder: Path, store: Store) -> str:
    """Stores a model folder as a checkpoint manifest (tokenizer files by CID if not ours); returns its CID."""
    loaded = load_folder(folder)
    if isinstance(loaded.tokenizer, HuggingFaceTokenizer):
        files = {name: store.put((folder / name).read_bytes()) for name in TOKENIZER_FILES if (folder / name).is_file()}
        loaded.model.config.crucible_tokenizer = {"kind": "huggingface", "files": files}
    return save_hf_model(loaded.model, store)


def load_checkpoint(cid: str, store: Store, device: str = "cpu") -> LoadedModel:
    """Loads a checkpoint manifest (every shard checked against its CID) as a model and tokenizer."""
    quiet_transformers()
    manifest = load_manifest(checked_cid(cid, "checkpoint CID"), store)
    if manifest.kind != "checkpoint":
        raise ArtifactError(f"{cid} is an {manifest.kind} manifest, not a checkpoint")
    model = load_hf_model(cid, store, device).eval()
    recorded = (manifest.model_config_data or {}).get("crucible_tokenizer") or {}
    if recorded.get("kind") == "huggingface":
        with tempfile.TemporaryDirectory(prefix="crucible-tokenizer-") as tmp:
            for name, file_cid in dict(recorded.get("files", {})).items():
                if name not in TOKENIZER_FILES:
                    raise ArtifactError(f"checkpoint {cid} names an unexpected tokenizer file {name!r}")
                (Path(tmp) / name).write_bytes(store.get(file_cid))
            tokenizer: Tokenizer = HuggingFaceTokenizer(Path(tmp))
    else:
        tokenizer = tokenizer_from_config(manifest.model_config_data)
    return LoadedModel(model, tokenizer, cid)


class ModelCache:
    """The checkpoint a role is working with, kept loaded: a round's work, checks and aggregation all
    use the round's checkpoint, so it is loaded once and replaced when the round moves on."""

    def __init__(self, store: Store, device: str = "cpu") -> None:
        self.store = store
        self.device = device
        self._loaded: LoadedModel | None = None

    def get(self, checkpoint_cid: str) -> LoadedModel:
        """The checkpoint `checkpoint_cid`, loaded (and every shard checked) on first use."""
        if self._loaded is None or self._loaded.checkpoint_cid != checkpoint_cid:
            self._loaded = load_checkpoint(checkpoint_cid, self.store, self.device)
        return self._loaded


def load_model(source: str, store: Store, device: str = "cpu") -> LoadedModel:
    """Loads a model from a folder path or a checkpoint CID."""
    path = Path(source)
    if path.exists():
        return load_folder(path, device)
    if "/" in source or source.startswith("."):
        raise ConfigError(f"no such model folder: {source}")
    return load_checkpoint(source, store, device)


def parameter_count(model: PreTrainedModel) -> int:
    """Number of parameters."""
    return sum(parameter.numel() for parameter in model.parameters())


def checked_device(name: str) -> str:
    """A device name torch can use here: cpu, or cuda[:N] when a GPU is present."""
    import torch

    if name == "cpu":
        return name
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {name}: no CUDA device is available here")
        return name
    raise ConfigError(f"unknown device {name!r}: cpu or cuda")
