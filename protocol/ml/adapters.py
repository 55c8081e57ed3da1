"""LoRA adapters (with `peft`): attached for one local update, initialised from the work seed, carried
as an update artifact of their own tensors, and folded into the next full checkpoint by the outer step.

An adapter on a linear layer with weight W [out, in] is A [r, in] and B [out, r]; the layer computes
W x + (alpha / r) B A x. A starts from a uniform draw of a CPU generator seeded by the work seed
(peft's own bound, 1/sqrt(in)) and B at zero, so the adapted model starts as the checkpoint and a
validator rebuilds the very same start on any device. The update artifact names the tensors
`<module>.lora_A` and `<module>.lora_B`; the outer step adds the mean of (alpha / r) B A over the
included updates to `<module>.weight`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from protocol.errors import ConfigError, VerificationError
from protocol.ml.envs.spec import AdapterSettings, EnvSpec

if TYPE_CHECKING:
    import torch

_PEFT_PREFIX = "base_model.model."
_SUFFIXES = {"lora_A": ".lora_A.default.weight", "lora_B": ".lora_B.default.weight"}


def target_problem(module_names: list[str], settings: AdapterSettings) -> str | None:
    """Why the adapter cannot attach to a model with these module names (None when it can)."""
    leaves = {name.rpartition(".")[2] for name in module_names}
    missing = [target for target in settings.target_modules if target not in leaves]
    if missing:
        return f"LoRA target module {missing[0]!r} is not in the model"
    return None


def check_targets(model_config: dict[str, Any], settings: AdapterSettings) -> None:
    """Raises ConfigError when the model a config describes lacks a LoRA target module (the model is
    built on the meta device: no weights are made)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(model_config)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    problem = target_problem([name for name, _ in model.named_modules()], settings)
    if problem:
        raise ConfigError(problem)


def check_model_fits(model_config: dict[str, Any], spec: EnvSpec) -> None:
    """Raises ConfigError when a spec cannot work with the model a checkpoint's config describes: a
    hidden size below TOPLOC's top-k, or LoRA target modules the model does not have."""
    hidden = int(model_config.get("hidden_size") or 0)
    if hidden < spec.toploc.topk:
        raise ConfigError(f"the model's hidden size {hidden} is below the spec's TOPLOC top-k {spec.toploc.topk}")
    if spec.training.adapter.kind == "lora":
        check_targets(model_config, spec.training.adapter)


def seed_number(seed: bytes) -> int:
    """A torch generator seed (63 bits) from a 32-byte seed."""
    return int.from_bytes(seed[:8], "big") >> 1


@contextmanager
def attached(model: Any, settings: AdapterSettings, seed: bytes) -> Iterator[list[torch.nn.Parameter]]:
    """Attaches fresh LoRA adapters to `model` in place for the duration; yields their parameters (the
    only ones left trainable). On leaving, the adapters are removed and `model` is as it was."""
    import torch
    from peft import LoraConfig, get_peft_model

    problem = target_problem([name for name, _ in model.named_modules()], settings)
    if problem:
        raise ConfigError(problem)
    trainable = {name: parameter.requires_grad for name, parameter in model.named_parameters()}
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        target_modules=list(settings.target_modules),
        lora_dropout=0.0,
        bias="none",
    )
    with warnings.catch_warnings():  # peft asks transformers about gradient checkpointing by an old name
        warnings.simplefilter("ignore", FutureWarning)
        wrapped = get_peft_model(model, config)
    try:
        generator = torch.Generator().manual_seed(seed_number(seed))
        adapters = sorted((name, p) for name, p in wrapped.named_parameters() if ".lora_" in name)
        with torch.no_grad():
            for name, parameter in adapters:
                if ".lora_A." in name:
                    bound = 1.0 / math.sqrt(parameter.shape[1])
                    drawn = torch.rand(parameter.shape, generator=generator, dtype=torch.float32) * 2 - 1
                    parameter.copy_(drawn * bound)
                else:
                    parameter.zero_()
        yield [parameter for _, parameter in adapters]
    finally:
        wrapped.unload()
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(trainable.get(name, True))


def adapter_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The attached adapters' tensors (float32, detached), named `<module>.lora_A|lora_B`."""
    tensors = {}
    for name, parameter in model.named_parameters():
        for short, suffix in _SUFFIXES.items():
            if name.endswith(suffix):
                module = name.removesuffix(suffix)
                module = module.removeprefix(_PEFT_PREFIX)
                tensors[f"{module}.{short}"] = parameter.detach().float().clone()
    return tensors


def weight_deltas(update: dict[str, torch.Tensor], settings: AdapterSettings) -> dict[str, torch.Tensor]:
    """The full-weight change an adapter update makes: (alpha / r) B A for each adapted module,
    named `<module>.weight`."""
    deltas = {}
    scale = settings.alpha / settings.rank
    modules = sorted({name.rpartition(".")[0] for name in update})
    for module in modules:
        a, b = update.get(f"{module}.lora_A"), update.get(f"{module}.lora_B")
        if a is None or b is None or a.dim() != 2 or b.dim() != 2 or b.shape[1] != a.shape[0]:
            raise VerificationError(f"the adapter of {module} is not a matching lora_A, lora_B pair")
        deltas[f"{module}.weight"] = scale * (b.float() @ a.float())
    return deltas
