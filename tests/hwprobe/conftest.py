"""Fixtures for hwprobe tests: tiny random Qwen3-MoE models (hidden 64, 2 layers, 8 experts, top-2)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# The CPU is shared: one thread keeps tiny-model timings stable and avoids oversubscription.
torch.set_num_threads(1)



@pytest.fixture
def prompts_file(tmp_path):
    """A small Spec-Bench-format file (3 math questions, 1 summary)."""
    import json

    rows = [
        {"question_id": 401, "category": "math_reasoning", "turns": ["Tom has 3 apples and 3 pears. How many?"]},
        {"question_id": 402, "category": "math_reasoning", "turns": ["A cat is a cat is a cat. What is it?"]},
        {"question_id": 403, "category": "math_reasoning", "turns": ["One two three, one two three, one two"]},
        {"question_id": 241, "category": "summarization", "turns": ["Summarize: the the the end."]},
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
