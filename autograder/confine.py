"""Confine this process with Landlock and seccomp, then exec a command: the container mode's walls.

``python confine.py --read DIR ... --write DIR ... [--no-tcp] -- COMMAND ...``

Run by the grader in container mode (:mod:`autograder.isolation`), as the run's own
unprivileged user, before the runner: Landlock (Linux ≥ 5.13, no privilege and no
user namespace needed, allowed by Docker's default seccomp profile) restricts this
process and everything it starts to reading the ``--read`` folders and files and
writing the ``--write`` ones; with ``--no-tcp`` (Landlock ABI ≥ 4) no TCP connect or
bind at all; where the kernel has ABI ≥ 6, no abstract Unix socket and no signal
reaches a process outside the confinement. Standard library only: it is copied
into the run's library folder and runs before anything else is imported.

Then a seccomp filter (:func:`seal`) closes what Landlock does not cover: no Unix
socket can be made (``socket(AF_UNIX, …)``: no ``connect()`` to a pathname socket of
the host, a D-Bus, X11 or CI agent's), no System V shared memory, message queue or
semaphore and no POSIX message queue can be made or reached (they would outlive the
run and carry data to the next one), no io_uring (which would reach sockets past the
filter), and no system call of another ABI (x32, i386). Each is refused with EPERM;
``socketpair`` and pipes still work.

Exit status 126 with a message on stderr when Landlock or seccomp is missing or a
rule fails: the grader then reports the run as crashed rather than running it unconfined.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # the same numbers on x86-64 and arm64
PR_SET_NO_NEW_PRIVS = 38
RULE_PATH_BENEATH = 1
CREATE_RULESET_VERSION = 1

# Filesystem rights (linux/landlock.h), by the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
ABI1_ALL = (1 << 13) - 1
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


class ConfineError(RuntimeError):
    """Landlock is not available, or a rule could not be added."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (or seccomp forbids it)."""
    libc = _libc()
    version = libc.syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(0, int(version))


def _handled_fs(abi: int) -> int:
    rights = ABI1_ALL
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def confine(read: list[str], write: list[str], *, no_tcp: bool = False) -> int:
    """Restrict this process (and its future children) to ``read`` and ``write``.

    Args:
        read: paths (folders or files) that may be read and executed, with what is beneath.
        write: paths that may also be written, created in and removed from.
        no_tcp: forbid every TCP connect and bind (needs ABI ≥ 4).

    Returns:
        The ABI version used. Raises :class:`ConfineError` when Landlock is missing,
        ``no_tcp`` is asked of a kernel without network rules, or a rule fails.
    """
    abi = abi_version()
    if abi < 1:
        raise ConfineError("Landlock is not available in this kernel (Linux ≥ 5.13 with landlock in the LSM list)")
    if no_tcp and abi < 4:
        raise ConfineError(f"Landlock ABI {abi} has no network rules (ABI 4, Linux 6.7, is needed for --no-tcp)")
    libc = _libc()
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if no_tcp else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise ConfineError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        read_rights = EXECUTE | READ_FILE | READ_DIR
        for paths, rights in ((read, read_rights), (write, handled)):
            for path in paths:
                try:
                    target = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a path this machine does not have: nothing to allow
                try:
                    allowed = rights if stat.S_ISDIR(os.fstat(target).st_mode) else rights & FILE_RIGHTS
                    rule = _PathBeneath(allowed & handled, target)
                    if libc.syscall(SYS_ADD_RULE, fd, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                        raise ConfineError(f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
                finally:
                    os.close(target)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfineError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(SYS_RESTRICT, fd, ctypes.c_uint32(0)) < 0:
            raise ConfineError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    return abi


# --------------------------------------------------------------------------- seccomp

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
AF_UNIX = 1
X32_SYSCALL_BIT = 0x40000000
# Per machine: its audit architecture, socket(), and the calls refused whatever their
# arguments: System V shm/msg/sem, POSIX message queues, io_uring (asm/unistd*.h).
_SYSCALLS = {
    "x86_64": (0xC000003E, 41, (29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71,
                                240, 241, 242, 243, 244, 245, 425, 426, 427)),
    "aarch64": (0xC00000B7, 198, (194, 196, 195, 197, 190, 193, 191, 192, 186, 189, 188, 187,
                                  180, 181, 182, 183, 184, 185, 425, 426, 427)),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seal_program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The seccomp-BPF program of :func:`seal` as ``(code, jt, jf, k)`` instructions.

    Args:
        machine: ``uname -m`` (default: this one's).

    Returns:
        The instructions. Raises :class:`ConfineError` for a machine it has no table for.
    """
    machine = machine or os.uname().machine
    if machine not in _SYSCALLS:
        raise ConfineError(f"no seccomp table for {machine!r} (x86_64 and aarch64 are known)")
    arch, socket_nr, refused = _SYSCALLS[machine]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    prog = [(BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            (BPF_JEQ_K, 1, 0, arch), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
            (BPF_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":  # the x32 ABI shares the architecture: refuse it by its bit
        prog += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    for nr in refused:
        prog += [(BPF_JEQ_K, 0, 1, nr), (BPF_RET_K, 0, 0, deny)]
    prog += [(BPF_JEQ_K, 0, 3, socket_nr),
             (BPF_LD_W_ABS, 0, 0, 16),  # seccomp_data.args[0], its low 32 bits: the domain
             (BPF_JEQ_K, 0, 1, AF_UNIX), (BPF_RET_K, 0, 0, deny),
             (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    return prog


def seal() -> None:
    """Install the seccomp filter of :func:`seal_program` on this process and its children.

    Needs ``no_new_privs`` (set by :func:`confine`). Raises :class:`ConfineError` when
    the kernel refuses it.
    """
    prog = seal_program()
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise ConfineError(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")


def main(argv: list[str]) -> None:
    """Parse ``--read``/``--write``/``--no-tcp`` up to ``--``, confine, exec the rest."""
    read, write, no_tcp = [], [], False
    args = list(argv)
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--no-tcp":
            no_tcp = True
        elif flag in ("--read", "--write") and args:
            (read if flag == "--read" else write).append(args.pop(0))
        else:
            sys.stderr.write(f"confine: unknown argument {flag!r}\n")
            sys.exit(2)
    command = args[1:]
    if not command:
        sys.stderr.write("confine: no command after --\n")
        sys.exit(2)
    try:
        confine(read, write, no_tcp=no_tcp)
        seal()
    except ConfineError as exc:
        sys.stderr.write(f"confine: {exc}\n")
        sys.exit(126)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
