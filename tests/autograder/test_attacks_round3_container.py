"""Nothing outlives a container-mode run, nothing crosses runs (issue 36, attacks 4 and 5).

In container mode (``AUTOGRADER_ISOLATION=container``) a run gets its own IPC namespace
where ``unshare --ipc`` works and, in every case, the seccomp filter of
:func:`autograder.confine.seal`. The probes are student cells run through the real
container-mode command (:func:`autograder.sandbox.run_job`):

* a System V shared-memory segment and a POSIX message queue made by a run do not
  exist after it (refused, or gone with its namespace): none in the host's tables;
* ``connect()`` to a pathname Unix socket this test listens on is refused, and the
  listener sees no connection;
* the filter itself: refused calls, and what it leaves alone (pipes, ``socketpair``).
"""
from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path

import pytest

from autograder import confine, isolation
from conftest import probe_runner

from test_container_mode import _container_problem

SHM_KEY = 0x36A77AC4  # the segment's key: found in the host's table if it outlived its run
QUEUE = "/issue36-attack"


@pytest.fixture
def cprobe(tmp_path, monkeypatch):
    problem = _container_problem()
    if problem:
        pytest.skip(problem)
    monkeypatch.setenv(isolation.ENV, "container")
    isolation._CHOSEN.clear()
    yield probe_runner(tmp_path)
    isolation._CHOSEN.clear()


def _host_shm_keys() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) & 0xFFFFFFFF for line in lines if line.strip()}


SHM_ATTACK = textwrap.dedent(f"""
    import ctypes, ctypes.util, os
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget({SHM_KEY}, 64 * 2**20, 0o1666)  # IPC_CREAT | 0666: 64 MB for the next run
    print("shmget", shmid, ctypes.get_errno())
    if shmid >= 0:
        addr = ctypes.c_void_p(libc.shmat(shmid, None, 0))
        ctypes.memset(addr, 65, 4096)
        print("segment", shmid)
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or None, use_errno=True)
    q = rt.mq_open(b"{QUEUE}", os.O_CREAT | os.O_RDWR, 0o666, None)
    print("mq_open", q, ctypes.get_errno())
""")


def test_no_shared_memory_segment_or_queue_outlives_a_run(cprobe):
    before = _host_shm_keys()
    out = cprobe(SHM_ATTACK)
    assert "shmget" in out.stdout, out.stderr
    assert "segment" not in out.stdout, out.stdout  # refused by seccomp (EPERM)
    assert "shmget -1 1" in out.stdout and "mq_open -1 1" in out.stdout, out.stdout
    assert SHM_KEY not in _host_shm_keys() and _host_shm_keys() <= before
    mqueue = Path("/dev/mqueue")
    if mqueue.is_dir():
        assert not (mqueue / QUEUE.lstrip("/")).exists()


def test_connect_to_a_pathname_unix_socket_of_the_host_is_refused(cprobe, tmp_path):
    folder = tmp_path / "public"
    folder.mkdir()
    folder.chmod(0o777)
    path = folder / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)  # world-writable, as a D-Bus or CI agent's socket may be
    server.listen(1)
    server.setblocking(False)
    try:
        out = cprobe(textwrap.dedent(f"""
            import socket
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect({str(path)!r})
                s.sendall(b"the reference of softmax")
                print("connected")
            except OSError as exc:
                print("refused", exc.errno)
            a, b = socket.socketpair()
            a.sendall(b"ok"); print("socketpair", b.recv(2))
        """))
        assert "refused 1" in out.stdout and "connected" not in out.stdout, out.stdout
        assert "socketpair b'ok'" in out.stdout, out.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_the_filter_refuses_what_it_lists_and_nothing_else():
    prog = confine.seal_program("x86_64")
    refused = {ins[3] for ins in prog if ins[0] == confine.BPF_JEQ_K}
    assert {29, 30, 31, 64, 68, 240, 425, 41} <= refused  # shmget, shmat, shmctl, semget, msgget, mq_open, io_uring
    assert prog[-1] == (confine.BPF_RET_K, 0, 0, confine.SECCOMP_RET_ALLOW)
    for i, (code, jt, jf, _) in enumerate(prog):  # every jump lands inside the program
        if code in (confine.BPF_JEQ_K, confine.BPF_JGE_K):
            assert i + 1 + max(jt, jf) < len(prog)
    arm = confine.seal_program("aarch64")
    assert arm[1][3] == 0xC00000B7 and {194, 186, 190, 180, 198} <= {ins[3] for ins in arm}
    with pytest.raises(confine.ConfineError, match="no seccomp table"):
        confine.seal_program("mips")


def test_a_run_has_its_own_ipc_namespace_where_unshare_permits(cprobe):
    plan = isolation.container_plan()
    if not plan["unshare_ipc"]:
        pytest.skip("unshare --ipc is not permitted here: seccomp alone closes System V IPC")
    out = cprobe("import os\nprint('ipc', os.readlink('/proc/self/ns/ipc'))")
    assert out.stdout.split()[1] != os.readlink("/proc/self/ns/ipc"), out.stdout
    assert "its own IPC namespace" in isolation.describe("container")
