"""The shape of a generated procedure, read from its text: lines, widest line, JSON_SIZE
calls, and the statements that touch a table on a given path through its IF blocks.

A PL/pgSQL body is a sequence of statements, each ended by `;` outside quotes and
parentheses, and of `IF cond THEN ... [ELSIF cond THEN ...] [ELSE ...] END IF;` blocks
(CASE ... ELSE ... END inside a statement is part of that statement). A path is the values
of the variables the IF conditions read; the statements on it are those a CALL with those
values runs. What counts is a statement that locks, reads or writes a table: Redshift
compiles and runs each as a distributed query of its own (assignments without a FROM and
SET are evaluated by the leader, and are not counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TABLE_STATEMENT = re.compile(r"^(SELECT|INSERT|UPDATE|DELETE|LOCK|ANALYZE|WITH)\b", re.I)
ASSIGNMENT_WITH_QUERY = re.compile(r"^v_[a-z_]+\s*:=.*\bFROM\b", re.I | re.S)
PROCEDURE = re.compile(r"CREATE OR REPLACE PROCEDURE (\S+)\((.*?)\)\nAS \$\$\n(.*?)\n\$\$ LANGUAGE", re.S)


@dataclass
class Block:
    """IF branches (condition, body) in order; an ELSE branch has the condition None."""

    branches: list[tuple[str | None, list]] = field(default_factory=list)


def _strip_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def _split(body: str) -> list[str | tuple[str, str]]:
    """Statements and IF/ELSIF/ELSE/END IF markers, in order."""
    items: list[str | tuple[str, str]] = []
    text, i, n = _strip_comments(body), 0, 0
    n = len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        head = text[i : i + 8].upper()
        if head.startswith("END IF"):
            items.append(("end", ""))
            i = text.index(";", i) + 1
            continue
        if head.startswith(("IF ", "ELSIF ")):
            kind = "if" if head.startswith("IF ") else "elsif"
            then = re.compile(r"\bTHEN\b").search(text, i)
            assert then, text[i : i + 80]
            items.append((kind, text[i + len(kind) + 1 : then.start()].strip()))
            i = then.end()
            continue
        if re.match(r"ELSE\b", text[i:]):
            items.append(("else", ""))
            i += 4
            continue
        depth, quote, j = 0, False, i
        while j < n:
            c = text[j]
            if c == "'":
                quote = not quote
            elif not quote and c == "(":
                depth += 1
            elif not quote and c == ")":
                depth -= 1
            elif not quote and depth == 0 and c == ";":
                break
            j += 1
        items.append(" ".join(text[i:j].split()))
        i = j + 1
    return items


def parse(body: str) -> list:
    """The body as a list of statements and Blocks."""
    root: list = []
    stack: list[tuple[list, Block | None]] = [(root, None)]
    for item in _split(body):
        current, block = stack[-1]
        if isinstance(item, str):
            current.append(item)
        elif item[0] == "if":
            new = Block([(item[1], [])])
            current.append(new)
            stack.append((new.branches[0][1], new))
        elif item[0] in ("elsif", "else"):
            assert block is not None
            block.branches.append((item[1] if item[0] == "elsif" else None, []))
            stack[-1] = (block.branches[-1][1], block)
        else:
            stack.pop()
    assert len(stack) == 1, "unbalanced IF blocks"
    return root


class _Null:
    """SQL's NULL in a condition: every comparison with it is not true."""

    def _no(self, other: object) -> bool:
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _no


def _holds(condition: str, path: dict[str, object]) -> bool:
    expr = re.sub(r"(\w+) IS NOT NULL", r"(not isinstance(\1, _Null))", condition)
    expr = re.sub(r"(\w+) IS NULL", r"isinstance(\1, _Null)", expr)
    expr = re.sub(r"\bNOT\b", "not", re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", expr)))
    expr = re.sub(r"(?<![<>!=])=(?!=)", "==", expr).replace("<>", "!=")
    names = set(re.findall(r"\b[pv]_[a-z_]+\b", expr))
    missing = names - set(path)
    assert not missing, f"the path does not say {sorted(missing)} ({condition})"
    values = {k: _Null() if v is None else v for k, v in path.items()}
    return bool(eval(expr, {"_Null": _Null}, values))  # noqa: S307 - conditions of our own generated SQL


def statements_on_path(tree: list, path: dict[str, object]) -> list[str]:
    """The statements a CALL runs when the variables have the values of `path`."""
    out: list[str] = []
    for node in tree:
        if isinstance(node, str):
            out.append(node)
            continue
        for condition, body in node.branches:
            if condition is None or _holds(condition, path):
                out += statements_on_path(body, path)
                break
    return out


def touches_a_table(statement: str) -> bool:
    return bool(TABLE_STATEMENT.match(statement) or ASSIGNMENT_WITH_QUERY.match(statement))


@dataclass(frozen=True)
class Shape:
    name: str
    lines: int
    widest: int
    json_size: int
    json_size_repeats: int  # the most times one value's JSON_SIZE is written
    common: int  # table statements with records pending, nothing unusual
    idle: int  # table statements when nothing is pending


# Records pending (fewer than the stage's ANALYZE threshold), deletes among them, in
# partitions seen before; no TOAST placeholder, positionless record, stale record, drift,
# truncate, quarantine or replay.
COMMON_PATH = {
    "p_max_records": None,
    "v_read": 100,
    "v_positionless": 0,
    "v_unavailable": 0,
    "v_history_recompute": 0,  # history = true: no stored version needs the full recompute
    "v_replayed": 0,
    "v_not_newer": 0,  # no winner stale or tied with what is stored
    "v_quarantined": 0,
    "v_drift": 0,
    "v_rows": 0,
    "v_truncates": 0,
    "v_truncate_pos": None,
    "v_partitions": 3,  # every partition of the batch is already in the watermark:
    "v_advanced": 3,  # its UPDATE advanced all of them
    "v_deletes": 5,  # the batch has deletes
    "v_partition": None,
    "v_policy_key": "a key",  # column policies: a key is in place
}
IDLE_PATH = {**COMMON_PATH, "v_read": 0}


def procedures(sql: str) -> dict[str, tuple[str, str]]:
    """Each procedure in a generated file: name(arguments) -> (whole text, body)."""
    found = {}
    for m in PROCEDURE.finditer(sql):
        found[f"{m.group(1)}({m.group(2)})"] = (m.group(0), m.group(3))
    return found


def _arguments(text: str, function: str) -> list[str]:
    """The argument text of every call of `function` (balanced parentheses)."""
    found = []
    for m in re.finditer(re.escape(function) + r"\(", text):
        depth, j = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        found.append(" ".join(text[m.end() : j - 1].split()))
    return found


def shape(name: str, text: str, body: str) -> Shape:
    lines = text.splitlines()
    tree = parse(body)
    count = lambda path: sum(map(touches_a_table, statements_on_path(tree, path)))  # noqa: E731
    sizes = _arguments(text, "JSON_SIZE")
    repeats = max((sizes.count(a) for a in set(sizes)), default=0)
    return Shape(name, len(lines), max(map(len, lines)), len(sizes), repeats, count(COMMON_PATH), count(IDLE_PATH))
