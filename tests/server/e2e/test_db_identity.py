#!/usr/bin/env python3
"""One database, one server, whatever path names it: a second ctune-server on
the same database file through a symlink, a relative path, a hard link or a
bind mount of its folder is refused, naming the running server's pid and the
database's real path; a server started through a symlink keeps its lock, its token file
and the -wal it flushes (--durability full) beside the real file, never
beside the link."""
import os
import subprocess

from ctune_e2e import BIN_DIR, Runner, Server, experiment, read_tokens, tmpdir


def refused(db_arg, cwd=None, wrap=(), timeout=30):
    """Starts a second server with --db db_arg; returns (exit code, stderr)."""
    cmd = list(wrap) + [os.path.join(os.path.abspath(BIN_DIR), "ctune-server"), "--db", db_arg,
                        "--port", "0"]
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=timeout)
    return p.returncode, p.stderr.decode()


def assert_refused(rc, err, s, real, given):
    assert rc == 1, (rc, err)
    want = "database %s (--db %s) is in use by another ctune-server (pid %d" % (
        real, given, s.proc.pid)
    assert want in err, (want, err)


def test_second_server_through_symlink_or_relative_path():
    s = Server()
    real = os.path.realpath(s.db)
    d = os.path.dirname(real)
    os.symlink("ctune.db", os.path.join(d, "link.db"))
    link = os.path.join(d, "link.db")
    rc, err = refused(link)
    assert_refused(rc, err, s, real, link)
    # It made nothing of its own beside the link.
    for suffix in (".lock", ".tokens", "-wal", "-shm", ".login-url"):
        assert not os.path.exists(link + suffix), (suffix, os.listdir(d))
    # A relative path from another folder.
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    rc, err = refused("../ctune.db", cwd=sub)
    assert_refused(rc, err, s, real, "../ctune.db")
    # The first server went on alone, and the lock went with it.
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    s.stop()
    s2 = Server(db=link, token=s.token)  # the database through the link, alone: it starts
    assert s2.ok("GET", "/api/v1/experiments")["experiments"][0]["name"] == "e"
    s2.stop()


def test_second_server_through_hard_link():
    """A hard link is the same file under another name that no path
    resolution finds: the lock is the file's own, so it is refused too, and
    the message says where the first server opened it."""
    s = Server()
    real = os.path.realpath(s.db)
    d = tmpdir()  # another folder: nothing beside the link is the first server's
    link = os.path.join(d, "hard.db")
    os.link(real, link)
    rc, err = refused(link, timeout=10)  # not refused: it serves until killed
    want = "database %s is in use by another ctune-server (pid %d, opened as %s)" % (
        link, s.proc.pid, real)
    assert rc == 1 and want in err, (rc, want, err)
    for suffix in (".lock", ".tokens", "-wal", "-shm", ".login-url"):  # it made nothing
        assert not os.path.exists(link + suffix), (suffix, os.listdir(d))
    # The first server went on alone.
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    s.stop()


def test_bind_mount_of_the_folder():
    """Another path to the same folder: a bind mount, made in a mount
    namespace of the second server's own (unshare -m; root only)."""
    s = Server()
    real = os.path.realpath(s.db)
    other = tmpdir()
    probe = subprocess.run(["unshare", "-m", "true"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        print("  (bind mount: skipped: unshare -m needs root here)")
        s.stop()
        return
    given = os.path.join(other, "ctune.db")
    rc, err = refused(given, wrap=["unshare", "-m", "sh", "-c",
                                   'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                                   os.path.dirname(real), other])
    # The second server's real path is the mount's; the message also says
    # where the first one opened the database.
    want = "database %s is in use by another ctune-server (pid %d, opened as %s)" % (
        given, s.proc.pid, real)
    assert rc == 1 and want in err, (rc, want, err)
    s.stop()


def test_durable_flush_of_the_real_wal():
    """A single server through a symlink under --durability full: its open
    -wal files are the database's own (the file SQLite writes and the
    server flushes), and nothing was created beside the link."""
    d = tmpdir()
    real = os.path.join(d, "ctune.db")
    link = os.path.join(d, "link.db")
    os.symlink("ctune.db", link)  # dangling: the server creates the real file
    s = Server(db=link, args=["--durability", "full"])
    s.token = read_tokens(real + ".tokens")["admin"]  # beside the real file
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    fds = os.path.join("/proc", str(s.proc.pid), "fd")
    opened = {os.readlink(os.path.join(fds, f)) for f in os.listdir(fds)}
    wals = {p for p in opened if p.endswith("-wal")}
    assert wals == {real + "-wal"}, opened
    assert os.path.getsize(real + "-wal") > 0
    for suffix in (".lock", ".tokens", "-wal", "-shm", ".login-url"):
        assert not os.path.exists(link + suffix), (suffix, os.listdir(d))
        assert os.path.exists(real + suffix), (suffix, os.listdir(d))
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_second_server_through_symlink_or_relative_path)
    r.run(test_second_server_through_hard_link)
    r.run(test_bind_mount_of_the_folder)
    r.run(test_durable_flush_of_the_real_wal)
    r.done()
