"""Errors of every pipeline stage, as values with a source span.

Every problem found in a spec is a :class:`Diagnostic` that carries the :class:`~tilegen.model.Span`
it is about. Stages collect diagnostics and raise them together as one :class:`SpecError`; the
CLI prints each as ``file:line:col: error: message``, followed by the offending line and a caret,
the way compilers do.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen.model import Span, source_lines

#: At most this many diagnostics are reported for one spec; later ones are dropped.
MAX_DIAGNOSTICS = 20


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a spec: what is wrong (``message``) and where (``span``, 1-based)."""

    message: str
    span: Span

    def render(self, path: str, source: str) -> str:
        """Format as ``path:line:col: error: message`` plus the source line and a caret.

        ``source`` is the full spec text the span points into; the caret underlines the span
        on its first line (at least one character).
        """
        lines = source_lines(source)
        head = f"{path}:{self.span.line}:{self.span.column}: error: {self.message}"
        if not 1 <= self.span.line <= len(lines):
            return head
        text = lines[self.span.line - 1].expandtabs(1)
        width = 1
        if self.span.end_line == self.span.line and self.span.end_column > self.span.column:
            width = self.span.end_column - self.span.column
        caret = " " * (self.span.column - 1) + "^" + "~" * (width - 1)
        return f"{head}\n    {text}\n    {caret}"


class SpecError(Exception):
    """A spec could not be compiled; ``diagnostics`` lists every problem found (in order).

    ``path`` is the spec's display path and ``source`` its text, so :meth:`render` can print
    the ``file:line:col`` report without reading the file again.
    """

    def __init__(self, diagnostics: list[Diagnostic], path: str = "<spec>", source: str = ""):
        self.diagnostics = sorted(diagnostics, key=lambda d: (d.span.line, d.span.column))[
            :MAX_DIAGNOSTICS
        ]
        self.path = path
        self.source = source
        super().__init__(self.render())

    def at(self, path: str) -> SpecError:
        """The same diagnostics reported at ``path`` (the spec's path as the user typed it,
        where the spec was compiled under its stable display path)."""
        return SpecError(self.diagnostics, path, self.source)

    def render(self) -> str:
        """All diagnostics, one ``file:line:col: error: ...`` block each."""
        return "\n".join(d.render(self.path, self.source) for d in self.diagnostics)


class Collector:
    """Accumulates diagnostics during one stage; :meth:`raise_if_any` ends the stage."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def error(self, message: str, span: Span) -> None:
        """Record one problem at ``span``."""
        self.diagnostics.append(Diagnostic(message, span))

    def raise_if_any(self, path: str, source: str) -> None:
        """Raise :class:`SpecError` with everything recorded so far, if anything was."""
        if self.diagnostics:
            raise SpecError(self.diagnostics, path, source)
