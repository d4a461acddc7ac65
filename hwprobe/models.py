"""Load the target (and draft) models: from a local Hugging Face directory, the
embedded tiny model, or a named config with random weights.

No weights are ever downloaded.  A random-weight model has real shapes, so real
copy and compute times, but its routes and acceptance are meaningless; the
returned :class:`LoadedModel` says so in ``weights``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from hwprobe.cli import HwprobeError

TRAINED = "trained"
RANDOM = "random (routes and acceptance meaningless)"
# Small enough for CPU tests: hidden 64, 2 layers, 8 experts, top-2 (the tests' Qwen3-MoE).
_TINY_RANDOM = dict(
    vocab_size=320, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
    num_experts_per_tok=2, norm_topk_prob=True, num_hidden_layers=2, max_position_embeddings=4096,
    tie_word_embeddings=False,
)


def supported_targets() -> tuple[str, ...]:
    """Model types listed (and tested) in :mod:`hwprobe.architectures`; others with the experts interface load too."""
    from hwprobe.architectures import ARCHITECTURES

    return tuple(ARCHITECTURES)


SUPPORTED_TARGETS = supported_targets()


def named_config_names() -> list[str]:
    from hwprobe.architectures import named_config_names as names

    return names()


def named_config(name: str):
    """The transformers config of a named random-weight shape (``hwprobe models`` lists them).

    ``tiny-random`` is the tiny Qwen3-MoE of the tests (2 layers); ``tiny-<type>``
    the tiny config of any listed architecture; ``<model>-<N>layers`` the layer
    shapes of a published checkpoint with N decoder layers.
    """
    from transformers import AutoConfig, Qwen3MoeConfig

    from hwprobe.architectures import resolve_named

    if name == "tiny-random":
        return Qwen3MoeConfig(**_TINY_RANDOM)
    found = resolve_named(name)
    if found is None:
        raise HwprobeError(f"unknown config {name!r}; known: {', '.join(named_config_names())}")
    model_type, kwargs = found
    return AutoConfig.for_model(model_type, **kwargs)


def tiny_dir(kind: str) -> Path:
    """Directory of the embedded tiny ``target`` or ``drafter``; HwprobeError when it is missing."""
    try:
        import hwprobe.tiny as tiny
    except ImportError:
        tiny = None
    fn = getattr(tiny, f"{kind}_dir", None)
    if fn is not None:
        try:
            return Path(fn())
        except FileNotFoundError as exc:      # the tiny package says what is missing and how to fix it
            raise HwprobeError(str(exc)) from None
    import hwprobe

    return Path(hwprobe.__file__).parent / "tiny" / kind


def resolve_model_dir(spec: str, kind: str = "target") -> Path:
    """``tiny`` or a directory path → a checked model directory."""
    path = tiny_dir(kind) if spec == "tiny" else Path(spec)
    if path.is_file():
        raise HwprobeError(f"{str(path)!r} is a file; give a model directory (a folder with config.json "
                           "and weights), or 'tiny'")
    if not path.is_dir():
        hint = " (the embedded tiny model has not been trained yet)" if spec == "tiny" else ""
        raise HwprobeError(f"model directory {str(path)!r} does not exist{hint}")
    if not (path / "config.json").is_file():
        raise HwprobeError(f"{path}: no config.json (expected a Hugging Face model directory)")
    weights = [*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin")]
    if not weights:
        raise HwprobeError(f"{path}: no weight files (*.safetensors or pytorch_model*.bin)")
    return path


def read_model_type(path: Path) -> str:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise HwprobeError(f"{path / 'config.json'}: unreadable: {exc}") from None
    return str(cfg.get("model_type", ""))


class ByteTokenizer:
    """UTF-8 bytes offset by 3 (0 = pad, 1 = bos, 2 = eos): for random-weight models without a tokenizer."""

    name = "bytes"
    eos_token_id = 2

    def __init__(self, vocab_size: int):
        if vocab_size < 259:
            raise HwprobeError(f"vocabulary of {vocab_size} is too small for the byte tokenizer (needs 259)")

    def encode_prompt(self, text: str) -> list[int]:
        return [1] + [b + 3 for b in text.encode("utf-8")]

    def decode(self, ids) -> str:
        return bytes(int(i) - 3 for i in ids if 3 <= int(i) < 259).decode("utf-8", errors="replace")


class HFTokenizer:
    """A local Hugging Face tokenizer; prompts use the chat template when the directory has one."""

    def __init__(self, path: Path):
        from transformers import AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:  # noqa: BLE001 - any loader failure is a bad directory
            raise HwprobeError(f"{path}: cannot load the tokenizer: {exc}") from None
        self.name = str(path)
        self.eos_token_id = self.tok.eos_token_id

    def encode_prompt(self, text: str) -> list[int]:
        if getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        return [int(i) for i in self.tok.encode(text)]

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids])


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str          # what provenance calls it
    weights: str       # TRAINED or RANDOM
    source: str        # directory or config name


def pick_attn(model_type: str, requested: str = "auto") -> str:
    """The attention implementation: ``auto`` is sdpa unless the architecture needs another (GPT-OSS: eager)."""
    from hwprobe.architectures import ARCHITECTURES

    arch = ARCHITECTURES.get(model_type)
    needed = arch.attn if arch is not None else "sdpa"
    if requested in (None, "", "auto"):
        return needed
    if needed == "eager" and requested == "sdpa":
        label = arch.label if arch is not None else model_type
        raise HwprobeError(f"{label} ({model_type}) has no sdpa attention in transformers "
                           "(attention sinks); use --attn eager or auto")
    return requested


def check_architecture(path: Path):
    """The config of the model directory, after checking that its architecture uses the experts interface.

    Reads ``config.json`` only (no weights): transformers' causal-LM class for
    the model type must contain an experts module decorated with
    ``use_experts_implementation``, through which the offload backend works.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_file = path / "config.json"
    mtype = read_model_type(path)
    try:
        config = AutoConfig.from_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001 - unknown model_type, malformed fields: a bad file either way
        raise HwprobeError(f"{cfg_file}: cannot read the config ({_one_line(exc)})") from None
    try:
        cls = AutoModelForCausalLM._model_mapping[type(config)]
    except KeyError:
        raise HwprobeError(f"{cfg_file}: architecture {mtype!r} is not a causal language model in transformers "
                           f"{_transformers_version()}") from None
    if not cls._can_set_experts_implementation():
        raise HwprobeError(f"{cfg_file}: architecture {mtype!r} has no experts module using transformers' experts "
                           "interface (use_experts_implementation), through which hwprobe offloads experts; "
                           f"tested: {', '.join(SUPPORTED_TARGETS)} (hwprobe models)")
    return config


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _quiet_loading(quiet: bool) -> None:
    """transformers draws loading bars on stderr; ``--quiet`` turns them off (and its info messages)."""
    from transformers.utils import logging as hf_logging

    if quiet:
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    else:
        hf_logging.enable_progress_bar()


