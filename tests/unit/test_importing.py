"""`crucible model import`: a local folder or GGUF file becomes a clean folder every role loads alike;
bad input is one line and nothing written. The GGUF path itself runs in `make setup` (SmolLM2's
conversion), whose folder the real-model tests use.

Shown failing on a broken version: without the `len(tokenizer) > vocab_size` check a tokenizer from
another model is imported and `test_bad_sources_are_one_line_and_write_nothing` fails on that case."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.models import smollm2_folder

from protocol.errors import ConfigError
from protocol.ml.importing import import_model
from protocol.ml.model import TOKENIZER_FILES, load_folder, save_folder


def _tokenizer_files(into: Path) -> None:
    for name in TOKENIZER_FILES:
        if (smollm2_folder() / name).is_file():
            shutil.copy(smollm2_folder() / name, into / name)


def test_a_folder_imports_as_the_same_model(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    report = import_model(str(smollm2_folder()), out)
    assert report["architecture"] == "LlamaForCausalLM" and report["hidden_size"] == 576 and report["chat_template"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()
    }
    original, imported = load_folder(smollm2_folder()), load_folder(out)
    ids = torch.tensor([[1, 504, 3458, 314, 216, 34, 28, 35, 47]])
    with torch.inference_mode():
        assert torch.equal(original.model(input_ids=ids).logits, imported.model(input_ids=ids).logits)


def test_bad_sources_are_one_line_and_write_nothing(tmp_path: Path, tiny_folder: Path) -> None:
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    _tokenizer_files(unknown)
    small_hidden = tmp_path / "small"
    shutil.copytree(tiny_folder, small_hidden)
    _tokenizer_files(small_hidden)  # 49,152 tokens for a model of 47
    no_tokenizer = tiny_folder
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    cases = [
        (str(tmp_path / "missing.gguf"), tmp_path / "a", "no such GGUF file"),
        (str(tmp_path), tmp_path / "b", "not a Hugging Face model folder (no config.json)"),
        (str(no_tokenizer), tmp_path / "c", "no usable tokenizer"),
        (str(unknown), tmp_path / "d", "cannot load a causal LM"),
        (str(small_hidden), tmp_path / "e", "more than the model's vocabulary of 47"),
        (str(smollm2_folder()), busy, "exists and is not an empty folder"),
        ("nothing-here", tmp_path / "f", "is not a model folder, a .gguf file or a packaged model"),
    ]
    for source, out, fragment in cases:
        with pytest.raises(ConfigError) as caught:
            import_model(source, out)
        assert fragment in str(caught.value) and "\n" not in str(caught.value), (source, str(caught.value))
        assert not out.exists() or out == busy
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    with pytest.raises(ConfigError, match="hidden size 576 is below TOPLOC's top-k 1024"):
        import_model(str(smollm2_folder()), tmp_path / "g", min_hidden=1024)
    assert not (tmp_path / "g").exists()


@pytest.fixture
def tiny_folder(tmp_path: Path, tiny: object) -> Path:
    folder = tmp_path / "tiny"
    save_folder(tiny.model, folder)  # type: ignore[attr-defined]
    return folder
