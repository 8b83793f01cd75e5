"""`python3 -m venv v && v/bin/pip install ./python` works offline: a fresh
venv, pip with --no-index (no PyPI at all) and build isolation on, as a user
runs it. Then the installed copy (not the source tree) is imported from
another folder, and the `ctune` console entry runs the C ctune (CTUNE_BIN_DIR:
the build's, when ctest gives it). Pure Python (label python)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.environ.get("CTUNE_BIN_DIR", "")  # the C ctune, for the console entry


class TestInstall(unittest.TestCase):
    def test_the_lookup_passes_over_scripts(self):
        sys.path.insert(0, PKG)
        self.addCleanup(sys.path.remove, PKG)
        from ctune import _bin
        tmp = tempfile.mkdtemp(prefix="ctune-find-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for sub, head in (("entry", b"#!/usr/bin/python3\n"), ("c", b"\x7fELF")):
            os.makedirs(os.path.join(tmp, sub))
            path = os.path.join(tmp, sub, "ctune")
            with open(path, "wb") as f:
                f.write(head)
            os.chmod(path, 0o755)
        saved = {k: os.environ.get(k) for k in ("PATH", "CTUNE_BIN_DIR")}
        self.addCleanup(lambda: [os.environ.pop(k, None) if v is None else
                                 os.environ.update({k: v}) for k, v in saved.items()])
        os.environ.pop("CTUNE_BIN_DIR", None)
        os.environ["PATH"] = os.path.join(tmp, "entry")
        self.assertIsNone(_bin.find("ctune"))  # only the console entry: not it
        os.environ["PATH"] = os.pathsep.join((os.path.join(tmp, "entry"), os.path.join(tmp, "c")))
        self.assertEqual(_bin.find("ctune"), os.path.join(tmp, "c", "ctune"))
        os.environ["CTUNE_BIN_DIR"] = os.path.join(tmp, "entry")  # a script there too
        self.assertEqual(_bin.find("ctune"), os.path.join(tmp, "c", "ctune"))


    def test_offline_pip_install_into_a_fresh_venv(self):
        tmp = tempfile.mkdtemp(prefix="ctune-venv-")
        self.addCleanup(shutil.rmtree, tmp, True)
        venv = os.path.join(tmp, "v")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
        py = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PIP_", "PYTHON", "CTUNE_"))}
        # A proxy that does not exist: any attempt to reach an index fails.
        env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
        # A copy, so the install leaves nothing in the source tree.
        src = os.path.join(tmp, "python")
        shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "tests"))
        r = subprocess.run([py, "-m", "pip", "install", "--no-index", src], env=env,
                           capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Successfully installed ctune", r.stdout)
        code = ("import ctune, sys; assert 'site-packages' in ctune.__file__, ctune.__file__; "
                "r = ctune.report(loss=1.5); c = ctune.Client('http://127.0.0.1:9'); "
                "print(ctune.__version__, r['training_iteration'], c.url)")
        r = subprocess.run([py, "-c", code], env=env, cwd=tmp, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip().endswith("0.1.0 1 http://127.0.0.1:9"), r.stdout)
        self.check_console_entry(os.path.join(venv, "bin"), env, tmp)
        r = subprocess.run([py, "-m", "pip", "uninstall", "-y", "ctune"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(
            venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages",
            "ctune")))

        self.assertFalse(os.path.exists(os.path.join(venv, "bin", "ctune")))

    def check_console_entry(self, vbin, env, tmp):
        """bin/ctune runs the C ctune: from CTUNE_BIN_DIR, else from PATH
        (passing over itself, first on PATH); without one it says what to
        set, at once (exit 127), never running itself again."""
        entry = os.path.join(vbin, "ctune")
        with open(entry, "rb") as f:
            self.assertEqual(f.read(2), b"#!")  # pip's wrapper script
        bins = BIN_DIR if os.path.isfile(os.path.join(BIN_DIR, "ctune")) else None
        if bins:
            for extra in ({"CTUNE_BIN_DIR": bins, "PATH": vbin + os.pathsep + "/usr/bin:/bin"},
                          {"PATH": os.pathsep.join((vbin, bins, "/usr/bin:/bin"))}):
                r = subprocess.run([entry, "--help"], env=dict(env, **extra), cwd=tmp,
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage: ctune COMMAND", r.stdout + r.stderr)
        r = subprocess.run([entry, "--help"], env=dict(env, PATH=vbin + os.pathsep + "/bin"),
                           cwd=tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 127, r.stdout + r.stderr)
        self.assertIn("cannot find the ctune program", r.stderr)
        self.assertIn("CTUNE_BIN_DIR", r.stderr)


if __name__ == "__main__":
    unittest.main()
