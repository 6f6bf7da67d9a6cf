"""The guard between a node and a shell job's command: when the node dies, the command dies.

Why. A shell job's command runs in a process group of its own, so that a timeout, a lost lease
or a node's stop can signal all of it (:mod:`pgpulse.node.builtins`). But a node killed outright
(SIGKILL, the OOM killer, a crashed machine's container) signals nothing: the command and its
children ran on, reparented to PID 1, while the sweeper gave the occurrence to another node,
which ran it again: the effect twice (an adversarial tester's finding). Design invariant:
a crash never duplicates work.

How. The node starts this program (``python -I -S shell_guard.py FD CRED SHELL -c COMMAND``) as
the leader of the command's new session and process group, and keeps the write end of a pipe
whose read end, ``FD``, only the guard holds. The guard forks the command (switching to the
job's user in the child when ``CRED`` is ``uid:gid:group,group``; ``-`` keeps the node's), then
waits for it while a thread reads ``FD``: end of file means the write end closed, which the
kernel does when the node's process ends however it ends; the guard then sends SIGKILL to its
whole process group, the command and every child it started (one that left the group with
``setsid`` escapes). On the command's exit the guard exits as it did (the same status, or the
same signal), so the node reports the command's outcome as before.

Signals. SIGTERM to the group (the node's cancellation) is meant for the command: the guard
catches it and does nothing (a caught signal is reset to its default by ``exec``, so the
command still gets SIGTERM's default action), and exits when the command does. The guard
closes its standard streams after the fork, so only the command holds the node's pipes.

Exit status 127 with the line ``cannot start command: ...`` on the output: the command could not
be started (the shell missing, the user switch refused).

Standard library only, and nothing imported from Pulse: ``-I -S`` starts it in about 20 ms.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

#: The first line of the output when the command could not be started (then exit status 127).
START_FAILED = "cannot start command: "
EXIT_START_FAILED = 127


def _watch(fd: int) -> None:
    """Block until the node's end of the pipe is closed, then kill the whole process group."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.killpg(0, signal.SIGKILL)


def _start(fd: int, cred: str, argv: list[str]) -> None:
    """In the forked child: drop the pipe, switch user, exec the command. Never returns."""
    try:
        os.close(fd)
        # Python ignores these at start, and an ignored signal stays ignored across exec: a
        # command must get them as from cron (``yes | head`` ends by SIGPIPE, silently).
        for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        if cred != "-":
            uid, gid, groups = cred.split(":")
            os.setgroups([int(g) for g in groups.split(",") if g])
            os.setgid(int(gid))
            os.setuid(int(uid))
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{START_FAILED}{exc}\n".encode("utf-8", "replace"))
    os._exit(EXIT_START_FAILED)


def main(args: list[str]) -> None:
    """Run ``args`` (``FD CRED ARGV...``) as described in the module docstring; never returns."""
    fd, cred, argv = int(args[0]), args[1], args[2:]
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    pid = os.fork()
    if pid == 0:
        _start(fd, cred, argv)
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    threading.Thread(target=_watch, args=(fd,), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
