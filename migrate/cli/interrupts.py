"""How the ``migrate`` command ends when interrupted (Ctrl-C is SIGINT; SIGTERM alike): exit 130 and one status line
on stderr, at whatever instruction the signal lands, never a traceback, and nothing half-written left behind.

One handler, three phases:

- starting: the command line only, from ``migrate.cli.command_line`` (``mark_command_line``, before torch and MXNet
  import: ``import migrate`` loads neither) until the work begins. Nothing is written yet, so the handler prints the
  status line and ends the process at once (``os._exit(130)``). Inside a program that calls ``main`` it raises KeyboardInterrupt, as Python does.
- working (``Interrupts.work`` until ``finish``): the handler raises KeyboardInterrupt once; the command catches it and
  its staged folder is removed on the way out. In a finalizer (``__del__``, a weakref callback), where Python would
  print "Exception ignored in ..." and drop it, the interrupt is held and raised once the finalizer has returned.
- finished: the outcome is decided; further signals are ignored so that the report is printed whole and the exit code
  is the decided one. ``finish`` removes what this process left under ``--out``'s folder (temporary files and staged
  folders; a signal that cut a clean-up short leaves nothing). On the command line SIGINT/SIGTERM then stay ignored
  (SIG_IGN) and the process ends with ``exit_process`` (``os._exit`` once stdout and stderr are flushed): the
  interpreter's shutdown, which could turn a caught KeyboardInterrupt into death by SIGINT, is skipped.

A SIGINT the process inherited as ignored (a background job) stays ignored. The interpreter's own startup, before
``command_line`` runs, is outside this: Python's default handler applies there. A program that imports ``migrate`` as
a library keeps its own handling (Python's KeyboardInterrupt) until it calls ``main``.

Examples:
    >>> with Interrupts("all", out="migrated") as guard:  # doctest: +SKIP
    ...     try:
    ...         guard.work(); run(); guard.finish()
    ...     except KeyboardInterrupt:
    ...         guard.finish()
"""
from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["Interrupts", "INTERRUPTED", "mark_command_line", "interrupted_line", "exit_process"]

#: The status of an interrupted command (``Report.status``).
INTERRUPTED = "INTERRUPTED: each output is complete or absent (the previous one where it was not replaced)"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_COMMAND_LINE = {"active": False, "command": ""}


def interrupted_line(command: str) -> str:
    """The one line an interrupted command prints on stderr.

    Examples:
        >>> interrupted_line("all")
        'migrate all: INTERRUPTED: each output is complete or absent (the previous one where it was not replaced)'
    """
    return f"migrate {command}: {INTERRUPTED}" if command else f"migrate: {INTERRUPTED}"


def _command_of(argv) -> str:
    """The subcommand as far as the raw arguments tell (for the status line before they are parsed)."""
    words = [str(arg) for arg in argv if not str(arg).startswith("-")]
    return words[0][:20] if words and words[0].isidentifier() else ""


def _exit_now(command: str) -> None:
    """Before any work: one status line, exit 130 (nothing was written, nothing to clean up)."""
    try:
        os.write(2, (interrupted_line(command) + "\n").encode())
    finally:
        os._exit(130)


def _exit_interrupted(signum, frame) -> None:
    """The handler while the command line starts (the libraries import)."""
    _exit_now(_COMMAND_LINE["command"])


def mark_command_line(argv=None) -> None:
    """This process is the ``migrate`` command: a signal before the work ends it with the status line and exit 130.

    Args:
        argv: The command's arguments (None: ``sys.argv[1:]``), which name the subcommand in that line.

    Called by ``migrate.cli.command_line`` (``python -m migrate`` and the ``migrate`` script) before anything heavy
    imports.
    """
    _COMMAND_LINE.update(active=True, command=_command_of(sys.argv[1:] if argv is None else argv))
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _exit_interrupted)


