"""The real model the tests use: SmolLM2-135M-Instruct, converted by `make setup` into the model cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.ml.importing import PACKAGED, model_cache


def smollm2_folder() -> Path:
    """The converted SmolLM2 folder; the test skips, saying why, where `make setup` has not made it."""
    folder = model_cache() / PACKAGED["smollm2"].folder
    if not (folder / "config.json").is_file():
        pytest.skip(f"no SmolLM2 folder at {folder}: `make setup` converts it (CRUCIBLE_MODEL_CACHE sets where)")
    return folder
