"""Layout of the generated SQL: indentation, nested levels of a query, wrapped lists."""

from __future__ import annotations

from sync.sql.dialect import PostgresDialect


def indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


def subquery(d: PostgresDialect, level: str, alias: str) -> str:
    """FROM a nested level of the stage query, evaluated once per record (fenced where the
    dialect needs it), not re-expanded at each reference above."""
    fenced = f"{level}\n{d.subquery_fence}" if d.subquery_fence else level
    return f"FROM (\n{indent(fenced, 2)}\n) {alias}"


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


def packed(items: list[str], pad: str, width: int = 120) -> str:
    """`items`, comma-separated, as many on a line as fit `width` characters (a line after
    the first starts with `pad`); an item of several lines stands on its own."""
    chunks: list[list[str]] = []
    for item in items:
        last = chunks[-1] if chunks else None
        fits = last is not None and len(pad) + len(", ".join([*last, item])) <= width
        if fits and "\n" not in item and "\n" not in last[-1]:
            last.append(item)
        else:
            chunks.append([item])
    return f",\n{pad}".join(", ".join(chunk) for chunk in chunks)
