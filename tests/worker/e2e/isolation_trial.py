#!/usr/bin/env python3
"""Trial for test_isolation.py / test_run_as.py.
usage: isolation_trial.py env          write what the trial sees (environment,
                                       uid, gid, groups) to <ckpt dir>/seen.json
       isolation_trial.py link TARGET  replace checkpoint.bin by a symlink to
                                       TARGET (a file outside the trial dir)
Both print one result and exit 0."""
import json
import os
import sys

d = os.environ["CTUNE_CHECKPOINT_DIR"]
if sys.argv[1] == "env":
    seen = {"env": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(),
            "euid": os.geteuid(), "groups": os.getgroups(), "cwd": os.getcwd()}
    with open(os.path.join(d, "seen.json.tmp"), "w") as f:
        json.dump(seen, f)
    os.rename(os.path.join(d, "seen.json.tmp"), os.path.join(d, "seen.json"))
    print("trial output line")
    print("trial error line", file=sys.stderr)
elif sys.argv[1] == "link":
    os.symlink(sys.argv[2], os.path.join(d, "checkpoint.bin.tmp"))
    os.rename(os.path.join(d, "checkpoint.bin.tmp"), os.path.join(d, "checkpoint.bin"))
print(json.dumps({"training_iteration": 1, "loss": 0.5}), flush=True)
