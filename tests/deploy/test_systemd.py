"""deploy/systemd/pushengine.service: ``systemd-analyze verify`` and what
SPEC 21 asks of the unit; the options of its environment file."""
from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

from pushengine.app.tap import FLAGS, PARAMETERS, env_name
from tests.services import require_program

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "pushengine.service"
ENV = ROOT / "deploy" / "systemd" / "pushengine.env"
# the node's default --shutdown-timeout (SPEC 21), counted from SIGTERM
SHUTDOWN_TIMEOUT = next(default for name, default, *_ in PARAMETERS if name == "shutdown-timeout")


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str     # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text("utf-8"))
    return parser


def test_systemd_analyze_verify_is_silent(tmp_path) -> None:
    """Clean: no error and no warning. The unit names the program where the
    README's install puts it (/opt/pushengine/bin/twistd), which verify
    requires to exist: the copy verified here names an executable that does."""
    analyze = require_program("systemd-analyze")
    text = UNIT.read_text("utf-8")
    assert "ExecStart=/opt/pushengine/bin/twistd " in text
    stand_in = shutil.which("true") or "/bin/true"
    copy = tmp_path / "pushengine.service"
    copy.write_text(text.replace("/opt/pushengine/bin/twistd", stand_in), "utf-8")
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), \
        done.stdout + done.stderr


def test_verify_would_see_a_mistake(tmp_path) -> None:
    """The check above is not vacuous: a misspelt key is reported."""
    analyze = require_program("systemd-analyze")
    copy = tmp_path / "pushengine.service"
    copy.write_text(UNIT.read_text("utf-8").replace("/opt/pushengine/bin/twistd", "/bin/true")
                    .replace("LimitNOFILE=", "LimitNOFILES="), "utf-8")
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                          timeout=60)
    assert "LimitNOFILES" in done.stdout + done.stderr


def test_the_unit_says_what_production_needs() -> None:
    service = unit()["Service"]
    assert service["Type"] == "simple"                 # twistd -n, no sd_notify
    assert service["User"] not in ("", "root") and service["Group"] not in ("", "root")
    assert service["KillSignal"] == "SIGTERM"
    assert float(service["TimeoutStopSec"].rstrip("s")) > SHUTDOWN_TIMEOUT
    assert service["Restart"] == "on-failure"
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["EnvironmentFile"] == "/etc/pushengine/pushengine.env"
    command = service["ExecStart"].split()
    assert command[:2] == ["/opt/pushengine/bin/twistd", "--nodaemon"]
    assert "pushengine" in command and "--logfile=-" in command
    # no reload: the options and views are read at start (docs/deploy.md says so)
    assert "ExecReload" not in service
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def test_the_environment_file_names_real_options() -> None:
    known = {env_name(name) for name, *_ in PARAMETERS} | {env_name(n) for n, *_ in FLAGS}
    names = re.findall(r"^(PUSHENGINE_[A-Z_]+)=", ENV.read_text("utf-8"), re.M)
    assert names and set(names) <= known, set(names) - known
