"""The shell transcripts of the documentation, parsed, run and compared.

A transcript is a fenced block whose lines start with `$ ` (a command) followed by the
output it printed. HTML comments right before a block say how to treat it:

    <!-- transcript: session main examples/salesdb +migrations/versions -->
                                                     run the blocks that follow in a new folder
                                                     holding a copy of that repository folder's
                                                     files (and of a `+` folder, at its own
                                                     path); no folder: the files a checkout
                                                     holds, as the blocks before any marker see; `(empty)`: nothing
    <!-- transcript: resume main -->                 go back to that session's folder
    <!-- transcript: setup                           shell commands run before the next block,
    cp examples/salesdb/events/x.jsonl events/       their output not shown (what the prose
    -->                                              around the block tells the reader to do)
    <!-- transcript: not run: aws -->                the block cannot run here; the reason is
                                                     one of NOT_RUN_REASONS
    <!-- transcript: excerpt of docs/operations.md --> a copy of a block that document runs
    <!-- transcript: script -->                      the (Python) block that follows is run as it
                                                     is, in the session folder, before the next

Every other transcript runs, in document order, each document's blocks in one folder, as a
reader following the document would. Output is compared after normalising what changes
from run to run (clock times, durations, revision ids, folders, table padding); a line
`...` in the documented output stands for any output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

MARKER = re.compile(r"<!--\s*transcript:\s*(.*?)\s*-->", re.S)
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.S | re.M)
PROMPT = "$ "
ELLIPSIS = ("...", "…")


class NotRun(StrEnum):
    """Why a transcript cannot run in the test: each needs something this machine lacks."""

    AWS = "aws"  # an AWS account: S3, Glue, EMR, Lambda, CloudFormation
    REDSHIFT = "redshift"  # a Redshift cluster or workgroup
    TERMINAL = "terminal"  # a person at a terminal (Ctrl-C)
    WITHOUT_PYSPARK = "without-pyspark"  # an install without PySpark (tests/test_without_spark.py has one)
    OLDER_RELEASE = "older-release"  # a warehouse an earlier release deployed (tests/test_upgrade_deployment.py)
    TEST_SUITE = "test-suite"  # the suite's own tests, which the suite runs (a nested pytest shares its temp root)


@dataclass
class Transcript:
    document: str
    line: int
    body: str
    setup: list[str] = field(default_factory=list)  # bash scripts run first
    scripts: list[str] = field(default_factory=list)  # Python programs run first
    session: tuple[str, list[str]] | None = None  # a new session starts here: its name and sources
    resume: str | None = None  # an earlier session goes on here
    not_run: NotRun | None = None
    excerpt_of: str | None = None

    @property
    def steps(self) -> list[tuple[str, str]]:
        """(command, expected output) pairs; a command continued with a trailing backslash
        is joined."""
        steps: list[tuple[str, list[str]]] = []
        lines = self.body.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith(PROMPT):
                command = line[len(PROMPT) :]
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
                steps.append((command, []))
            elif steps:
                steps[-1][1].append(line)
            i += 1
        return [(command, "\n".join(out)) for command, out in steps]


def transcripts(document: str, text: str) -> list[Transcript]:
    """Every fenced block with a `$ ` command in `text`, with the markers before it."""
    found: list[Transcript] = []
    pending: list[str] = []
    scripts: list[str] = []
    position = 0
    for block in FENCE.finditer(text):
        between = text[position : block.start()]
        pending += [m.group(1) for m in MARKER.finditer(between)]
        position = block.end()
        language, body = block.group(1), block.group(2)
        if any(m.strip() == "script" for m in pending):
            if language != "python":
                raise ValueError(f"{document}: a script block must be Python, not {language!r}")
            scripts.append(body)
            pending = [m for m in pending if m.strip() != "script"]
            continue
        if not any(line.startswith(PROMPT) for line in body.split("\n")):
            pending = []
            continue
        transcript = Transcript(document, text.count("\n", 0, block.start()) + 1, body)
        for marker in pending:
            _apply(transcript, marker)
        transcript.scripts, scripts, pending = scripts, [], []
        found.append(transcript)
    return found


def _apply(transcript: Transcript, marker: str) -> None:
    word, rest = (marker.split(None, 1) + [""])[:2]
    rest = rest.strip()
    if word == "session":
        name, *sources = rest.split()
        transcript.session = (name, sources)
    elif word == "resume":
        transcript.resume = rest
    elif word == "setup":
        transcript.setup.append(rest)
    elif word == "not" and rest.startswith("run:"):
        transcript.not_run = NotRun(rest.removeprefix("run:").strip())
    elif word == "excerpt" and rest.startswith("of "):
        transcript.excerpt_of = rest.removeprefix("of ").strip()
    else:
        raise ValueError(f"{transcript.document}:{transcript.line}: unknown transcript marker {marker!r}")


_BOX = re.compile(r"[─━│┃┏┓┗┛┡┩└┘┬┴┼╇┳┻╋├┤╭╮╰╯]+")
_SUBSTITUTIONS = [
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d\b"), "<date>"),  # a date and its time wrapped apart in a table cell
    (re.compile(r"\b\d\d:\d\d:\d\d(\.\d+)?\b"), "<clock>"),
    (re.compile(r"\b\d{8}_(?=[0-9a-f]{12}_)"), "<date>_"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"(?<![0-9a-zA-Z])[0-9a-f]{12}(?![0-9a-zA-Z])"), "<rev>"),  # also in a file name, after "_"
    (re.compile(r"\(\d+ files\)"), "(<n> files)"),  # the artifact's module count moves with the code
    (re.compile(r'("\w*seconds": )-?\d+(\.\d+)?(e-?\d+)?'), r"\1<seconds>"),
    (re.compile(r"(?<![\w.])(\d+(\.\d+)? (ms|s|min|h|d)\b ?)+"), "<duration> "),
    (re.compile(r"(\d+(\.\d+)?|[\d.]+ [kMG]?B/s) records?/s"), "<rate>"),
]


def normalise(text: str, folder: str = "") -> str:
    """Output as compared: the session folder as `.`, run-dependent values as placeholders,
    table borders and padding (which follow the widest value) as single spaces."""
    if folder:
        text = text.replace(folder + "/", "").replace(folder, ".")
    text = _BOX.sub(" ", text)
    for pattern, replacement in _SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def matches(expected: str, actual: str, folder: str = "") -> bool:
    """True when `actual` is the documented output, a line `...` standing for any text."""
    parts = re.split(r"^\s*(?:\.\.\.|…)\s*$", expected, flags=re.M)
    pattern = ".*?".join(re.escape(normalise(p)) for p in parts)
    return re.fullmatch(pattern, normalise(actual, folder), re.S) is not None
