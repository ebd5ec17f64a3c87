"""``pip install -e .`` keeps ``twistd pushengine`` working (SPEC section 11).

Twisted finds twistd plugins by scanning every ``twisted/plugins/`` directory
on ``sys.path``. setuptools' default editable install for a flat layout is an
import hook that puts no directory on ``sys.path``, so ``twistd`` said
"Unknown command: pushengine". setup.cfg states ``package_dir = {"": "."}``:
the editable install is then a ``.pth`` file naming the checkout, and
twisted/plugins/pushengine_plugin.py is found as in the checkout itself.

The test makes an editable install of this checkout into a new virtual
environment (``--no-deps``: the dependencies come from the test's own
environment through a ``.pth`` file, minus its installed copy of pushengine)
and runs ``twistd pushengine --help`` there, from another directory.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.services import unavailable

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
NETWORK_TROUBLE = ("Could not find a version", "No matching distribution", "NewConnectionError",
                   "Temporary failure in name resolution", "Network is unreachable",
                   "Max retries exceeded", "connection broken", "ReadTimeoutError")


def dependencies_without_pushengine(into: Path) -> Path:
    """A directory that links to every package of this environment except
    pushengine itself (and its plugin in twisted/plugins)."""
    site = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for entry in site.iterdir():
        name = entry.name
        if name.startswith(("pushengine", "__editable__", "_pushengine")) or name.endswith(".pth"):
            continue
        if name == "twisted":
            (into / "twisted").mkdir()
            for part in entry.iterdir():
                if part.name != "plugins":
                    (into / "twisted" / part.name).symlink_to(part)
            (into / "twisted" / "plugins").mkdir()
            for plugin in (entry / "plugins").iterdir():
                if plugin.name not in ("pushengine_plugin.py", "dropin.cache", "__pycache__"):
                    (into / "twisted" / "plugins" / plugin.name).symlink_to(plugin)
            continue
        (into / name).symlink_to(entry)
    return into


def venv_site(venv: Path) -> Path:
    found = list((venv / "lib").glob("python3*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def test_twistd_finds_the_plugin_after_an_editable_install(tmp_path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV") and not k.startswith("PUSHENGINE_")}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--disable-pip-version-check", "-q", "-e", str(ROOT)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    if install.returncode != 0:
        output = install.stdout + install.stderr
        if any(sign in output for sign in NETWORK_TROUBLE):
            unavailable("pip could not fetch the build backend (setuptools) for the "
                        f"editable install: {output.strip()[-300:]}")
        pytest.fail(f"pip install -e . failed:\n{output}")

    site = venv_site(venv)
    pth = [p for p in site.glob("*.pth") if "pushengine" in p.name]
    assert pth, list(site.iterdir())
    # the chosen mechanism: a path entry naming the checkout, not an import hook
    assert str(ROOT) in pth[0].read_text().splitlines(), pth[0].read_text()
    deps = dependencies_without_pushengine(tmp_path / "deps")
    (site / "zz_test_dependencies.pth").write_text(f"{deps}\n")

    def run(*code_and_args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), *code_and_args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    where = run("-c", "import pushengine, twisted; print(pushengine.__file__); "
                      "print(twisted.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.splitlines()[0] == str(ROOT / "pushengine" / "__init__.py")
    twistd = ["-c", "import sys; from twisted.scripts.twistd import run; "
                    "sys.argv[0] = 'twistd'; run()"]
    listed = run(*twistd, "--help")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "pushengine" in listed.stdout, listed.stdout
    help_ = run(*twistd, "pushengine", "--help")
    output = help_.stdout + help_.stderr
    assert help_.returncode == 0, output
    assert "Unknown command" not in output
    assert "--namespace=" in output and "--views=" in output, output
    # the console script the editable install made
    script = venv / "bin" / "pushengine-publish"
    assert script.exists()
    publish = subprocess.run([str(script), "--help"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert publish.returncode == 0, publish.stdout + publish.stderr
