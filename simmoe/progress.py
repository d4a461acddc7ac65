"""Progress bars: rich's, or one that shows nothing (``--no-progress``, a pipe) with the same methods."""

from __future__ import annotations

from typing import Any


class NoProgress:
    """Stands in for ``rich.progress.Progress`` where no bar is wanted: every call does nothing."""

    def __enter__(self) -> NoProgress:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def advance(self, *a: Any, **k: Any) -> None:
        pass

    def update(self, *a: Any, **k: Any) -> None:
        pass


def bar(disabled: bool, description_width: int, unit: str, **kwargs: Any) -> Any:
    """A transient bar (description, bar, done/total ``unit``, elapsed time), or :class:`NoProgress`."""
    if disabled:
        return NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"{{task.description:<{description_width}}}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(unit), TimeElapsedColumn(), transient=True, **kwargs)
