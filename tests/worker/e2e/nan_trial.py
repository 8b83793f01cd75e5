"""Trainable for test_nan.py: a trial with an even id reports a NaN loss the
way Python does (json.dumps(float('nan')) prints NaN); the others report a
finite loss. Trial 1 also prints two lines that look like results and are
not (a trailing comma; trailing garbage). ITERS results, 0.15 s apart."""
import json
import os
import sys
import time

tid = int(os.environ["CTUNE_TRIAL_ID"])
iters = int(sys.argv[1])
if tid == 1:
    print('{"training_iteration": 1, "loss": 0.5,}', flush=True)
    print('{"training_iteration": 77, "loss": 0.5} and more', flush=True)
for i in range(1, iters + 1):
    time.sleep(0.15)
    loss = float("nan") if tid % 2 == 0 else 1.0 / i + tid * 0.01
    print(json.dumps({"training_iteration": i, "loss": loss, "acc": 0.1 * i}), flush=True)
