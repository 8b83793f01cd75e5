#!/usr/bin/env python3
"""ctune-supervise is linked statically where the build says it can be:
no program interpreter (no dynamic loader, no libc mapped and relocated at
each trial's start), position-independent (still at a random address), and
it still runs a trial: its exit status is the trial's.

usage: check_supervise_static.py BIN_DIR
"""
import os
import struct
import subprocess
import sys

PT_INTERP, PT_DYNAMIC, ET_DYN = 3, 2, 3


def program_headers(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit("%s: not a 64-bit ELF file" % path)
    end = "<" if data[5] == 1 else ">"
    e_type = struct.unpack_from(end + "H", data, 16)[0]
    phoff = struct.unpack_from(end + "Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from(end + "HH", data, 54)
    types = [struct.unpack_from(end + "I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return e_type, types


def main():
    exe = os.path.join(sys.argv[1], "ctune-supervise")
    e_type, types = program_headers(exe)
    fails = []
    if PT_INTERP in types:
        fails.append("it names a program interpreter (linked dynamically)")
    if e_type != ET_DYN:
        fails.append("it is not position-independent (ELF type %d)" % e_type)
    r = subprocess.run([exe, "--", "/bin/sh", "-c", "exit 3"], timeout=10,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 3:
        fails.append("a trial that exits 3 gave %d (stderr %r)" % (r.returncode, r.stderr))
    for f in fails:
        print("FAIL: %s: %s" % (exe, f))
    if not fails:
        print("ok: %s is static-pie and runs a trial" % exe)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
