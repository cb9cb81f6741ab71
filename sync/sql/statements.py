"""Split SQL scripts into statements, and procedure bodies into their SQL statements, so
generated output can be checked statement by statement (sqlglot) and run by drivers
that take one statement at a time."""

from __future__ import annotations

import re

_DOLLAR = re.compile(r"\$[A-Za-z_]*\$")
_PLPGSQL_KEYWORDS = re.compile(r"^(IF|ELSE|ELSIF|END|BEGIN|DECLARE|RETURN|RAISE|LOOP|EXIT|FOR|WHILE|GET|EXECUTE)\b", re.I)
_ASSIGNMENT = re.compile(r"^[a-z_][a-z0-9_]*\s*:=", re.I)


def _strip_comment(line: str) -> str:
    """Drop a trailing -- comment outside string literals."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == "'":
            in_string = not in_string
        elif not in_string and line.startswith("--", i):
            return line[:i]
    return line


def split_statements(script: str) -> list[str]:
    """Statements of a script, split on `;` at line ends outside dollar-quoted bodies.
    Comment-only lines are dropped; statements keep their text otherwise."""
    statements: list[str] = []
    buf: list[str] = []
    open_tag: str | None = None
    for line in script.splitlines():
        for tag in _DOLLAR.findall(line):
            if open_tag is None:
                open_tag = tag
            elif tag == open_tag:
                open_tag = None
        if open_tag is None and not buf and line.strip().startswith("--"):
            continue
        buf.append(line)
        if open_tag is None and _strip_comment(line).rstrip().endswith(";"):
            text = "\n".join(buf).strip()
            if text:
                statements.append(text)
            buf = []
    rest = "\n".join(buf).strip()
    if rest:
        statements.append(rest)
    return statements


def procedure_body(create_procedure: str) -> str:
    """The text between the dollar quotes of a CREATE PROCEDURE statement."""
    m = re.search(r"AS (\$[A-Za-z_]*\$)\n(.*)\n\1", create_procedure, re.S)
    if not m:
        raise ValueError("not a CREATE PROCEDURE ... AS $$ ... $$ statement")
    return m.group(2)


def body_sql_statements(body: str) -> list[str]:
    """The plain SQL statements of a PL/pgSQL body (no control flow, declarations,
    assignments or SELECT ... INTO), for checking with a SQL parser."""
    lines = [_strip_comment(line) for line in body.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.strip().upper() == "BEGIN"]
    if starts:  # skip the DECLARE section
        lines = lines[starts[0] + 1 :]
    text = "\n".join(line for line in lines if line.strip())
    out = []
    for stmt in re.split(r";\s*\n", text + "\n"):
        stmt = stmt.strip().rstrip(";").strip()
        # Control lines may precede a statement inside the same chunk (IF ... THEN\n  SQL).
        while stmt and (_PLPGSQL_KEYWORDS.match(stmt) or _ASSIGNMENT.match(stmt)):
            head, _, rest = stmt.partition("\n")
            if head.upper().startswith(("IF ", "ELSIF ")) and not head.rstrip().upper().endswith("THEN"):
                stmt = ""
                break
            stmt = rest.strip()
        if not stmt or re.search(r"\bINTO\s+v_", stmt, re.I) and stmt.upper().startswith("SELECT"):
            continue
        out.append(stmt)
    return out
