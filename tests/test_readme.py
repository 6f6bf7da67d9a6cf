"""README.md as a doorway: short, its links resolve, its map names every page of the manual, and
its "first job in five minutes" runs as written.

The first job's steps are read from README's fenced blocks, never copied here: the ``python``
block is saved as ``hello.py`` (as README says), and each line of its ``sh`` blocks is typed into
one real ``bash`` (read from a pipe, as a user's shell reads what they type), in a folder of its
own whose ``.venv`` is this environment's. The nodes are real processes that bash starts in the
background (``&``) and kills (``kill -9 $!``); the database is the test's (``PGPULSE_DATABASE_URL``)
instead of the embedded server's default folder. A line this test does not know fails it, so a
step added to README is a step added here.

``./scripts/demo``, README's other command, runs in tests/test_demo.py; ``./scripts/test`` is
what CI runs (``.ci/run``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FIRST_JOB = "## Your first job in five minutes"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(title: str) -> str:
    """README's section under the heading ``title``, up to the next ``## `` heading."""
    text = readme()
    assert f"\n{title}\n" in text, title
    return text.split(f"\n{title}\n", 1)[1].split("\n## ", 1)[0]


def fenced(text: str, language: str) -> list[str]:
    """The text of each fenced block of ``language`` in ``text``."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_is_a_doorway() -> None:
    """At most 300 lines: what Pulse is, when to choose it, the two commands, the first job, a
    map of the docs; the reference lives in docs/."""
    text = readme()
    assert len(text.splitlines()) <= 300
    headings = re.findall(r"^## (.*)$", text, flags=re.M)
    assert headings[:4] == [
        "When to choose Pulse",
        "Two commands",
        "Your first job in five minutes",
        "The docs",
    ]
    assert "pg_cron" in section("## When to choose Pulse")
    assert "queue" in section("## When to choose Pulse")
    [commands] = fenced(section("## Two commands"), "sh")
    assert [line.split()[0] for line in commands.splitlines()] == [
        "./scripts/demo",
        "./scripts/test",
    ]
    assert all(re.search(r"# about \d+ (s|min)\b", line) for line in commands.splitlines())


def _slug(heading: str) -> str:
    """The anchor GitHub (and MkDocs' ``toc``, for these headings) gives a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_readme_links_resolve() -> None:
    """Every link of README to a file of the repository names one that exists, and an anchor
    that its page has. (The docs' own links are checked by ``mkdocs build --strict``, in
    ./scripts/check.)"""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else README
        if not page.exists() or (anchor and anchor not in _anchors(page)):
            broken.append(target)
    assert broken == []


def test_readme_maps_every_page_of_the_docs() -> None:
    """The docs' map names every page of docs/ (the site's home and the first job, which README
    itself is, aside), and mkdocs.yml's nav has every page."""
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", readme()))
    pages = {page.name for page in DOCS.glob("*.md")}
    assert pages - linked == {"quickstart.md"}
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert {page for page in pages if f": {page}\n" not in nav} == set()


def test_the_docs_quick_start_is_readmes_first_job() -> None:
    """docs/quickstart.md includes README's first job (pymdownx.snippets, at build time), so
    there is one text to keep, and this module's walk-through checks it."""
    assert '--8<-- "README.md:first-job"' in (DOCS / "quickstart.md").read_text(encoding="utf-8")
    first_job = section(FIRST_JOB)
    assert "<!-- --8<-- [start:first-job] -->" in first_job
    assert "<!-- --8<-- [end:first-job] -->" in first_job


class Shell:
    """One ``bash`` reading lines from a pipe, its standard output and error read by a thread
    into :attr:`out` (with the output of the jobs it starts in the background)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its process group: bash and its background jobs
        )
        self.out: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def type(self, line: str) -> str:
        """Type ``line`` and return the marker bash prints with its exit code once it ends."""
        marker = f"__done_{uuid.uuid4().hex}__"
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\nprintf '\\n{marker} %s\\n' \"$?\"\n")
        self.proc.stdin.flush()
        return marker

    def wait_for(self, pattern: str, since: int, within: float = 60) -> re.Match[str]:
        """The first line of the output from line ``since`` on that matches ``pattern``,
        waiting for it for at most ``within`` seconds."""
        deadline = time.monotonic() + within
        checked = since
        while True:
            for line in self.out[checked:]:
                if found := re.search(pattern, line):
                    return found
            checked = len(self.out)
            try:
                read = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} within {within} s:\n" + "\n".join(self.out)
                ) from None
            if read is None:
                raise AssertionError("bash ended:\n" + "\n".join(self.out))
            self.out.append(read)

    def run(self, line: str, within: float = 60) -> tuple[int, str]:
        """Type ``line``; return its exit code and what was printed until it ended."""
        since = len(self.out)
        marker = self.type(line)
        found = self.wait_for(rf"^{marker} (\d+)$", since, within)
        end = len(self.out)  # the marker's line, after the empty line that starts it
        return int(found.group(1)), "\n".join(self.out[since : end - 1]).rstrip("\n")

    def child(self, words: str) -> int:
        """The pid of bash's child process whose command line holds ``words``."""
        for _ in range(100):
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            for pid in children.read_text().split():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
                except FileNotFoundError:
                    continue
                if words in cmdline:
                    return int(pid)
            time.sleep(0.1)
        raise AssertionError(f"bash has no child running {words!r}")

    def close(self) -> None:
        """End bash and whatever it still runs (its process group: only what this test
        started)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)  # at the end of the output: every writer has ended
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.proc.stdout.close()


def _rows(table: str) -> list[list[str]]:
    """The lines of a table ``pgpulse`` prints, each split on runs of two or more spaces (its
    heading and rule too: a caller picks rows by their first cell)."""
    return [re.split(r"\s{2,}", line.strip()) for line in table.splitlines() if line.strip()]


def _sample_pattern(sample: str) -> str:
    """A line of README's sample output as a pattern: its instants stand for any instant."""
    instant = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\+00:00"
    return r"^" + r"\S+".join(re.escape(p) for p in re.split(instant, sample)) + r"$"


class FirstJob:
    """README's first job, a line at a time, in one :class:`Shell`: each kind of line it has
    is typed by one method, which checks what README says it does."""

    def __init__(self, shell: Shell, venv: Path, sample: str) -> None:
        self.shell = shell
        self.venv = venv
        self.sample = sample  # README's sample of `runs --follow`
        self.nodes: list[str] = []  # in the order README starts them

    #: The kinds of lines, as patterns (a whole line, stripped): the method that types each.
    STEPS = (
        (r"source \.venv/bin/activate", "activate"),
        (r"pgpulse node run --app hello --node-id \w+ .*&", "start_node"),
        (r"pgpulse job create greet .*--handler hello", "create"),
        (r"pgpulse job trigger greet", "trigger"),
        (r"pgpulse runs greet", "runs"),
        (r"kill -9 \$!", "kill_first"),
        (r"pgpulse runs greet --follow", "follow"),
        (r"pgpulse runs greet --attempts", "attempts"),
        (r"pgpulse status", "status"),
        (r"kill \$!", "stop_second"),
        (r"rm hello\.py", "remove"),
        (r"pgpulse job delete greet", "delete"),
    )

    def type(self, line: str) -> str:
        """Type ``line`` with the method for its kind; return the method's name."""
        name = next((n for pattern, n in self.STEPS if re.fullmatch(pattern, line)), None)
        assert name is not None, f"README's first job has a step this test does not know: {line}"
        getattr(self, name)(line)
        return name

    def run(self, line: str) -> str:
        code, out = self.shell.run(line)
        assert code == 0, (line, out)
        return out

    def activate(self, line: str) -> None:
        self.run(line)
        assert self.run("command -v pgpulse") == str(self.venv / "bin" / "pgpulse")

    def start_node(self, line: str) -> None:
        """It says it started (stderr, at the default log level)."""
        words = shlex.split(line)
        node = words[words.index("--node-id") + 1]
        since = len(self.shell.out)
        self.run(line)
        self.shell.wait_for(rf"^node {node} started with 10 slots on database ", since)
        self.nodes.append(node)

    def create(self, line: str) -> None:
        assert re.search(r"^created job greet \(id \d+\)", self.run(line), re.M)

    def trigger(self, line: str) -> None:
        assert re.search(r"^triggered greet: occurrence ", self.run(line), re.M)

    def runs(self, line: str) -> None:
        """The run shows as running, attempt 1, on the first node (typed again until it does,
        as a user would)."""
        for _ in range(20):
            out = self.run(line)
            running = [r for r in _rows(out) if r[0] == "greet" and r[2] == "running"]
            if running:
                assert running[0][5:7] == ["1", self.nodes[0]], out
                return
            time.sleep(0.5)
        raise AssertionError(f"the run never showed as running:\n{out}")

    def kill_first(self, line: str) -> None:
        pid = self.shell.child(f"--node-id {self.nodes[0]}")
        self.run(line)
        deadline = time.monotonic() + 10
        while _state(pid) not in {"Z", "gone"}:
            assert time.monotonic() < deadline, "the node outlived kill -9"
            time.sleep(0.1)

    def follow(self, line: str) -> None:
        """The attempts as they end: the first node's, its lease expired; the second's,
        succeeded. Then Ctrl-C (SIGINT to the command, as a terminal sends it): exit 0."""
        shell, since = self.shell, len(self.shell.out)
        marker = shell.type(line)
        shell.wait_for(r"^following the attempts of job greet in tenant default", since)
        shell.wait_for(r"  succeeded  attempt 2  node ", since)
        os.kill(shell.child("--follow"), signal.SIGINT)
        shell.wait_for(rf"^{marker} 0$", since, 30)
        printed = [x for x in shell.out[since:] if re.match(r"^\S+  greet  ", x)]
        one, two = self.nodes
        # node two, the leader now, said what it did (a warning: shown at the default level)
        assert any(
            x.endswith("WARNING pgpulse.node.sweeper: returned 1 expired lease to the pool")
            for x in shell.out[since:]
        ), shell.out[since:]
        ends = [
            f"  retrying  attempt 1  node {one}  lease of node {one} expired",
            f"  succeeded  attempt 2  node {two}  hello from {two}, attempt 2",
        ]
        # Both, or (README says so) the second alone when the first ended before `--follow`
        # started: more than the lease's 10 s after the kill, as on a machine this loaded.
        assert 1 <= len(printed) <= 2, printed
        assert all(x.endswith(end) for x, end in zip(printed, ends[-len(printed) :], strict=True))
        # README's sample is this output, instants aside
        samples = self.sample.splitlines()[-len(printed) :]
        for shown, real in zip(samples, printed, strict=True):
            assert re.match(_sample_pattern(shown), real), (shown, real)

    def attempts(self, line: str) -> None:
        """Both attempts of the one run, with their nodes."""
        out, (one, two) = self.run(line), self.nodes
        assert re.search(r"succeeded\s+attempts 2", out), out
        assert re.search(rf"\b1\s+{one}\s.*retrying\s+lease of node {one} expired", out), out
        assert re.search(rf"\b2\s+{two}\s.*succeeded", out), out
        assert f"hello from {two}, attempt 2" in out

    def status(self, line: str) -> None:
        """The first node lost, the second alive and leader."""
        out, (one, two) = self.run(line), self.nodes
        assert re.search(rf"^1 node alive, leader {two}, .*1 node lost \({one}\)", out, re.M)
        rows = {r[0]: r for r in _rows(out)}
        assert rows[one][1] == "lost" and rows[two][1] == "alive", out

    def stop_second(self, line: str) -> None:
        """SIGTERM: the node drains and exits 0."""
        self.run(line)
        assert self.shell.run("wait $!", within=30)[0] == 0

    def delete(self, line: str) -> None:
        assert re.search(r"^deleted greet", self.run(line), re.M)

    def remove(self, line: str) -> None:
        self.run(line)
        assert self.shell.run("test -e hello.py")[0] == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_first_job_in_five_minutes_as_written(dsn: str, tmp_path: Path) -> None:
    first_job = section(FIRST_JOB)
    [module] = fenced(first_job, "python")
    assert "Save this as `hello.py`" in first_job
    (tmp_path / "hello.py").write_text(module, encoding="utf-8")
    lines = [
        line.strip()
        for block in fenced(first_job, "sh")
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    [sample] = fenced(first_job, "text")
    # README's `source .venv/bin/activate`, in this folder, is this environment's
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file() and venv != Path(sys.base_prefix)
    (tmp_path / ".venv").symlink_to(venv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    env["PGPULSE_DATABASE_URL"] = dsn
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != venv / "bin"
    )
    shell = Shell(tmp_path, env)
    walk = FirstJob(shell, venv, sample)
    try:
        done = [walk.type(line) for line in lines]
    finally:
        shell.close()
    assert done == [
        "activate",
        "start_node",
        "create",
        "trigger",
        "runs",
        "kill_first",
        "start_node",
        "follow",
        "attempts",
        "status",
        "stop_second",
        "delete",
        "remove",
    ]


def _state(pid: int) -> str:
    """A process's state letter (``Z``: a zombie its parent has not reaped yet), or ``gone``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
