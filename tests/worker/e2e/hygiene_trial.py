"""Trainable for test_hygiene.py: starts descendants that escape a plain
kill of its process group and writes their pids into its checkpoint dir:
  bg   a shell's background sleep (the shell stays, waiting for it)
  sh   that shell
  dbl  a sleep behind a setsid() + double fork (its own session, parent gone)
then prints ITERS results (forever with 0), one every 0.1 s."""
import json
import os
import subprocess
import sys
import time

d = os.environ["CTUNE_CHECKPOINT_DIR"]
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 0


def put(name, pid):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(str(pid))
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))


sh = subprocess.Popen(["sh", "-c", 'sleep 300 & echo $! > "$0/bg.tmp"; mv "$0/bg.tmp" "$0/bg"; wait',
                       d])
put("sh", sh.pid)
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        put("dbl", os.getpid())
        os.execvp("sleep", ["sleep", "300"])
    os._exit(0)
os.waitpid(pid, 0)
put("pid", os.getpid())
i = 0
while iters == 0 or i < iters:
    i += 1
    print(json.dumps({"training_iteration": i, "loss": 1.0 / i}), flush=True)
    time.sleep(0.1)
