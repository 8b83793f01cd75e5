#!/usr/bin/env python3
"""make package: builds the Debian package from this build dir (cpack -G DEB,
deploy/install.cmake), checks its control fields and contents with dpkg-deb
(the layout of docs/protocol.md#installed-layout; Depends naming the Debian
package of every library the programs link, never a CUDA library), unpacks
it into a temp root (dpkg-deb -x) and runs the unpacked programs from there:
`ctune --help`, and ctune-server serving the dashboard of its own
share/ctune/web (found relative to the executable: a marker added to the
unpacked copy comes back in GET /).
usage: test_package.py BIN_DIR BUILD_DIR"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

BUILD = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(sys.argv[1], ".."))
# the Debian runtime libraries the programs link, by package
WANT_DEPENDS = ["libmicrohttpd12", "libcjson1", "libuv1", "libsqlite3-0", "libcurl4", "zlib1g",
                "libopenblas0", "libc6"]
PATHS = ["usr/bin/ctune", "usr/bin/ctune-server", "usr/bin/ctune-worker", "usr/bin/ctune-supervise",
         "usr/bin/ctune-train",
         "usr/share/ctune/web/index.html", "usr/share/ctune/web/js/app.js",
         "usr/share/ctune/examples/quick.json", "usr/share/ctune/examples/command/train.sh",
         "usr/share/doc/ctune/README.md", "usr/share/doc/ctune/deploy.md",
         "usr/share/ctune/deploy/systemd/worker.env.example",
         "usr/lib/systemd/system/ctune-server.service",
         "usr/lib/systemd/system/ctune-worker@.service"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, "%s: exit %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:],
                                                      r.stderr[-3000:])
    return r.stdout


def owner_package(lib):
    """The Debian package holding a shared library, by its soname."""
    r = subprocess.run(["dpkg", "-S", "*/" + lib], capture_output=True, text=True)
    return {line.split(":")[0] for line in r.stdout.splitlines() if ":" in line}


def main():
    for tool in ("dpkg-deb", "cpack", "readelf", "dpkg"):
        if not shutil.which(tool):
            print("SKIP: %s not found: the Debian package was NOT built or checked" % tool)
            sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="ctune-package-")
    server = None
    try:
        out = os.path.join(tmp, "out")
        run(["cpack", "-G", "DEB", "-B", out, "--config", os.path.join(BUILD, "CPackConfig.cmake")],
            cwd=BUILD, timeout=170)
        debs = glob.glob(os.path.join(out, "ctune_*.deb"))
        assert len(debs) == 1, os.listdir(out)
        deb = debs[0]
        print("built", os.path.basename(deb), "(%d KiB)" % (os.path.getsize(deb) // 1024))

        fields = {}
        for name in ("Package", "Version", "Architecture", "Depends", "Recommends", "Maintainer",
                     "Description"):
            fields[name] = run(["dpkg-deb", "-f", deb, name]).strip()
        assert fields["Package"] == "ctune", fields
        assert re.fullmatch(r"\d+\.\d+\.\d+", fields["Version"]), fields
        assert fields["Architecture"] == run(["dpkg", "--print-architecture"]).strip(), fields
        assert fields["Maintainer"] and fields["Description"], fields
        depends = [alt.strip().split()[0] for d in fields["Depends"].split(",")
                   for alt in d.split("|")]
        for want in WANT_DEPENDS:
            assert want in depends, "Depends lacks %s: %s" % (want, fields["Depends"])
        for bad in ("cuda", "cublas", "nccl", "nvidia"):
            assert bad not in fields["Depends"].lower(), "Depends names %s: %s" % (
                bad, fields["Depends"])
        assert "libjs-chart.js" in fields["Recommends"], fields
        print("control: Depends:", fields["Depends"])

        listing = run(["dpkg-deb", "-c", deb])
        files = {re.sub(r"^\./", "", line.split()[5]) for line in listing.splitlines()
                 if len(line.split()) >= 6}
        for p in PATHS:
            assert p in files, "%s missing from the package:\n%s" % (p, "\n".join(sorted(files)))
        if os.path.exists(os.path.join(BUILD, "lib", "libctune-cuda.so")):
            assert "usr/lib/ctune/libctune-cuda.so" in files, "the CUDA plugin is not packaged"
            print("contents: the CUDA plugin in usr/lib/ctune/")
        assert not [f for f in files if "/tests/" in f or f.endswith(".cmake")], \
            [f for f in files if "/tests/" in f or f.endswith(".cmake")]
        print("contents: %d entries, the installed layout" % len(files))

        root = os.path.join(tmp, "root")
        run(["dpkg-deb", "-x", deb, root])
        unit = open(os.path.join(root, "usr/lib/systemd/system/ctune-server.service")).read()
        assert "ExecStart=/usr/bin/ctune-server " in unit, unit
        unit = open(os.path.join(root, "usr/lib/systemd/system/ctune-worker@.service")).read()
        assert "ExecStart=/usr/bin/ctune-worker " in unit, unit

        # Every library a packaged program links comes from a package in
        # Depends (or is a sanitizer's runtime, in an ASan build).
        for prog in ("ctune", "ctune-server", "ctune-worker", "ctune-train"):
            dyn = run(["readelf", "-d", os.path.join(root, "usr/bin", prog)])
            for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn):
                if re.match(r"lib(asan|ubsan|lsan|tsan)\.", lib):
                    continue
                owners = owner_package(lib)
                assert owners & set(depends) or any(o.split(":")[0] in depends for o in owners), \
                    "%s links %s (package %s), which Depends lacks: %s" % (
                        prog, lib, sorted(owners), fields["Depends"])
        print("libraries: every NEEDED library of bin/* is in Depends")

        bindir = os.path.join(root, "usr", "bin")
        help_out = run([os.path.join(bindir, "ctune"), "--help"], timeout=20)
        assert "usage" in help_out.lower(), help_out
        print("unpacked ctune --help: ok")

        # The unpacked server finds the unpacked dashboard (not the source
        # tree's web/ it was configured with): a marker proves which.
        index = os.path.join(root, "usr/share/ctune/web/index.html")
        marker = "<!-- ctune-package-test-%d -->" % os.getpid()
        with open(index, "a") as f:
            f.write(marker + "\n")
        work = os.path.join(tmp, "run")
        os.mkdir(work)
        server = subprocess.Popen([os.path.join(bindir, "ctune-server"), "--db",
                                   os.path.join(work, "ctune.db"), "--port", "0", "--no-auth"],
                                  cwd=work, stdout=subprocess.PIPE,
                                  stderr=open(os.path.join(tmp, "server.log"), "w"), text=True)
        line = server.stdout.readline()
        m = re.search(r"listening on (http://\S+:\d+)", line)
        assert m, "no listening line: %r\n%s" % (line, open(os.path.join(tmp, "server.log")).read())
        with urllib.request.urlopen(m.group(1) + "/", timeout=10) as r:
            assert r.status == 200
            page = r.read().decode()
        assert marker in page, "GET / did not serve the unpacked share/ctune/web:\n" + page[:500]
        with urllib.request.urlopen(m.group(1) + "/healthz", timeout=10) as r:
            assert r.status == 200
        print("unpacked ctune-server: GET / serves usr/share/ctune/web/index.html")
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
        server = None
    finally:
        if server and server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
