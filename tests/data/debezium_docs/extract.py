"""Extracts the example change events of Debezium's connector pages into JSON files.

    python tests/data/debezium_docs/extract.py <a debezium/debezium checkout> <commit>

Each example is taken as printed, with the edits an AsciiDoc renderer or a JSON parser
needs and nothing else: `{context}` rendered as the page renders it (the MariaDB page
includes the page shared with MySQL with `:context: mariadb`), `<n>` callouts removed,
trailing commas removed, and a stray `},` after it and `"schema": { ... }` (an elision in the page) dropped, so
those files hold the payload alone, as `schemas.enable=false` writes it. `{debezium-version}`
stays as printed (a string; nothing reads it). Duplicate keys keep the last value, as
every JSON parser does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

PAGES = "documentation/modules/ROOT"
# (output file, page, `{context}`, line of the example's opening `----`)
EXAMPLES = [
    ("sqlserver-create.json", "pages/connectors/sqlserver.adoc", None, 1046),
    ("sqlserver-update.json", "pages/connectors/sqlserver.adoc", None, 1318),
    ("sqlserver-delete.json", "pages/connectors/sqlserver.adoc", None, 1410),
    ("oracle-create.json", "pages/connectors/oracle.adoc", None, 1574),
    ("oracle-update.json", "pages/connectors/oracle.adoc", None, 1816),
    ("oracle-delete.json", "pages/connectors/oracle.adoc", None, 1891),
    ("db2-create.json", "pages/connectors/db2.adoc", None, 1154),
    ("db2-update.json", "pages/connectors/db2.adoc", None, 1421),
    ("db2-delete.json", "pages/connectors/db2.adoc", None, 1511),
    ("mariadb-create.json", "partials/modules/all-connectors/shared-mariadb-mysql.adoc", "mariadb", 1144),
    ("mariadb-update.json", "partials/modules/all-connectors/shared-mariadb-mysql.adoc", "mariadb", 1443),
    ("mariadb-delete.json", "partials/modules/all-connectors/shared-mariadb-mysql.adoc", "mariadb", 1567),
]


def block(lines: list[str], start: int) -> str:
    """The text between the `----` at line `start` (1-based) and the next one."""
    assert lines[start - 1].strip() == "----", (start, lines[start - 1])
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "----")
    return "\n".join(lines[start:end])


def clean(text: str, context: str | None) -> dict:
    if context:
        text = text.replace("{context}", context)
    text = re.sub(r"\s*<\d+>", "", text)
    # the SQL Server page's delete example closes the elided schema twice
    text = re.sub(r'"schema":\s*\{\s*\.\.\.\s*\},(\s*\},)?', "", text)
    text = re.sub(r",(\s*[}\]])", r"\1", text)
    event = json.loads(text)
    return event["payload"] if list(event) == ["payload"] else event


def main(repo: str, commit: str) -> None:
    out = Path(__file__).parent
    for name, page, context, start in EXAMPLES:
        text = subprocess.run(["git", "-C", repo, "show", f"{commit}:{PAGES}/{page}"], check=True, capture_output=True, text=True)
        lines = text.stdout.splitlines()
        event = clean(block(lines, start), context)
        (out / name).write_text(json.dumps(event, indent=2) + "\n", encoding="utf-8")
        print(f"{name}: {page} line {start}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
