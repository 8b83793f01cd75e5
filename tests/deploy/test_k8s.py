#!/usr/bin/env python3
"""deploy/k8s: every manifest validates against the Kubernetes 1.37 API
schema with kubernetes-validate --strict (unknown fields refused), from the
pinned venv scripts/install-deps --test makes; a missing venv FAILS this test (it
is not optional). Also: the validator refuses an unknown field (so --strict
is really on), and the manifests hold what docs/deploy.md promises (a
StatefulSet with volumeClaimTemplates, a Service, the tokens Secret, GPU
workers with nvidia.com/gpu requests and limits, both probes and a preStop
hook that gives the worker a preemption notice within the pod's grace).
usage: test_k8s.py [BIN_DIR]"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
K8S = os.path.normpath(os.path.join(HERE, "..", "..", "deploy", "k8s"))
VENV = os.path.expanduser(os.environ.get("CTUNE_K8S_VENV",
                                         "~/.cache/ctune/kubernetes-validate-1.37.0"))
TOOL = os.path.join(VENV, "bin", "kubernetes-validate")
PY = os.path.join(VENV, "bin", "python")


def validate(files):
    return subprocess.run([TOOL, "--strict", "-k", "1.37.0"] + files, capture_output=True,
                          text=True, timeout=120)


def main():
    assert os.access(TOOL, os.X_OK), (
        "%s is missing: run scripts/install-deps --test (it makes the pinned venv "
        "kubernetes-validate-1.37.0)" % TOOL)
    files = sorted(glob.glob(os.path.join(K8S, "*.yaml")))
    assert len(files) >= 3, files
    r = validate(files)
    out = r.stdout + r.stderr
    print(out.strip())
    assert r.returncode == 0, "kubernetes-validate failed (exit %d)" % r.returncode
    assert "WARN" not in out and "ERROR" not in out, out

    # The same tool refuses an unknown field: the check above means something.
    tmp = tempfile.mkdtemp(prefix="ctune-k8s-")
    try:
        bad = os.path.join(tmp, "bad.yaml")
        text = open(os.path.join(K8S, "server.yaml")).read()
        assert "      terminationGracePeriodSeconds: 30\n" in text
        open(bad, "w").write(text.replace("      terminationGracePeriodSeconds: 30\n",
                                          "      terminationGracePeriodSeconds: 30\n"
                                          "      terminationGraceSeconds: 30\n"))
        r = validate([bad])
        assert r.returncode != 0, "an unknown field passed:\n" + r.stdout + r.stderr
        print("an unknown field is refused: ok")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # What the manifests hold, read with the venv's PyYAML.
    dump = subprocess.run([PY, "-c", "import json, sys, yaml\n"
                           "print(json.dumps([d for f in sys.argv[1:] for d in "
                           "yaml.safe_load_all(open(f)) if d]))"] + files,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    docs = {(d["kind"], d["metadata"]["name"]): d for d in json.loads(dump)}
    sts = docs[("StatefulSet", "ctune-server")]["spec"]
    assert sts["replicas"] == 1 and sts["volumeClaimTemplates"], sts
    srv = sts["template"]["spec"]["containers"][0]
    assert "--token-file=/run/ctune/tokens" in srv["command"], srv["command"]
    assert srv["readinessProbe"]["httpGet"]["path"] == "/healthz"
    svc = docs[("Service", "ctune-server")]["spec"]
    assert svc["ports"][0]["port"] == 8470, svc
    sec = docs[("Secret", "ctune-tokens")]
    assert set(sec["stringData"]) == {"tokens", "worker-token"}, sec
    dep = docs[("Deployment", "ctune-worker-gpu")]["spec"]["template"]["spec"]
    wrk = dep["containers"][0]
    for part in ("requests", "limits"):
        assert wrk["resources"][part]["nvidia.com/gpu"] == 1, wrk["resources"]
    assert "readinessProbe" in wrk and "livenessProbe" in wrk, wrk
    assert "--server=http://ctune-server:8470" in wrk["command"], wrk["command"]
    # preStop: a preemption notice the worker polls, within the pod's grace.
    pre = " ".join(wrk["lifecycle"]["preStop"]["exec"]["command"])
    flags = dict(a.split("=", 1) for a in wrk["command"] if a.startswith("--preemption"))
    notice = flags["--preemption-notice"]
    assert notice.startswith("file:") and "touch %s" % notice[5:] in pre, (pre, flags)
    assert int(flags["--preemption-grace-s"]) < dep["terminationGracePeriodSeconds"], flags
    print("manifests: StatefulSet+PVC, Service, Secret, GPU worker Deployment with probes "
          "and a preStop preemption notice")
    print("PASS")


if __name__ == "__main__":
    main()
