"""Data shipped with hwprobe: Spec-Bench's question file (Apache-2.0, see NOTICE)."""

from pathlib import Path

SPEC_BENCH_QUESTIONS = Path(__file__).with_name("spec_bench_question.jsonl")
