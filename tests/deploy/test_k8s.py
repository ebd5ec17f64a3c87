"""deploy/k8s/: every manifest against the Kubernetes API's schemas
(``kubernetes-validate --strict``, which ships them: it runs offline), and
how the parts fit together — probes, preStop, grace period, selectors, the
views file's mount, the options in the environment."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from pushengine.app.tap import FLAGS, PARAMETERS, env_name
from pushengine.views.spec import load_catalog
from tests.services import require_program

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# the node's default --shutdown-timeout (SPEC 21), counted from SIGTERM
SHUTDOWN_TIMEOUT = next(default for name, default, *_ in PARAMETERS if name == "shutdown-timeout")


def manifests() -> dict[str, dict[str, Any]]:
    """By kind, each manifest (one document a file)."""
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text("utf-8")):
            assert doc["kind"] not in found, doc["kind"]
            found[doc["kind"]] = doc
    return found


def container() -> dict[str, Any]:
    (c,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def test_kubernetes_validate_strict_accepts_every_manifest() -> None:
    tool = require_program("kubernetes-validate")
    files = sorted(str(p) for p in K8S.glob("*.yaml"))
    assert len(files) == 4
    done = subprocess.run([tool, "--strict", *files], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == 4, done.stdout


def test_the_validator_would_see_a_mistake(tmp_path) -> None:
    tool = require_program("kubernetes-validate")
    bad = tmp_path / "deployment.yaml"
    bad.write_text((K8S / "deployment.yaml").read_text("utf-8")
                   .replace("readinessProbe:", "readinesProbe:"), "utf-8")
    done = subprocess.run([tool, "--strict", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "readinesProbe" in done.stdout + done.stderr


def test_the_kinds_shipped() -> None:
    assert set(manifests()) == {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap"}


def test_probes_and_shutdown() -> None:
    c = container()
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert port == 8080
    assert c["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/health/live"
    stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert stop[0] == "sleep"
    pause = int(stop[1])
    assert pause >= 2
    grace = manifests()["Deployment"]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    # the preStop sleep counts against the grace period, then the shutdown
    assert grace > pause + SHUTDOWN_TIMEOUT


def test_the_views_file_is_mounted_passed_and_valid(tmp_path) -> None:
    m = manifests()
    c = container()
    args = c["args"]
    views = args[args.index("--views") + 1]
    volumes = {v["name"]: v for v in m["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [v for v in c["volumeMounts"] if views.startswith(v["mountPath"] + "/")]
    assert mount["readOnly"] is True
    config = volumes[mount["name"]]["configMap"]["name"]
    assert config == m["ConfigMap"]["metadata"]["name"]
    key = views[len(mount["mountPath"]) + 1:]
    path = tmp_path / key
    path.write_text(m["ConfigMap"]["data"][key], "utf-8")
    catalog = load_catalog(str(path))              # the node would start with it
    assert "PublicLiveStreamView" in catalog.views
    assert args[:5] == ["twistd", "--nodaemon", "--pidfile=", "--logfile=-", "pushengine"]


def test_the_environment_names_real_options_and_the_services() -> None:
    known = {env_name(name) for name, *_ in PARAMETERS} | {env_name(n) for n, *_ in FLAGS}
    env = {e["name"]: e for e in container()["env"]}
    assert set(env) <= known, set(env) - known
    for name in ("PUSHENGINE_AMQP", "PUSHENGINE_REDIS", "PUSHENGINE_NODE_ID"):
        assert name in env, name
    assert env["PUSHENGINE_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["PUSHENGINE_REDIS"]["value"].startswith("redis://")
    # secrets come from a Secret, never written here
    for name in ("PUSHENGINE_AMQP", "PUSHENGINE_SECRET", "PUSHENGINE_PUBLISH_KEY"):
        assert "secretKeyRef" in env[name]["valueFrom"], name


def test_selectors_resources_and_user() -> None:
    m = manifests()
    labels = m["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (m["Deployment"]["spec"]["selector"]["matchLabels"],
                     m["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
                     m["Service"]["spec"]["selector"]):
        assert selector.items() <= labels.items()
    assert m["Service"]["spec"]["ports"][0]["targetPort"] == "http"
    assert m["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert m["Deployment"]["spec"]["replicas"] > 1
    requests = container()["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]
    security = m["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text("utf-8")
    assert re.search(rf"^USER {security['runAsUser']}:", dockerfile, re.M)
