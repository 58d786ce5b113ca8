"""Write docs/options.md from the option definitions.

The tables come from lsh_spark/config.py (the options of a run, grouped as in
``GROUPS``) and lsh_spark/cli.py (each job's own flags, ``JOBS``): edit those,
then run this script.

Usage: python scripts/options_doc.py [--check]

``--check`` writes nothing and exits 1 when docs/options.md is not what this
script would write.
"""

from __future__ import annotations

import argparse
import os
import sys

from lsh_spark.cli import CONFIG_FILE, CONSOLE_SESSION, JOBS, PROGRESS, REMOTE, Job
from lsh_spark.config import GROUPS, DedupConfig, Option, flag, options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "options.md")
TYPES = {str: "string", int: "integer", float: "number", bool: "flag", list: "strings"}

INTRO = """\
# Options

<!-- Written by scripts/options_doc.py from lsh_spark/config.py and lsh_spark/cli.py;
edit those and run `python scripts/options_doc.py`, not this file. -->

The options of a run can be given on the command line (`--num-perm 64`) or in a
YAML file passed with `--config` whose keys are the flags without the dashes
(`num-perm: 64` or `num_perm: 64`; see `conf/`). Flags given on the command line
win over the file; an unknown key is an error that lists the allowed keys. An
invalid value stops the job before any work with one line naming the flag and
what is allowed, and exit code 2, e.g.
`dedup.py: error: --num-perm: got 0; allowed: an integer from 1 to 4096`.
A flag of type *flag* takes no value (`--verify-jaccard`; `verify-jaccard: true`
in YAML).
"""

HEADER = [
    "| flag / YAML key | type | default | allowed values | meaning |",
    "|---|---|---|---|---|",
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def row(key: str, opt: Option) -> str:
    """One table row: flag (and YAML key), type, default, allowed values, meaning."""
    name = f"`{flag(key)}`" + (f" / `{key.replace('_', '-')}`" if opt.yaml else "")
    cells = [name, TYPES[opt.type], opt.default_label, opt.allowed, opt.help]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def job_section(job: Job) -> list[str]:
    """The flags of one job besides DedupConfig's options, in the order of its --help."""
    owned = job.options()
    lines = [f"### jobs/{job.prog}", ""]
    if DedupConfig in job.groups:
        replaced = [f"`{flag(k)}`" for k in options(DedupConfig) if owned[k][0] is not DedupConfig]
        but = f", except {', '.join(replaced)} (its own flag below)" if replaced else ""
        lines += [f"Takes the options above{but}, and:", ""]
    rows = []
    for i, cls in enumerate(job.groups):
        if cls is not DedupConfig:
            rows += [row(key, opt) for key, (owner, opt) in owned.items() if owner is cls]
        if i == 0 and job.yaml_keys():
            rows.append(row("config", CONFIG_FILE))
    rows.append(row("remote", REMOTE))
    rows.append(row("progress", PROGRESS))
    return lines + HEADER + rows + [""]


def render() -> str:
    """The whole of docs/options.md."""
    lines = [INTRO]
    opts = options(DedupConfig)
    for group in GROUPS:
        lines += [f"## {group}", "", *HEADER]
        lines += [row(key, opt) for key, opt in opts.items() if opt.group == group]
        lines.append("")
    lines += ["## Flags of each job", ""]
    for job in JOBS.values():
        lines += job_section(job)
    lines += [
        "## The session of `lsh-spark COMMAND`",
        "",
        "The `lsh-spark` command starts Spark itself, so besides its job's flags above",
        "(`lsh-spark dedup` takes those of `jobs/dedup.py`) it takes spark-submit's session",
        "flags; a job file run by `spark-submit` takes spark-submit's own instead.",
        "",
        *HEADER,
        *(row(key, opt) for key, opt in CONSOLE_SESSION.items()),
        "",
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if docs/options.md is stale instead of writing it",
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(DOC, encoding="utf-8") as fh:
                current = fh.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{DOC} is stale: run python scripts/options_doc.py", file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
