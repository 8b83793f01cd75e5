#!/usr/bin/env python3
"""deploy/systemd: the units carry what docs/deploy.md promises (Type=notify,
a state directory, the sandboxing options, the worker's instance picking its
configuration file), and `systemd-analyze verify` accepts them without a
single warning (it exits 0 on unknown keys, so any output fails). ExecStart
is pointed at the build's programs for the check: verify wants them to exist.
Without systemd-analyze that half is skipped, loudly (exit 77).
usage: test_units.py BIN_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = os.path.join(HERE, "..", "..", "deploy", "systemd")
BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", ""))


def service_section(path):
    out = {}
    section = None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def main():
    want_both = {"Type": "notify", "ProtectSystem": "strict", "PrivateTmp": "yes",
                 "NoNewPrivileges": "yes", "Restart": "on-failure", "DynamicUser": "yes"}
    server = service_section(os.path.join(UNITS, "ctune-server.service"))
    worker = service_section(os.path.join(UNITS, "ctune-worker@.service"))
    for name, unit in (("ctune-server.service", server), ("ctune-worker@.service", worker)):
        for k, v in want_both.items():
            assert unit.get(k) == [v], "%s: %s=%s expected, has %r" % (name, k, v, unit.get(k))
        for k in ("StateDirectory", "ReadWritePaths", "EnvironmentFile", "ProtectHome"):
            assert k in unit, "%s lacks %s=" % (name, k)
    assert server["StateDirectory"] == ["ctune"] and server["ProtectHome"] == ["yes"]
    assert "%S/ctune/ctune.db" in server["ExecStart"][0], server["ExecStart"]
    assert worker["EnvironmentFile"] == ["/etc/ctune/worker-%i.env"], worker["EnvironmentFile"]
    assert worker["StateDirectory"] == ["ctune-worker/%i"]
    assert "--work-dir %S/ctune-worker/%i" in worker["ExecStart"][0]
    assert worker["Delegate"] == ["yes"] and worker["KillMode"] == ["mixed"]
    print("units: the promised directives are there")

    tool = shutil.which("systemd-analyze")
    if not tool:
        print("SKIP: systemd-analyze not found: the units were NOT verified by systemd "
              "(apt-get install systemd)")
        sys.exit(77)
    for prog in ("ctune-server", "ctune-worker"):
        assert os.access(os.path.join(BIN, prog), os.X_OK), "%s not built in %s" % (prog, BIN)
    tmp = tempfile.mkdtemp(prefix="ctune-units-")
    try:
        for name in os.listdir(UNITS):
            if name.endswith(".service"):
                text = open(os.path.join(UNITS, name)).read().replace("/usr/bin/", BIN + "/")
                open(os.path.join(tmp, name), "w").write(text)
        # the template as an instance, the way systemctl starts it
        shutil.copy(os.path.join(tmp, "ctune-worker@.service"),
                    os.path.join(tmp, "ctune-worker@gpu0.service"))
        for unit in ("ctune-server.service", "ctune-worker@gpu0.service"):
            r = subprocess.run([tool, "verify", os.path.join(tmp, unit)], capture_output=True,
                               text=True, timeout=60)
            out = (r.stdout + r.stderr).strip()
            assert r.returncode == 0 and not out, "systemd-analyze verify %s: exit %d\n%s" % (
                unit, r.returncode, out)
            print("systemd-analyze verify %s: clean" % unit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
