"""The OS-level jail: a bubblewrap command line and two seccomp filters built here (no library).

``bwrap_command`` gives the argv that runs the interpreter in fresh user, mount, PID, IPC, UTS,
network and cgroup namespaces as uid/gid 65534 with no capabilities, a new session, a clean
environment, its own ``/proc`` and minimal ``/dev``, a size-limited tmpfs as ``/tmp`` (the only
writable place), and read-only binds of only what the interpreter and the allowed imports need:
``/usr`` (plus the ``/lib*``, ``/bin`` links), the interpreter's prefix with its site-packages
hidden, and each non-stdlib allowed package (numpy...) at ``/opt/llmguide-sandbox/site``.

Seccomp (classic BPF, assembled in :func:`_assemble`):

* :func:`kernel_filter`, loaded by bwrap before ``execve``: mount/namespace/ptrace/keyring/bpf/
  io_uring/module/clock/reboot syscalls, sockets other than AF_UNIX, TIOCSTI fail with EPERM;
  other architectures and the x32 ABI are refused.
* :func:`process_filter`, loaded by the runner after numpy's import, just before the program
  runs: no ``fork``/``vfork``/``execve``/``execveat``, ``clone`` only for threads, ``clone3``
  answers ENOSYS (so libc falls back to ``clone``).

:class:`JailPid` follows the jail's PID 1 (from ``--info-fd``) so that a killed call waits until
the whole PID namespace is gone.  RLIMIT_NPROC is set in the jail but the kernel does not apply it
to a uid mapped to host root; there seccomp (no fork) and the PID namespace are what stop fork bombs.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import platform
import re
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

SITE = "/opt/llmguide-sandbox/site"
SCRATCH = "/tmp"
NOBODY = 65534
JAIL_ENV = {"PATH": "/usr/bin:/bin", "HOME": SCRATCH, "TMPDIR": SCRATCH, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
FIX = ("install bubblewrap (`apt-get install bubblewrap`, or `make setup`) and allow unprivileged user "
       "namespaces (sysctl kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0); "
       "only if a weaker, escapable Python-level jail is acceptable: SandboxLimits(isolation='python')")


class SandboxUnavailable(RuntimeError):
    """The OS jail cannot start here, so LM-written code is not run at all."""


def interpreter() -> str:
    """The real interpreter binary (a venv's ``bin/python`` is a link to it; ``-S`` skips the venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _interpreter_mounts(python: str) -> list[str]:
    prefix = os.path.realpath(sys.base_prefix)
    args: list[str] = []
    if not _under(prefix, "/usr"):
        args += ["--ro-bind", prefix, prefix]
        purelib = os.path.realpath(sysconfig.get_path("purelib", vars={"base": prefix}))
        if _under(purelib, prefix) and os.path.isdir(purelib):
            args += ["--tmpfs", purelib, "--remount-ro", purelib]   # the base interpreter's packages stay hidden
    bindir = os.path.dirname(python)
    if not _under(bindir, "/usr") and not _under(bindir, prefix):
        args += ["--ro-bind", bindir, bindir]
    return args


@cache
def package_mounts(names: tuple[str, ...]) -> tuple[str, ...]:
    """Read-only binds of the non-stdlib packages among ``names`` (and their ``<name>.libs``)."""
    lib = os.path.realpath(sysconfig.get_path("stdlib"))
    stdlib = {lib, os.path.join(lib, "lib-dynload")}
    args: list[str] = []
    for name in sorted(set(names)):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            continue
        origin = os.path.realpath(spec.origin)
        path = os.path.dirname(origin) if spec.submodule_search_locations else origin
        if os.path.dirname(path) in stdlib:
            continue
        args += ["--ro-bind", path, f"{SITE}/{os.path.basename(path)}"]
        libs = f"{path}.libs"
        if os.path.isdir(libs):
            args += ["--ro-bind", libs, f"{SITE}/{os.path.basename(libs)}"]
    return tuple(args)


def bwrap_command(bwrap: str, python: str, imports: tuple[str, ...], scratch_mb: int,
                  seccomp_fd: int | None, info_fd: int | None = None) -> list[str]:
    """The bwrap argv up to and including the interpreter (append its arguments).

    ``info_fd``: bwrap writes ``{"child-pid": <host pid of the jail's PID 1>, ...}`` there."""
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(NOBODY),
            "--gid", str(NOBODY), "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", *_system_mounts(), *_interpreter_mounts(python),
            *package_mounts(tuple(sorted({"numpy", *imports}))),
            "--proc", "/proc", "--dev", "/dev", "--size", str(scratch_mb * 1024 * 1024), "--tmpfs", SCRATCH,
            "--remount-ro", "/dev", "--remount-ro", "/",          # the size-limited /tmp is the only writable place
            "--chdir", SCRATCH, "--clearenv"]
    for key, value in JAIL_ENV.items():
        args += ["--setenv", key, value]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [*args, python]


