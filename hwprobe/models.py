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

SUPPORTED_TARGETS = ("qwen3_moe",)
TRAINED = "trained"
RANDOM = "random (routes and acceptance meaningless)"

# Qwen3-30B-A3B(-Instruct-2507) layer shapes; only the layer count varies.
_QWEN3_30B_A3B = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
    num_experts_per_tok=8, norm_topk_prob=True, rms_norm_eps=1e-6, max_position_embeddings=40960,
    tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
)
# Small enough for CPU tests: hidden 64, 2 layers, 8 experts, top-2.
_TINY_RANDOM = dict(
    vocab_size=320, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
    num_experts_per_tok=2, norm_topk_prob=True, num_hidden_layers=2, max_position_embeddings=4096,
    tie_word_embeddings=False,
)


def named_config_names() -> list[str]:
    return ["tiny-random", "qwen3-30b-a3b-<N>layers (e.g. qwen3-30b-a3b-2layers)"]


def named_config(name: str):
    """A ``Qwen3MoeConfig`` for a named shape: ``tiny-random`` or ``qwen3-30b-a3b-<N>layers``."""
    from transformers import Qwen3MoeConfig

    if name == "tiny-random":
        return Qwen3MoeConfig(**_TINY_RANDOM)
    m = re.fullmatch(r"qwen3-30b-a3b-(\d+)layers?", name)
    if m and 1 <= int(m.group(1)) <= 48:
        return Qwen3MoeConfig(num_hidden_layers=int(m.group(1)), **_QWEN3_30B_A3B)
    raise HwprobeError(f"unknown config {name!r}; known: {', '.join(named_config_names())}")


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


def load_target(spec: str | None = None, *, config: str | None = None,
                dtype: torch.dtype = torch.float32, seed: int = 0,
                attn_implementation: str = "sdpa") -> LoadedModel:
    """Load the target MoE model on the CPU (the offload backend moves it).

    ``spec``: a model directory or ``tiny``; ``config``: a named config with
    random weights (exactly one of the two).
    """
    from transformers import AutoModelForCausalLM

    if (spec is None) == (config is None):
        raise HwprobeError("give exactly one of --model DIR|tiny and --config NAME")
    if config is not None:
        cfg = named_config(config)
        cfg._attn_implementation = attn_implementation
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn_implementation)
        model.eval()
        return LoadedModel(model, ByteTokenizer(cfg.vocab_size), config, RANDOM, config)
    path = resolve_model_dir(spec, "target")
    mtype = read_model_type(path)
    if mtype not in SUPPORTED_TARGETS:
        raise HwprobeError(f"{path}: unsupported architecture {mtype!r}; supported: {', '.join(SUPPORTED_TARGETS)}")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                     attn_implementation=attn_implementation)
    except (OSError, ValueError, RuntimeError) as exc:
        raise HwprobeError(f"{path}: cannot load the model: {exc}") from None
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


def moe_blocks(model) -> list[tuple[int, torch.nn.Module]]:
    """(decoder layer index, sparse MoE block) for every MoE layer, in order."""
    out = []
    for i, layer in enumerate(model.model.layers):
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "experts") and hasattr(mlp, "gate"):
            out.append((i, mlp))
    if not out:
        raise HwprobeError(f"{type(model).__name__}: no MoE layers found (expected mlp.experts and mlp.gate)")
    return out
