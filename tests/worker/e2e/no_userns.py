#!/usr/bin/env python3
"""Runs a program where no user namespace can be made, as on a kernel or a
distribution that forbids unprivileged ones (for test_trial_view.py).
usage (as root): no_userns.py root|nobody [--mount] PROGRAM ARGS...
This process enters a user namespace of its own (root and nobody mapped to
themselves by a helper outside), sets its user.max_user_namespaces to 0,
with --mount also takes a mount namespace of its own (so that its root may
make mount namespaces, as a real root can), becomes USER (unless root) and
execs PROGRAM: same pid, so signals reach it."""
import ctypes
import os
import pwd
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
libc = ctypes.CDLL(None, use_errno=True)

nobody = pwd.getpwnam("nobody")
user = pwd.getpwnam(sys.argv[1])
if user.pw_uid not in (0, nobody.pw_uid):
    sys.exit("no_userns.py: USER is root or nobody")
args = sys.argv[2:]
mount = args[0] == "--mount"
if mount:
    args = args[1:]
me = os.getpid()
r, w = os.pipe()
helper = os.fork()
if helper == 0:  # outside: maps the ids once the namespace exists
    os.close(w)
    os.read(r, 1)
    ids = "0 0 1\n%d %d 1\n" % (nobody.pw_uid, nobody.pw_uid)
    gids = "0 0 1\n%d %d 1\n" % (nobody.pw_gid, nobody.pw_gid)
    with open("/proc/%d/uid_map" % me, "w") as f:
        f.write(ids)
    with open("/proc/%d/gid_map" % me, "w") as f:
        f.write(gids)
    os._exit(0)
os.close(r)
if libc.unshare(CLONE_NEWUSER) != 0:
    sys.exit("unshare(CLONE_NEWUSER): %s" % os.strerror(ctypes.get_errno()))
os.write(w, b"x")
os.close(w)
_, st = os.waitpid(helper, 0)
if st != 0:
    sys.exit("the helper could not map the ids")
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
if mount and libc.unshare(CLONE_NEWNS) != 0:
    sys.exit("unshare(CLONE_NEWNS): %s" % os.strerror(ctypes.get_errno()))
if user.pw_uid:
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
os.execv(args[0], args)