def find_bwrap() -> str:
    for candidate in ("/usr/bin/bwrap", "/usr/local/bin/bwrap", shutil.which("bwrap")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed, so LM-written code cannot run; {FIX}")


@cache
def check_available(imports: tuple[str, ...] = ("numpy",), scratch_mb: int = 16) -> str:
    """Start the jail once (per process and import set); return bwrap's path or raise SandboxUnavailable."""
    bwrap = find_bwrap()
    python = interpreter()
    cmd = bwrap_command(bwrap, python, imports, scratch_mb, None)
    try:
        proc = subprocess.run([*cmd, "-s", "-S", "-B", "-c", f"import sys; sys.path.append({SITE!r}); import numpy"],
                              capture_output=True, timeout=60, env=dict(JAIL_ENV), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        raise SandboxUnavailable(f"the bubblewrap jail does not start ({err}); {FIX}") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip()[-600:]
        raise SandboxUnavailable(f"the bubblewrap jail does not start (exit {proc.returncode}: {detail}); {FIX}")
    return bwrap


class JailPid:
    """The jail's PID 1 (a bwrap process outside our process group), from bwrap's ``--info-fd``.

    Held as a pidfd, opened only after checking that the pid runs our bwrap command line (its
    argv holds this call's random ``call_id``), so a recycled pid is never signalled."""

    def __init__(self, info_r: int | None, call_id: str):
        self.info_r, self.call_id, self.pidfd, self.buffer, self.opened = info_r, call_id, None, b"", False

    def read(self) -> bool:
        """Read what bwrap wrote so far; True at end of file.  (Closing the pipe early would
        kill bwrap with SIGPIPE in the middle of its report and leave the jail running.)"""
        if self.info_r is None:
            return True
        try:
            chunk = os.read(self.info_r, 4096)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        self.buffer += chunk
        if self.pidfd is None and not self.opened:
            found = re.search(rb'"child-pid"\s*:\s*(\d+)\s*[,}]', self.buffer)
            if found:
                self.opened = True
                self._open(int(found.group(1)))
        if chunk and len(self.buffer) < 65536:
            return False
        os.close(self.info_r)
        self.info_r = None
        return True

    def _open(self, pid: int) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            mine = self.call_id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            mine = False
        if mine:
            self.pidfd = pidfd
        else:
            os.close(pidfd)

    def kill_and_wait(self, timeout: float) -> None:
        self.read()                          # (if the pipe was never polled: the jail ended early)
        if self.pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            with selectors.DefaultSelector() as sel:      # a pidfd is readable once the process is gone
                sel.register(self.pidfd, selectors.EVENT_READ)
                sel.select(timeout)
        except OSError:
            pass
        finally:
            self.close()

    def close(self) -> None:
        for fd in (self.info_r, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.info_r = self.pidfd = None


# --- seccomp ---------------------------------------------------------------------------------------
_LD_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW, _ERRNO, _KILL = 0x7FFF0000, 0x00050000, 0x80000000
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_CLONE_NEWNS_ANY = 0x7E020000             # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_AF_UNIX = 1
# x86_64 numbers (asm/unistd_64.h)
_KERNEL_DENY = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248,
    "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169,
    "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305, "syslog": 103, "personality": 135, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303, "quotactl": 179,
    "lookup_dcookie": 212, "vhangup": 153, "fanotify_init": 300, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "kcmp": 312,
    "uselib": 134, "iopl": 172, "ioperm": 173, "modify_ldt": 154,
}
_PROCESS_DENY = {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322}
_CLONE, _CLONE3, _SOCKET, _IOCTL = 56, 435, 41, 16


def seccomp_supported() -> bool:
    return sys.platform == "linux" and platform.machine() == "x86_64"


def _arg_lo(i: int) -> int:
    return 16 + 8 * i          # offsetof(struct seccomp_data, args[i]), low 32 bits (little endian)


def _assemble(body: list[tuple]) -> bytes:
    """Pack (code, jt, jf, k) instructions; jt/jf are offsets or the labels allow/eperm/enosys/kill."""
    tails = {"allow": _ALLOW, "eperm": _ERRNO | errno.EPERM, "enosys": _ERRNO | errno.ENOSYS, "kill": _KILL}
    prog = list(body)
    labels = {}
    for name, ret in tails.items():
        labels[name] = len(prog)
        prog.append((_RET, 0, 0, ret))
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp program too long for 8-bit jumps")
        out += struct.pack("<HBBI", code, jt, jf, k)
    return bytes(out)


def _prologue() -> list[tuple]:
    return [(_LD_ABS, 0, 0, 4), (_JEQ, 0, "kill", _AUDIT_ARCH_X86_64),      # only the x86_64 ABI
            (_LD_ABS, 0, 0, 0), (_JGE, "eperm", 0, _X32_BIT)]               # no x32 syscalls


def _arg_rule(nr: int, arg: int, test: int, value: int, deny_if_true: bool) -> list[tuple]:
    """If syscall ``nr``: load the arg's low word, deny on (test == JSET/JEQ) result; reload nr."""
    verdict = ("eperm", 0) if deny_if_true else (0, "eperm")
    return [(_JEQ, 0, 3, nr), (_LD_ABS, 0, 0, _arg_lo(arg)), (test, *verdict, value), (_LD_ABS, 0, 0, 0)]


def kernel_filter() -> bytes:
    """Loaded by bwrap (``--seccomp``): the kernel attack surface a numeric program never needs."""
    body = _prologue() + [(_JEQ, "eperm", 0, nr) for nr in sorted(_KERNEL_DENY.values())]
    body += _arg_rule(_CLONE, 0, _JSET, _CLONE_NEWNS_ANY, True)
    body += _arg_rule(_SOCKET, 0, _JEQ, _AF_UNIX, False)
    body += _arg_rule(_IOCTL, 1, _JEQ, _TIOCSTI, True)
    body += _arg_rule(_IOCTL, 1, _JEQ, _TIOCLINUX, True)
    return _assemble(body)           # falls through to "allow"


def process_filter() -> bytes:
    """Loaded by the runner before the program: no new processes, no exec; threads still work."""
    body = _prologue() + [(_JEQ, "eperm", 0, nr) for nr in sorted(_PROCESS_DENY.values())]
    body += [(_JEQ, "enosys", 0, _CLONE3)]
    body += _arg_rule(_CLONE, 0, _JSET, _CLONE_THREAD, False)
    return _assemble(body)           # falls through to "allow"


def seccomp_memfd(program: bytes) -> int:
    """An fd (to pass to bwrap) holding ``program``, positioned at its start."""
    fd = os.memfd_create("llmguide-seccomp", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else None
    if fd is None:
        r, w = os.pipe()                  # program < pipe buffer size
        os.write(w, program)
        os.close(w)
        return r
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@cache
def runner_source() -> str:
    return (Path(__file__).with_name("runner.py")).read_text()
