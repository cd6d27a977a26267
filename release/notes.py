"""One version's section of CHANGELOG.md, as release notes (markdown) and as Artifact Hub's
`artifacthub.io/changes` (a YAML list of {kind, description}).

Usage: notes.py VERSION notes|changes   (VERSION as in the heading: 0.1.0, or Unreleased)
"""

import re
import sys
from pathlib import Path

KINDS = {"Added": "added", "Changed": "changed", "Deprecated": "deprecated", "Removed": "removed",
         "Fixed": "fixed", "Security": "security"}


def section(changelog: str, version: str) -> str:
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", changelog, re.M | re.S)
    if not match:
        sys.exit(f"notes.py: CHANGELOG.md has no section ## [{version}]")
    return match.group(1).strip() + "\n"


def changes(text: str) -> list[tuple[str, str]]:
    """Each bullet under a `### Kind` heading, its lines joined."""
    out, kind = [], None
    for line in text.splitlines():
        if line.startswith("### "):
            kind = KINDS.get(line[4:].strip())
        elif line.startswith("- ") and kind:
            out.append([kind, line[2:].strip()])
        elif line.startswith("  ") and out and kind:
            out[-1][1] += " " + line.strip()
    return [(k, d) for k, d in out]


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main() -> None:
    version, form = sys.argv[1], sys.argv[2]
    text = section(Path(__file__).resolve().parents[1].joinpath("CHANGELOG.md").read_text(), version)
    if form == "notes":
        sys.stdout.write(text)
    else:
        for kind, description in changes(text):
            sys.stdout.write(f"- kind: {kind}\n  description: {quoted(description)}\n")


main()
