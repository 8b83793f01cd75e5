#!/usr/bin/env python3
"""One writer per status (ARCHITECTURE.md "Life cycles").

A trial's status is assigned only in trial_set_status (server/state/
state_trial.c, reached through state_trial_event) and an experiment's only in
experiment_set_status (server/state/state_experiment.c, reached through
state_experiment_event), apart from the loader that rebuilds the model from
the database (server/state/state_load.c). This check finds every other
assignment of a TS_/ES_ status in the server and names its line.

Usage: check_status.py [REPO_ROOT]
"""
import os
import re
import sys

WRITERS = {("server/state/state_trial.c", "trial_set_status"),
           ("server/state/state_experiment.c", "experiment_set_status")}
LOADER = "server/state/state_load.c"
# x->status = ..., x.status = ... (not ==), with a trial or experiment status
# on the right: a TS_/ES_ constant, or an enum trial_status/exp_status value.
ASSIGN = re.compile(r"(?:->|\.)\s*status\s*=(?!=)\s*([^;]*)")
STATUS_RHS = re.compile(r"\b(TS|ES)_[A-Z]+\b|^\s*st\s*$")
FUNC = re.compile(r"^[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\([^;]*$")


def strip_comments(text):
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad, n = [], 0
    for dirpath, _, files in os.walk(os.path.join(root, "server")):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if rel == LOADER or rel.startswith("server/store/"):
                continue  # the loader; store rows carry status names (text), not the model's
            n += 1
            func = None
            code = strip_comments(open(os.path.join(dirpath, name), encoding="utf-8").read())
            for lineno, line in enumerate(code.splitlines(), 1):
                m = FUNC.match(line)
                if m and not line.startswith(("if", "for", "while", "switch", "return")):
                    func = m.group(1)
                for rhs in ASSIGN.findall(line):
                    if not STATUS_RHS.search(rhs):
                        continue
                    if (rel, func) in WRITERS:
                        continue
                    bad.append(f"{rel}:{lineno}: {func or '?'}() assigns a status ({rhs.strip()}): "
                               "use state_trial_event / state_experiment_event")
    for b in bad:
        print(b)
    if bad:
        print(f"check_status: {len(bad)} status assignment(s) outside the two writers")
        return 1
    print(f"check_status: {n} server files; statuses written only by their transition functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
