"""The embedded tiny model: a trained Qwen3-MoE target, a dense Qwen3 drafter and an EAGLE-3 head.

Both are plain Hugging Face folders (``config.json``, ``model.safetensors``,
``tokenizer.json``), loadable with ``AutoModelForCausalLM.from_pretrained``
and ``PreTrainedTokenizerFast.from_pretrained``; they share one tokenizer.
They were trained on CPU by ``python -m hwprobe.training.train_tiny --out
hwprobe/tiny/model`` on Python standard-library source (see
``docs/tiny-model.md``).  ``hwprobe ... --model tiny`` resolves here.  The
EAGLE-3 head (``model/eagle3``, the SafeAILab checkpoint layout) was trained on
the frozen target by ``python -m hwprobe.training.train_eagle3``;
``--drafter eagle3 --drafter-dir tiny`` resolves to it.

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_DIR = Path(__file__).parent / "model"
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")


class TinyModelMissing(FileNotFoundError):
    """The embedded checkpoint is absent or incomplete."""


def _checked(kind: str, required=_REQUIRED, retrain: str = "train_tiny --out hwprobe/tiny/model") -> Path:
    d = MODEL_DIR / kind
    missing = [name for name in required if not (d / name).is_file()]
    if missing:
        raise TinyModelMissing(
            f"the embedded tiny {kind} is missing {', '.join(missing)} in {d}; "
            f"retrain it with: python -m hwprobe.training.{retrain}")
    return d


def target_dir() -> Path:
    """Folder of the tiny Qwen3-MoE target (4 layers, 32 experts, top-4)."""
    return _checked("target")


def drafter_dir() -> Path:
    """Folder of the tiny dense Qwen3 drafter that shares the target's tokenizer."""
    return _checked("drafter")


def eagle3_dir() -> Path:
    """Folder of the EAGLE-3 draft head trained for the tiny target (it uses the target's tokenizer)."""
    return _checked("eagle3", ("config.json", "model.safetensors"),
                    "train_eagle3 --out hwprobe/tiny/model/eagle3")


def training_manifest() -> dict:
    """What the training run recorded: plan, seed, corpus hash, held-out losses."""
    path = MODEL_DIR / "manifest.json"
    if not path.is_file():
        raise TinyModelMissing(f"the embedded tiny model's manifest is missing: {path}")
    return json.loads(path.read_text())
