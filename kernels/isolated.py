"""Run a function in a forked child, so that a C-level abort in it (an LLVM ``Cannot select``
error when a kernel meets a target it was not written for) ends the child, not the caller.

The child inherits everything already imported (a fork, no new interpreter); its result comes
back pickled through a pipe, its stderr is kept, and a child that dies without a result raises
:class:`Aborted` with the signal or exit status and the last lines it wrote.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
from typing import Any, Callable

STDERR_TAIL = 2000  # characters of the child's stderr an Aborted carries
# A forked child of a multithreaded parent (JAX's threads) can deadlock on a lock a thread held at
# the fork: a child that has not answered after this many seconds is killed and reported.
TIMEOUT_S = 600


class Aborted(RuntimeError):
    """The child died before it returned: ``status`` is its exit code (negative: the signal)."""

    def __init__(self, what: str, status: int | None, stderr: str):
        self.status, self.stderr = status, stderr
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "no output")
        how = f"signal {-status}" if status is not None and status < 0 else f"exit status {status}"
        super().__init__(f"{what} aborted the compiling process ({how}): {last.strip()}")


def _child(conn, fn: Callable, args: tuple, kwargs: dict, err_fd: int) -> None:
    import faulthandler

    os.dup2(err_fd, 2)
    faulthandler.disable()  # an abort is reported by the parent, not as a dump of this child's stacks
    try:
        result = ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # carried to the caller; one that cannot be pickled goes as its text
        result = ("error", exc)
    try:
        conn.send_bytes(pickle.dumps(result))
    except Exception:
        conn.send_bytes(pickle.dumps(("error", RuntimeError(f"{type(result[1]).__name__}: {result[1]}"))))
    conn.close()


def call(what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a forked child; its exception re-raised here; :class:`Aborted`
    if the child died. ``what`` names the work in the error ("gemm_128x256x64 for sm_100a")."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    with tempfile.TemporaryFile() as err:
        child = ctx.Process(target=_child, args=(send, fn, args, kwargs, err.fileno()), daemon=True)
        child.start()
        send.close()
        try:
            if not receive.poll(TIMEOUT_S):
                child.kill()
                child.join()
                raise Aborted(what, child.exitcode, f"no answer after {TIMEOUT_S} s (killed)")
            status, value = pickle.loads(receive.recv_bytes())
        except EOFError:
            child.join()
            err.seek(0)
            raise Aborted(what, child.exitcode, err.read().decode(errors="replace")[-STDERR_TAIL:]) from None
        finally:
            receive.close()
        child.join()
    if status == "error":
        raise value
    return value