def exit_process(code: int) -> None:
    """End the command-line process with ``code`` once its output is flushed, skipping the interpreter's shutdown.

    Python's shutdown runs atexit handlers and finalizers, and ends the process by SIGINT instead of exiting with its
    code when CPython's ``_Py_UnhandledKeyboardInterrupt`` flag was left set (a KeyboardInterrupt left code that a
    library ran through ``PyRun_*``, though the command caught it later): observed, a run interrupted near its end
    printed its INTERRUPTED line and then died by SIGINT (exit -2). Every output is closed by then (atomic writes,
    the staged folder renamed or removed), so nothing is lost by skipping the shutdown.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what could be written was
            pass
    os._exit(code)


class Interrupts:
    """The signal handling of one ``migrate`` command run (see the module docstring).

    While the work runs, a signal that lands in a finalizer (a ``__del__`` frame, or the unraisable hook itself) is
    held and raised a millisecond later, outside it: a timer (SIGALRM) re-checks every millisecond until the
    KeyboardInterrupt can be raised where it propagates. A KeyboardInterrupt that a finalizer dropped anyway (a
    weakref callback, a generator closed by the garbage collector) reaches ``sys.unraisablehook``, which holds it
    the same way.

    Args:
        command: The subcommand, named in the status line.
        out: The ``--out`` path, or None; ``finish`` removes this process's leftovers in its folder.

    Attributes:
        signum: The signal that interrupted the work, or None.
    """

    def __init__(self, command: str, out=None):
        self.command, self.out = command, out
        self.phase, self.signum, self._raised, self._held = "starting", None, False, None
        self._previous, self._hook = {}, None

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in _SIGNALS:
            previous = signal.getsignal(signum)
            if previous is not signal.SIG_IGN or signum == signal.SIGTERM:
                self._previous[signum] = previous
                signal.signal(signum, self._handle)
        if signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):  # the re-check timer (migrate sets no alarm)
            self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._handle)
        self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc) -> None:
        self.phase = "finished"
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous.pop(signal.SIGALRM))
        if self._hook is not None:
            sys.unraisablehook = self._hook
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if _COMMAND_LINE["active"] else previous)

    def work(self) -> None:
        """The work starts: from now on a signal raises KeyboardInterrupt (once)."""
        self.phase = "working"

    def finish(self) -> None:
        """The outcome is decided: later signals are ignored; this process's leftovers under --out's folder go."""
        if self.phase == "finished":
            return
        self.phase = "finished"
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if self.out:
            from migrate.staged_folder import remove_leftovers  # imported here: startup needs only the stdlib
            remove_leftovers(self.out)

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGALRM:  # the re-check timer: a held signal, if any
            signum = self._held
            if signum is None:
                return
        if self.phase == "working" and not self._raised:
            if self._in_finalizer(frame):
                self._hold(signum)
                return
            self._raised, self.signum, self._held = True, signum, None
            if signal.SIGALRM in self._previous:
                signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt
        if self.phase == "starting":
            if _COMMAND_LINE["active"]:
                _exit_now(self.command)
            raise KeyboardInterrupt

    def _hold(self, signum) -> None:
        """Raise ``signum``'s KeyboardInterrupt later, outside the finalizer (re-checked every millisecond)."""
        self._held = signum
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)

    def _in_finalizer(self, frame) -> bool:
        """True when ``frame`` runs inside a ``__del__`` or this object's unraisable hook (a raise there is dropped)."""
        hook = Interrupts._unraisable.__code__
        while frame is not None:
            if frame.f_code is hook or frame.f_code.co_name == "__del__":
                return signal.SIGALRM in self._previous  # without the timer, raising is all that can be done
            frame = frame.f_back
        return False

    def _unraisable(self, info) -> None:
        """A KeyboardInterrupt a finalizer dropped: hold it for a raise outside; anything else as before."""
        if isinstance(info.exc_value, KeyboardInterrupt) and self.phase == "working" and self._raised:
            self._raised = False
            self._hold(self.signum)
            return
        self._hook(info)
