"""The deployment files (issue 31, ``deploy/``): what can run here runs. This machine has no
container runtime and no cluster, so the image's entry point and health check, and the
Kubernetes manifests' environment, arguments, probes, metric and stop sequence, are exercised
against a real ``serve`` (on a real Redis); the rest of the manifests is checked to hang
together (selectors, ports, names)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from aiostream_synth._proxy.cli import _parser, config_from_args

from .support.cli_server import serve_cli
from .support.fake_upstream import FakeUpstream
from .support.servers import free_port, serve

DEPLOY = Path(__file__).parent.parent / "deploy"


def _instructions() -> dict[str, list[str]]:
    """The Dockerfile's instructions, by keyword (continuation lines joined)."""
    found: dict[str, list[str]] = {}
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.setdefault(keyword, []).append(rest.strip())
    return found


def _exec_form(text: str) -> list[str]:
    """An instruction's JSON exec form (``["a", "b"]``)."""
    value = json.loads(text[text.index("[") :])
    assert isinstance(value, list)
    return [str(part) for part in value]


def _health_check(command: list[str], port: int) -> int:
    """The image's health check run here against ``port`` (its ``python`` is this one)."""
    assert command[0] == "python"
    script = command[-1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    checked = subprocess.run(
        [sys.executable, *command[1:-1], script],
        check=False,
        timeout=30,
        stderr=subprocess.DEVNULL,  # an unhealthy server's traceback
    )
    return checked.returncode


def test_the_images_entry_point_and_health_check_work_against_a_real_serve() -> None:
    instructions = _instructions()
    entry = _exec_form(instructions["ENTRYPOINT"][0])
    health = _exec_form(instructions["HEALTHCHECK"][0])
    config = config_from_args(_parser().parse_args(entry[1:]))
    assert entry[:2] == ["aiostream-synth", "serve"]
    assert (config.host, config.port) == ("0.0.0.0", 8000)
    assert len(instructions["FROM"]) == 2  # built in one stage, run from a slim one
    assert instructions["USER"] == ["10001"]  # not root
    assert any("[proxy]" in step for step in instructions["RUN"])
    with serve_cli("--store", "off") as (_, url):
        healthy = _health_check(health, int(url.rsplit(":", 1)[1]))
    assert healthy == 0
    assert _health_check(health, free_port()) != 0  # nothing answers there


def _manifests() -> dict[str, dict[str, Any]]:
    """Every object of ``deploy/kubernetes``, by ``<kind>/<name>``."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            objects[f"{document['kind']}/{document['metadata']['name']}"] = document
    return objects


def test_the_kubernetes_manifests_hang_together() -> None:
    objects = _manifests()
    deployment = objects["Deployment/aiostream-synth"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    service = objects["Service/aiostream-synth"]
    config = objects["ConfigMap/aiostream-synth"]["data"]
    store = urllib.parse.urlsplit(config["AIOSTREAM_SYNTH_STORE"])
    redis = objects["Service/aiostream-synth-redis"]
    redis_pod = objects["Deployment/aiostream-synth-redis"]["spec"]["template"]
    hpa = objects["HorizontalPodAutoscaler/aiostream-synth"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    assert (
        objects["PodDisruptionBudget/aiostream-synth"]["spec"]["selector"]["matchLabels"] == labels
    )
    assert all(port["targetPort"] in ports for port in service["spec"]["ports"])
    assert ports["http"] == 8000  # the image's port
    assert hpa["spec"]["scaleTargetRef"]["name"] == "aiostream-synth"
    assert hpa["spec"]["minReplicas"] >= 2  # a replica's death leaves one serving
    assert (store.hostname, store.port) == (
        "aiostream-synth-redis",
        redis["spec"]["ports"][0]["port"],
    )
    assert redis["spec"]["selector"] == redis_pod["metadata"]["labels"]
    # The stop sequence: out of the Service (preStop), then the drain, within the grace period.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    waited = float(pre_stop[-1].rsplit("(", 1)[1].rstrip(")"))
    drain = float(config["AIOSTREAM_SYNTH_DRAIN_TIMEOUT"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > waited + drain


def test_the_ray_serve_config_names_its_app_and_builds_a_valid_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without Ray (the ``ray`` session runs it for real, tests/test_ray_serve.py): the config
    imports the application the script binds, under the deployment's name, and the
    environment it gives the replicas is one ``serve`` accepts, with a Redis store."""
    from aiostream_synth.proxy import config_from_options

    config = yaml.safe_load((DEPLOY / "ray" / "serve.yaml").read_text())
    script = (DEPLOY / "ray" / "serve_app.py").read_text()
    (app,) = config["applications"]
    module, _, name = app["import_path"].partition(":")
    assert module == "serve_app"
    assert f"\n{name} = " in script
    (deployment,) = app["deployments"]
    assert f"\nclass {deployment['name']}:" in script
    assert "@serve.ingress(proxy_app)" in script
    assert app["route_prefix"] == "/"  # the app's paths are /v1/...
    environment = app["runtime_env"]["env_vars"]
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    built = config_from_options()
    assert built.store.startswith("redis://")
    assert built.upstream == environment["AIOSTREAM_SYNTH_UPSTREAM"]
    assert built.drain_timeout == float(environment["AIOSTREAM_SYNTH_DRAIN_TIMEOUT"])


def test_the_pods_environment_arguments_probes_metric_and_stop_work_on_a_real_serve(
    redis_url: str,
) -> None:
    """The pod's ConfigMap environment and arguments run ``serve`` (its upstream and store
    pointed at real ones here); its probes answer 200, the HPA's metric is in ``/metrics``,
    a request goes through, and SIGTERM stops it well within the grace period."""
    objects = _manifests()
    pod = objects["Deployment/aiostream-synth"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    metric = objects["HorizontalPodAutoscaler/aiostream-synth"]["spec"]["metrics"][0]
    fake = FakeUpstream()
    with serve(fake, "uvicorn") as upstream:
        environment = {
            **os.environ,
            **objects["ConfigMap/aiostream-synth"]["data"],
            "AIOSTREAM_SYNTH_UPSTREAM": f"{upstream}/v1",
            "AIOSTREAM_SYNTH_STORE": redis_url,
        }
        with serve_cli(*container["args"], env=environment) as (process, url):
            probes = [
                httpx.get(f"{url}{container[probe]['httpGet']['path']}").status_code
                for probe in ("readinessProbe", "livenessProbe")
            ]
            metrics = httpx.get(f"{url}/metrics").text
            answered = httpx.post(
                f"{url}/v1/responses",
                json={"model": "m", "input": "hi"},
                headers={"authorization": "Bearer k"},
                timeout=30,
            )
            process.send_signal(signal.SIGTERM)
            stopped = process.wait(timeout=pod["spec"]["terminationGracePeriodSeconds"])
    assert probes == [200, 200]
    assert f"\n{metric['pods']['metric']['name']} " in metrics
    assert answered.status_code == 200
    assert answered.json()["output"][0]["content"][0]["text"] == "upstream answer"
    assert stopped == 0
