"""Spec-Bench prompts (JSONL: ``question_id``, ``category``, ``turns``), checked line by line.

Only the first turn of each question is used (batch-1 single-turn decoding,
as in SpecFit App. B).  Malformed lines are reported with their numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hwprobe.cli import HwprobeError

# Spec-Bench category -> the dataset name traces use
DATASETS = {"math_reasoning": "gsm8k", "summarization": "cnndm", "translation": "wmt14",
            "qa": "natural_questions", "rag": "rag", "mt_bench": "mt_bench"}


@dataclass(frozen=True)
class Prompt:
    question_id: str
    category: str
    text: str
    line: int

    @property
    def dataset(self) -> str:
        return DATASETS.get(self.category, self.category)


def read_prompts(path, category: str | None = None, *, limit: int | None = None,
                 offset: int = 0) -> list[Prompt]:
    """Parse the file (every line must be valid), then filter by category and slice."""
    path = Path(path)
    if not path.is_file():
        raise HwprobeError(f"prompts file {str(path)!r} does not exist")
    problems, prompts, seen = [], [], set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise HwprobeError(f"{path}: not UTF-8 text") from None
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            d = json.loads(raw)
        except json.JSONDecodeError as exc:
            problems.append(f"line {no}: not JSON ({exc.msg})")
            continue
        if not isinstance(d, dict):
            problems.append(f"line {no}: not a JSON object")
            continue
        missing = [k for k in ("question_id", "category", "turns") if k not in d]
        if missing:
            problems.append(f"line {no}: missing {', '.join(missing)}")
            continue
        turns = d["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            problems.append(f"line {no}: 'turns' must be a non-empty list of strings")
            continue
        qid = str(d["question_id"])
        if qid in seen:
            problems.append(f"line {no}: question_id {qid!r} repeated")
            continue
        seen.add(qid)
        prompts.append(Prompt(qid, str(d["category"]), turns[0], no))
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise HwprobeError(f"{path}: malformed lines: {'; '.join(problems[:5])}{more}")
    if category is not None:
        cats = sorted({p.category for p in prompts})
        prompts = [p for p in prompts if p.category == category]
        if not prompts:
            raise HwprobeError(f"{path}: no prompts in category {category!r}; categories: {', '.join(cats)}")
    if offset < 0 or (limit is not None and limit < 1):
        raise HwprobeError("--offset must be >= 0 and --limit >= 1")
    prompts = prompts[offset: None if limit is None else offset + limit]
    if not prompts:
        raise HwprobeError(f"{path}: no prompts left after --offset {offset}")
    return prompts
