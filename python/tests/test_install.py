"""`python3 -m venv v && v/bin/pip install ./python` works offline: a fresh
venv, pip with --no-index (no PyPI at all) and build isolation on, as a user
runs it. Then the installed copy (not the source tree) is imported from
another folder. Pure Python (label python)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TestInstall(unittest.TestCase):
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
        r = subprocess.run([py, "-m", "pip", "uninstall", "-y", "ctune"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(
            venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages",
            "ctune")))


if __name__ == "__main__":
    unittest.main()
