"""Layout of the generated SQL: indentation, nested levels of a query, wrapped lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from sync.sql.dialect import PostgresDialect


def indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


def subquery(d: PostgresDialect, level: str, alias: str) -> str:
    """FROM a nested level of the stage query, evaluated once per record (fenced where the
    dialect needs it), not re-expanded at each reference above."""
    fenced = f"{level}\n{d.subquery_fence}" if d.subquery_fence else level
    return f"FROM (\n{indent(fenced, 2)}\n) {alias}"


# How wide a list of a query's columns may be laid out (generated lines stay within 160).
WIDE = 150


@dataclass
class Chain:
    """A query as a chain of named steps, `WITH name AS (SELECT ... FROM <the step before> f), ...`,
    each evaluated once per record (fenced where the dialect needs it: PostgreSQL inlines a
    CTE read once, and the fence keeps its expressions from being re-expanded above it)."""

    d: PostgresDialect
    steps: list[tuple[str, str]] = field(default_factory=list)

    @property
    def last(self) -> str:
        return self.steps[-1][0]

    def add(self, name: str, select: str) -> None:
        fence = f" {self.d.subquery_fence}" if self.d.subquery_fence else ""
        self.steps.append((name, select + fence))

    def extend(self, name: str, values: dict[str, str]) -> None:
        """A step with every column of the last one and the named `values` over it (`f`)."""
        if values:
            named = packed(["f.*", *(f"{expr} AS {self.d.q(alias)}" for alias, expr in values.items())], " " * 7, WIDE)
            self.add(name, f"SELECT {named}\nFROM {self.last} f")

    def extend_levels(self, name: str, levels: list[dict[str, str]]) -> None:
        """One step per level of named values, `name_1`, `name_2`, ..."""
        for i, values in enumerate(levels, start=1):
            self.extend(f"{name}_{i}", values)

    def sql(self) -> str:
        """WITH and the steps, each `name AS (body)`."""
        return "WITH " + ",\n".join(_step(name, body) for name, body in self.steps)


def _step(name: str, body: str) -> str:
    """`name AS (body)`: the body's first line beside the name (the rest of its SELECT
    list 2 spaces in, like its FROM and WHERE), and its last (the step it reads) at the end
    of the line before, where they fit."""
    lines = body.split("\n")
    if len(lines) > 1 and lines[-1].startswith("FROM ") and "--" not in lines[-2] and len(lines[-2] + lines[-1]) < WIDE:
        lines[-2:] = [f"{lines[-2]} {lines[-1]}"]
    head = f"{name} AS ({lines[0]}"
    if len(head) > WIDE:
        return f"{name} AS (\n{indent(body, 2)})"
    listed = next((i for i, line in enumerate(lines[1:], start=1) if not line.startswith(" ")), len(lines))
    rest = [line[5:] if line.startswith(" " * 5) else line for line in lines[1:listed]] + lines[listed:]
    return "\n".join([head, *("  " + line if line else line for line in rest)]) + ")"


def wrapped(items: list[str], breaks: tuple[int, ...], pad: str = "  ") -> str:
    """`items`, comma-separated, on a new line (indented by `pad`) at each of the positions `breaks`."""
    bounds = [0, *breaks, len(items)]
    return f",\n{pad}".join(", ".join(items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))


def extended(d: PostgresDialect, level: str, values: dict[str, str]) -> str:
    """Every column of a level of a query (as `f`) and the named `values` over it."""
    return (
        "SELECT f.*,\n"
        + ",\n".join(f"       {expr} AS {d.q(alias)}" for alias, expr in values.items())
        + "\n"
        + subquery(d, level, "f")
    )


def packed(items: list[str], pad: str, width: int = 120, separator: str = ", ") -> str:
    """`items`, separated by `separator` (a comma), as many on a line as fit `width`
    characters (a line after the first starts with `pad`); an item of several lines stands
    on its own."""
    chunks: list[list[str]] = []
    for item in items:
        last = chunks[-1] if chunks else None
        fits = last is not None and len(pad) + len(separator.join([*last, item])) <= width
        if fits and "\n" not in item and "\n" not in last[-1]:
            last.append(item)
        else:
            chunks.append([item])
    return f"{separator.rstrip()}\n{pad}".join(separator.join(chunk) for chunk in chunks)


# Where a long line breaks, best first: before a condition's connective or a CASE branch,
# after a comma, else at any space (each outside quotes and comments). A break before the
# space at i: the text at i starts with one of the `before`; after it: the text ends at i
# with one of the `after`.
_BREAKS = (
    (("AND ", "OR ", "WHEN ", "ELSE ", "THEN "), ()),
    ((), (",",)),
    (("",), ()),
)


_NESTING = 40


def _spaces(line: str, quote: str | None) -> tuple[list[tuple[int, int]], str | None]:
    """The positions of the spaces of `line` outside quotes and comments, each with its
    depth in parentheses, and the quote open at its end (a literal or quoted identifier
    may go on to the next line)."""
    spaces, depth = [], 0
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif line.startswith("--", i):
            break
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == " ":
            spaces.append((depth, i))
    return spaces, quote


def _cut(line: str, width: int) -> int | None:
    """Where `line` breaks to fit `width` (None: nowhere it may): the best kind of break
    (`_BREAKS`), late in the line and little nested in parentheses (a level deeper weighs
    as much as `_NESTING` characters earlier); else as early as it may."""
    start = len(line) - len(line.lstrip(" "))
    spaces = [(depth, i) for depth, i in _spaces(line, None)[0] if start < i]
    for before, after in _BREAKS:
        fits = [
            (i - _NESTING * depth, i)
            for depth, i in spaces
            if i <= width and (line.startswith(before, i + 1) or line[:i].endswith(after))
        ]
        if fits:
            return max(fits)[1]
    # Nothing fits (a long literal): the first break after it.
    return spaces[0][1] if spaces else None


def wrap_long_lines(text: str, width: int = 160) -> str:
    """`text` with every line longer than `width` broken at spaces outside quotes and
    comments (SQL reads a line break there as a space), continued 4 spaces further in."""
    out, quote = [], None
    for line in text.split("\n"):
        pad = " " * (len(line) - len(line.lstrip(" ")) + 4)
        rest = line
        while quote is None and len(rest) > width and (cut := _cut(rest, width)) is not None:
            out.append(rest[:cut].rstrip())
            rest = pad + rest[cut:].lstrip()
        out.append(rest)
        quote = _spaces(line, quote)[1]
    return "\n".join(out)
