"""The `ctune` console entry that `pip install ./python` makes: it runs the
C `ctune` program (found as _bin.find finds it: $CTUNE_BIN_DIR, the
package's bin/, PATH; never this entry point itself) with the same
arguments, in place of this process."""
import os
import sys

from . import _bin


def main():
    prog = _bin.find("ctune")
    if prog is None:
        print("ctune: cannot find the ctune program (ctune's C command line, built by `make "
              "build` into build/bin): set CTUNE_BIN_DIR to its folder or put it on PATH",
              file=sys.stderr)
        return 127
    os.execv(prog, [prog] + sys.argv[1:])
    return 127  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
