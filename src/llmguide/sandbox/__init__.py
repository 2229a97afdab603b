"""Run untrusted (LM-written) Python in an OS-level jail, one short-lived process per batch.

``Sandbox().evaluate(code, "potential", items)`` starts one jailed interpreter, runs the
program once and calls ``potential(*item)`` for every item.  ``evaluate_batch(code, "potential",
columns, batch_function="potential_batch")`` sends the batch as columns (e.g. a dict of stacked
arrays and a list of captions: one large pickle instead of one per item) and, if the program defines
``batch_function``, calls it once on the whole batch (vectorised); otherwise, or if it raises or
returns the wrong number of values, ``function`` on each row, in the same call.  Layers, outermost first:

1. **bubblewrap jail** (:mod:`llmguide.sandbox.jail`, default ``isolation="os"``): fresh user,
   mount, PID, IPC, UTS, network and cgroup namespaces; uid/gid 65534, no capabilities, new
   session, clean environment; a new ``/proc`` (only the jail's own processes), minimal ``/dev``;
   read-only binds of only ``/usr`` + the interpreter + the allowed packages (no home, no /work,
   no host /tmp); the only writable place is a size-limited tmpfs ``/tmp``.  Killed with its
   parent and on the wall-clock timeout (the whole PID namespace dies with it).
2. **seccomp**: bwrap loads a filter refusing mount/namespace/ptrace/bpf/keyring/io_uring/...
   syscalls and non-Unix sockets; the runner adds one refusing fork, vfork, exec and non-thread
   clone just before the program runs.
3. **resource limits** in the child: CPU, address space, file size, open files, processes, no
   core dumps; job in through stdin, results out through a private pipe, output capped.
4. **Python layers** (defence in depth): the static check (:func:`check_code`), restricted
   builtins with an import allow-list, and an audit hook refusing process creation, sockets,
   ctypes, sqlite3, writes outside the scratch directory, reads under ``/proc`` and frame objects.
5. **the result channel** (:mod:`llmguide.sandbox.result`): the per-call result marker reaches the
   child on stdin, read before the program runs (never argv or the environment); the parent accepts
   exactly one marker followed by one checked JSON object and nothing else, caps and cleans every
   field, and turns anything malformed into a failure.  A program that times out
   ``SandboxLimits.breaker_timeouts`` calls in a row is refused for the rest of the run.

Where the jail cannot start, :class:`Sandbox` raises :class:`SandboxUnavailable` naming the fix;
``isolation="python"`` (explicit opt-in, logged as a warning) runs layers 3-4 only, in a plain
subprocess (plus ``unshare -n`` where it works).

A program that fails to load, raises, loops, allocates too much, forges its result or does
something forbidden gives a :class:`SandboxResult` with ``ok=False``, a clear ``error`` and all
values 0.0 — it never raises into the caller.  Items that raise individually get 0.0 and are
counted in ``item_errors``.

This package is a face: the code is in :mod:`~llmguide.sandbox.sandbox` (the :class:`Sandbox`),
:mod:`~llmguide.sandbox.result`, :mod:`~llmguide.sandbox.jail`, :mod:`~llmguide.sandbox.static`
and the child script :mod:`~llmguide.sandbox.runner`.
"""


from llmguide.sandbox.jail import SandboxUnavailable
from llmguide.sandbox.sandbox import ISOLATIONS, Sandbox, SandboxLimits, SandboxResult
from llmguide.sandbox.static import DEFAULT_IMPORTS, FORBIDDEN_NAMES, SandboxError, check_code

__all__ = ["DEFAULT_IMPORTS", "FORBIDDEN_NAMES", "ISOLATIONS", "Sandbox", "SandboxError", "SandboxLimits",
           "SandboxResult", "SandboxUnavailable", "check_code"]
