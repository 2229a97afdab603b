"""The child script: ``python -s -S -B -P -c <this source> <settings json>``; on stdin one line
with the call's result marker (hex) and then the job pickle.

Runs inside the bubblewrap jail (or, with ``isolation="python"``, in a plain subprocess).  In
order: resource limits; import numpy; read the marker and the job from stdin (the marker is never
in argv or the environment, where the program could read it back from ``/proc``); stdin, stdout
and stderr to /dev/null (the result goes to a private copy of the original stdout, closed once the
result is written); the seccomp filter that forbids creating processes (OS jail only); the audit
hook and restricted builtins (``guards``), which also refuse frame objects (``gi_frame``,
``tb_frame``...: the way to this function's locals) and reads under ``/proc`` (the way to its
memory); run the program.  The marker lives only in the closure of ``send_result``.  The parent
trusts nothing in the output anyway (:mod:`llmguide.sandbox.result`).
It never imports anything from llmguide: this file is passed as source text.
"""

import sys


def main() -> None:
    import json
    import os
    import resource

    cfg = json.loads(sys.argv[1])
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu"], cfg["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_mb"] * mb, cfg["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_mb"] * mb, cfg["file_mb"] * mb))
    if cfg["processes"]:
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["processes"], cfg["processes"]))
    sys.path.extend(cfg["site"])

    import builtins
    import io
    import math
    import pickle
    import traceback

    import numpy  # noqa: F401  (items may hold arrays; the program may import it)

    send_result = result_sender(bytes.fromhex(sys.stdin.buffer.readline().decode("ascii")), os.dup(1))
    job = pickle.loads(sys.stdin.buffer.read())
    scratch = os.path.realpath(cfg["scratch"])
    os.chdir(scratch)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["open_files"], cfg["open_files"]))

    class Capped(io.TextIOBase):
        """print() target keeping only the first ``limit`` characters (a flood costs no memory)."""

        def __init__(self, limit):
            self.parts, self.left = [], limit

        def write(self, s):
            s = str(s)
            if self.left > 0:
                self.parts.append(s[: self.left])
                self.left -= len(self.parts[-1])
            return len(s)

        def writable(self):
            return True

    out = Capped(cfg["max_output_chars"])
    sys.stdout = sys.stderr = out

    if cfg["seccomp"]:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prog = bytes.fromhex(cfg["seccomp"])
        filt = ctypes.create_string_buffer(prog, len(prog))

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = Fprog(len(prog) // 8, ctypes.cast(filt, ctypes.c_void_p))
        pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
        if (libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0
                or libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0):
            raise OSError(ctypes.get_errno(), "sandbox: cannot install the seccomp filter")

    namespace = {"__name__": "lm_program"}
    guarding = [False]                       # the hook refuses frame access while this is on
    if cfg["guards"]:
        inside = scratch + os.sep
        realpath = os.path.realpath
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        blocked = ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.kill",
                   "os.killpg", "subprocess.", "socket.", "ctypes.", "os.putenv", "os.unsetenv", "os.chdir",
                   "os.setuid", "os.setgid", "resource.setrlimit", "sys.addaudithook", "shutil.", "pty.",
                   "os.truncate", "mmap.", "signal.", "sqlite3.")
        path_events = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                       "os.symlink", "os.utime", "os.chflags", "os.lchmod", "os.lchown", "os.truncate")

        def under_proc(path):
            try:
                p = realpath(os.fsdecode(path))
            except Exception:
                return True
            return p == "/proc" or p.startswith("/proc/")

        def in_scratch(path):
            try:
                p = realpath(os.fsdecode(path))
            except Exception:
                return False
            return p == scratch or p.startswith(inside)

        frame_attrs = ("gi_frame", "cr_frame", "ag_frame", "tb_frame")

        def hook(event, args):
            if event.startswith(blocked):
                raise PermissionError(f"sandbox: '{event}' is not allowed")
            if event == "object.__getattr__":
                if guarding[0] and len(args) > 1 and args[1] in frame_attrs:
                    raise PermissionError(f"sandbox: access to frames ('.{args[1]}') is not allowed")
            elif event == "open":
                path, mode, flags = args
                if not isinstance(path, int) and under_proc(path):
                    raise PermissionError(f"sandbox: reading {path!r} is not allowed")
                writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                    mode is None and isinstance(flags, int) and flags & write_flags)
                if writing and not (isinstance(path, int) or in_scratch(path)):
                    raise PermissionError(f"sandbox: writing {path!r} outside the scratch directory is not allowed")
            elif event.startswith(path_events):
                for a in args[:2]:
                    if isinstance(a, str | bytes | os.PathLike) and not in_scratch(a):
                        raise PermissionError(f"sandbox: '{event}' on {a!r} outside the scratch directory")

        allowed = set(job["allowed_imports"])
        real_import = builtins.__import__

        def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level or name.split(".")[0] not in allowed:
                raise ImportError(f"sandbox: import of '{name}' is not allowed")
            return real_import(name, globals, locals, fromlist, level)

        safe = ["abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex",
                "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hasattr", "hash", "hex",
                "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object",
                "oct", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted",
                "str", "sum", "tuple", "type", "zip", "__build_class__", "True", "False", "None",
                "NotImplemented", "Ellipsis"]
        safe_builtins = {k: getattr(builtins, k) for k in safe}
        safe_builtins.update({k: v for k, v in vars(builtins).items()
                              if isinstance(v, type) and issubclass(v, BaseException)})
        safe_builtins["__import__"] = safe_import
        namespace["__builtins__"] = safe_builtins
        sys.addaudithook(hook)

    result = {"status": "ok", "error": None, "values": [], "extras": [], "item_errors": 0, "first_item_error": None}

    def short_tb(exc):
        """The traceback without the runner's frames.  The message (which may run the program's
        ``__str__``) is formatted under the guard; only the frame walk runs without it."""
        try:
            message = traceback.format_exception_only(type(exc), exc)
            guarding[0] = False
            try:
                stack = traceback.extract_tb(exc.__traceback__)
            finally:
                guarding[0] = True
            lines = ["Traceback (most recent call last):\n", *stack.format(), *message]
            return "".join(ln for ln in lines if 'File "<string>"' not in ln)[-1500:]
        except BaseException:
            guarding[0] = True
            return f"{type(exc).__name__} (traceback unavailable)"

    sys.setrecursionlimit(2000)
    guarding[0] = bool(cfg["guards"])
    fn = None
    try:
        exec(compile(job["code"], "<lm_program>", "exec"), namespace)
        fn = namespace.get(job["function"])
        if not callable(fn):
            result.update(status="error", error=f"the program defines no function '{job['function']}'")
            fn = None
    except BaseException as exc:
        result.update(status="error", error="the program failed to load:\n" + short_tb(exc))
    items = job["items"]
    columns = job.get("columns")
    if fn is not None and columns is not None:       # evaluate_batch: one call on the whole batch if possible
        n = int(job["n"])
        batch_fn = namespace.get(job.get("batch_function") or "")
        if callable(batch_fn):
            try:
                values = [float(v) for v in batch_fn(*columns)]
                if len(values) != n:
                    raise ValueError(f"{job['batch_function']} returned {len(values)} values for {n} rows")
                bad = [v for v in values if not math.isfinite(v)]
                if bad:
                    raise ValueError(f"{job['batch_function']} returned non-finite values, e.g. {bad[0]}")
                result["values"], result["batched"] = values, True
                fn = None
            except BaseException as exc:
                result["batch_error"] = short_tb(exc)

        def rows():
            for i in range(n):
                yield tuple({k: v[i] for k, v in c.items()} if isinstance(c, dict) else c[i] for c in columns)

        items = rows()
    if fn is not None:
        for item in items:
            try:
                value = fn(*item)
                extra = None
                if isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[1], dict):
                    value, extra = value
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError(f"non-finite value {value}")
                result["values"].append(value)
                if extra is not None and len(result["extras"]) < 32:
                    result["extras"].append({str(k)[:100]: (float(v) if isinstance(v, int | float) else str(v)[:100])
                                             for k, v in list(extra.items())[:20]})
            except BaseException as exc:
                result["values"].append(None)
                result["item_errors"] += 1
                if result["first_item_error"] is None:
                    result["first_item_error"] = short_tb(exc)
    result["stdout"] = "".join(out.parts)
    send_result(json.dumps(result).encode())


def result_sender(marker, fd):
    """``send(payload)`` writes ``marker + payload`` on ``fd`` once and closes it; the marker is kept
    only in this closure (not in any frame's locals)."""
    import os

    write, close = os.write, os.close

    def send(payload):
        data = marker + payload
        while data:
            data = data[write(fd, data):]
        close(fd)

    return send


if __name__ == "__main__":
    main()