def load_target(spec: str | None = None, *, config: str | None = None,
                dtype: torch.dtype = torch.float32, seed: int = 0,
                attn_implementation: str = "auto", quiet: bool = False) -> LoadedModel:
    """Load the target MoE model on the CPU (the offload backend moves it).

    ``spec``: a model directory or ``tiny``; ``config``: a named config with
    random weights (exactly one of the two).  Any architecture whose experts
    use transformers' experts interface loads; a directory whose weights do
    not match its config (missing tensors, other shapes, a truncated file)
    is refused with one line naming the file.
    """
    from transformers import AutoModelForCausalLM

    if (spec is None) == (config is None):
        raise HwprobeError("give exactly one of --model DIR|tiny and --config NAME")
    _quiet_loading(quiet)
    if config is not None:
        cfg = named_config(config)
        attn = pick_attn(cfg.model_type, attn_implementation)
        cfg._attn_implementation = attn
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
        model.eval()
        return LoadedModel(model, ByteTokenizer(cfg.vocab_size), config, RANDOM, config)
    path = resolve_model_dir(spec, "target")
    hf_config = check_architecture(path)
    attn = pick_attn(hf_config.model_type, attn_implementation)
    weights = sorted(p.name for p in [*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin")])
    where = path / weights[0] if len(weights) == 1 else f"{path} ({', '.join(weights)})"
    try:
        model, info = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation=attn,
                                                           output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as exc:  # noqa: BLE001 - truncated files, shape mismatches, header errors: one line
        raise HwprobeError(f"{where}: cannot load the weights ({_one_line(exc)})") from None
    missing = list(info.get("missing_keys") or [])
    mismatched = list(info.get("mismatched_keys") or [])
    if missing or mismatched:
        parts = []
        if missing:
            parts.append(f"{len(missing)} tensors missing (e.g. {sorted(missing)[0]})")
        if mismatched:
            first = sorted(mismatched)[0]
            parts.append(f"{len(mismatched)} of another shape (e.g. {first[0] if isinstance(first, tuple) else first})")
        raise HwprobeError(f"{where}: the weights do not match {path / 'config.json'}: {'; '.join(parts)}")
    model.eval()
    tok = HFTokenizer(path) if any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")) \
        else ByteTokenizer(model.config.vocab_size)
    return LoadedModel(model, tok, "tiny" if spec == "tiny" else path.name, TRAINED, str(path))


def load_causal_lm(path: Path, dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa"):
    """A draft language model from a local directory (any causal LM architecture)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                     attn_implementation=attn_implementation)
    except (OSError, ValueError, RuntimeError) as exc:
        raise HwprobeError(f"{path}: cannot load the draft model: {exc}") from None
    return model.eval()


def is_interface_experts(module) -> bool:
    """Whether ``module`` is an experts module decorated with ``use_experts_implementation``."""
    return (hasattr(module, "_is_expert_parallel") and hasattr(module, "is_transposed")
            and hasattr(module, "has_gate") and callable(getattr(type(module), "_apply_gate", None)))


def experts_modules(model) -> list[tuple[int, str, torch.nn.Module]]:
    """``(decoder layer index, module name, experts module)`` of every MoE layer, in order.

    An experts module is one decorated with transformers'
    ``use_experts_implementation``; layers without one (DeepSeek's first
    dense layers, Jamba's dense layers, mlp_only_layers) are dense.
    """
    out = []
    for name, mod in model.named_modules():
        if is_interface_experts(mod):
            m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            out.append((int(m.group(1)) if m else len(out), name, mod))
    if not out:
        raise HwprobeError(f"{type(model).__name__}: no experts module using transformers' experts interface "
                           "(use_experts_implementation)")
    return out


def moe_blocks(model) -> list[tuple[int, torch.nn.Module]]:
    """``(decoder layer index, experts module)`` of every MoE layer, in order."""
    return [(i, m) for i, _, m in experts_modules(model)]


def decoder_layer_count(model) -> int:
    """Number of decoder layers (dense and MoE) of the model's layer list."""
    name = experts_modules(model)[0][1]
    head = name[: name.index("layers.") + len("layers")] if "layers." in name else None
    try:
        return len(model.get_submodule(head)) if head else len(experts_modules(model))
    except (AttributeError, TypeError):
        return int(getattr(model.config.get_text_config(), "num_hidden_layers", 0)) or len(experts_modules(model))


def top_k_of(model) -> int:
    """Experts per token, from the config (``num_experts_per_tok`` and its aliases)."""
    cfg = model.config.get_text_config()
    k = getattr(cfg, "num_experts_per_tok", None)
    if isinstance(k, (list, tuple)):
        ks = set(int(x) for x in k)
        if len(ks) != 1:
            raise HwprobeError(f"{cfg.model_type}: layers route to different numbers of experts {sorted(ks)}; "
                               "a trace holds one top-k")
        k = ks.pop()
    if k is None:
        raise HwprobeError(f"{cfg.model_type}: the config has no num_experts_per_tok")
    return int(k)


def moe_geometry(model, *, expert_bytes: int, name: str):
    """The trace geometry: MoE layers only (routes), and which decoder layers they are."""
    from simmoe.trace import ModelGeometry

    found = experts_modules(model)
    experts = {int(m.num_experts) for _, _, m in found}
    if len(experts) != 1:
        raise HwprobeError(f"{name}: MoE layers hold different numbers of experts {sorted(experts)}")
    return ModelGeometry(len(found), experts.pop(), top_k_of(model), expert_bytes=expert_bytes, name=name,
                         moe_layers=tuple(i for i, _, _ in found), decoder_layers=decoder_layer_count(model))


def resident_parts(model, geometry) -> dict:
    """What stays on the device besides the expert cache, for provenance: dense layers and shared experts."""
    shared = set()
    for _, name, _ in experts_modules(model):
        block = name.rsplit(".", 1)[0]
        for child, _ in model.get_submodule(block).named_children():
            if "shared" in child:
                shared.add(child)
    return {"dense_layers": list(geometry.dense_layers), "shared_experts": sorted(shared),
            "always": "attention, norms, routers, embeddings and head"}


def target_tokenizer(spec: str | None, config: str | None):
    """The target's tokenizer without loading its weights (prompt lengths are checked before loading)."""
    if config is not None:
        return ByteTokenizer(named_config(config).vocab_size)
    path = resolve_model_dir(spec, "target")
    if any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        return HFTokenizer(path)
    try:
        cfg = json.loads((path / "config.json").read_text())
        vocab = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size"))
    except (OSError, ValueError, TypeError, AttributeError):
        raise HwprobeError(f"{path / 'config.json'}: no vocab_size (needed by the byte tokenizer)") from None
    return ByteTokenizer(vocab)
