"""The release, made and used for real: scripts/release builds every artifact from a clean
checkout of HEAD and pushes the image and the chart to a real OCI registry on 127.0.0.1
(distribution's `registry`); helm and crane then read them back from there, and the chart is
installed from `oci://` into the real control plane.

Checked: the chart in the registry is the packaged one (same version, same digest, same bytes);
`helm template oci://...` renders the published image by digest, the published chart's name in
the doctor's fixes and the release's own runbooks; the image manifest in the registry is the one
in the OCI archive; the krew manifest's sha256 is the archive's, and the plugin runs from the
archive laid out as krew installs it; SHA256SUMS holds; a release whose two versions disagree is
refused. The `k8s` test installs the chart from the registry into a namespace that enforces the
restricted Pod Security Standard: the release deployed, every pod admitted, bound and Ready.
The second `k8s` test is issue 20's acceptance, the new user's path to a notification and
`kubectl spot-rebalancer status`, with the agent and controller run from the release's wheel.

Not here: kwok runs no containers, so no kubelet pulls the image from the registry (tests/image
runs the same Dockerfile's image; here crane reads it back by the digest the pods name).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.generated import CHART, ROOT, helm_environment
from tests.controlplane import ControlPlane
from tests.helpers import KUBECTL, serve
from tests.k8s.rig import ChartRbac, kube_rig
from tests.receiver import SECRET_PATH, Receiver
from tests.release.registry import Registry, running_registry

pytestmark = pytest.mark.release

PROJECT_URL = "https://example.invalid/spot-rebalancer"  # reserved name: never a real address
PATH_IN_REGISTRY = "release-test"


@dataclass(frozen=True)
class Release:
    out: Path
    manifest: dict[str, Any]  # release.json
    registry: Registry
    env: dict[str, str]

    @property
    def chart_ref(self) -> str:
        return f"oci://{self.registry.host}/{PATH_IN_REGISTRY}/charts/spot-rebalancer"

    @property
    def image_ref(self) -> str:
        return f"{self.registry.host}/{PATH_IN_REGISTRY}/spot-rebalancer"

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.env["HELM4"], *args],
            capture_output=True, text=True, timeout=180, check=False, env=self.env,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def crane(self, *args: str) -> str:
        result = subprocess.run(
            [self.env["CRANE"], *args, "--insecure"],
            capture_output=True, text=True, timeout=60, check=False, env=self.env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    env = helm_environment()  # scripts/install-tools: helm, crane, registry, buildah
    folder = tmp_path_factory.mktemp("release")
    with running_registry(env["REGISTRY"], folder) as registry:
        result = subprocess.run(
            [str(ROOT / "scripts" / "release"),
             "--registry", f"{registry.host}/{PATH_IN_REGISTRY}",
             "--project-url", PROJECT_URL, "--plain-http", "--out", str(folder / "out")],
            capture_output=True, text=True, timeout=900, check=False, env=env,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"scripts/release failed:\n{result.stderr[-4000:]}", pytrace=False)
        out = Path(result.stdout.strip().splitlines()[-1])
        manifest = json.loads((out / "release.json").read_text())
        yield Release(out=out, manifest=manifest, registry=registry, env=env)


def test_one_version_from_pyproject_and_chart(release: Release) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert release.manifest["version"] == chart["appVersion"]
    assert release.manifest["chart"]["version"] == chart["version"]
    version = release.manifest["version"]
    names = {p.name for p in release.out.iterdir()}
    assert {
        f"spot_rebalancer-{version}-py3-none-any.whl",
        f"spot_rebalancer-{version}.tar.gz",
        f"spot-rebalancer-image-{version}.oci.tar",
        f"spot-rebalancer-{chart['version']}.tgz",
        f"kubectl-spot_rebalancer-{version}.tar.gz",
        "spot-rebalancer.yaml",
        "release.json",
        "SHA256SUMS",
    } <= names


def test_checksums_hold(release: Release) -> None:
    lines = (release.out / "SHA256SUMS").read_text().splitlines()
    listed = {line.split()[1]: line.split()[0] for line in lines}
    assert len(listed) == 6  # wheel, sdist, image, chart, krew archive, krew manifest
    for name, digest in listed.items():
        assert sha256_of(release.out / name) == digest, name


def test_the_chart_in_the_registry_is_the_packaged_one(release: Release, tmp_path: Path) -> None:
    chart = release.manifest["chart"]
    shown = yaml.safe_load(
        release.helm("show", "chart", release.chart_ref, "--version", chart["version"],
                     "--plain-http").stdout
    )  # fmt: skip
    assert (shown["version"], shown["appVersion"]) == (
        chart["version"],
        release.manifest["version"],
    )
    assert shown["home"] == PROJECT_URL and shown["sources"] == [PROJECT_URL]
    pulled = release.helm(
        "pull", release.chart_ref, "--version", chart["version"], "--plain-http",
        "--destination", str(tmp_path),
    )  # fmt: skip
    assert f"Digest: {chart['digest']}" in pulled.stdout + pulled.stderr
    archive = f"spot-rebalancer-{chart['version']}.tgz"
    assert sha256_of(tmp_path / archive) == sha256_of(release.out / archive)
    # The registry names the chart's layer by that same content.
    layers = json.loads(
        release.crane("manifest", f"{release.chart_ref.removeprefix('oci://')}@{chart['digest']}")
    )["layers"]
    assert [layer["digest"] for layer in layers] == [f"sha256:{sha256_of(release.out / archive)}"]


def test_the_chart_from_the_registry_renders_the_published_addresses(release: Release) -> None:
    rendered = release.helm(
        "template", "published", release.chart_ref,
        "--version", release.manifest["chart"]["version"], "--plain-http",
        "--set", "prometheusRule.enabled=true",
    ).stdout  # fmt: skip
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    image = f"{release.image_ref}@{release.manifest['image']['digest']}"
    workloads = [o for o in objects if o["kind"] in ("DaemonSet", "Deployment")]
    assert {o["kind"] for o in workloads} == {"DaemonSet", "Deployment"}
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == image
    (deployment,) = [o for o in workloads if o["kind"] == "Deployment"]
    (controller,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in controller["env"]}
    assert env["REBALANCER_HELM_CHART"] == release.chart_ref
    assert env["REBALANCER_HELM_CHART_VERSION"] == release.manifest["chart"]["version"]
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    runbooks = f"{PROJECT_URL}/blob/v{release.manifest['version']}/docs/runbooks.md"
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert alert["annotations"]["runbook_url"] == f"{runbooks}#{alert['alert'].lower()}"


def test_the_image_in_the_registry_is_the_archive(release: Release) -> None:
    image = release.manifest["image"]
    version = release.manifest["version"]
    with tarfile.open(release.out / f"spot-rebalancer-image-{version}.oci.tar") as archive:

        def member(name: str) -> bytes:
            extracted = archive.extractfile(name)
            assert extracted is not None, name
            return extracted.read()

        (entry,) = json.loads(member("./index.json"))["manifests"]
        manifest_bytes = member(f"./blobs/sha256/{entry['digest'].removeprefix('sha256:')}")
    assert entry["digest"] == image["digest"]
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == image["digest"]
    assert release.crane("digest", f"{release.image_ref}:{version}").strip() == image["digest"]
    assert release.crane("manifest", f"{release.image_ref}:{version}").encode() == manifest_bytes
    config = json.loads(release.crane("config", f"{release.image_ref}@{image['digest']}"))
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["rebalancer"]
    assert (
        config["config"]["Labels"]["org.opencontainers.image.revision"]
        == (release.manifest["revision"][:7])
    )


def test_the_krew_manifest_names_the_archive_by_its_sha256(release: Release) -> None:
    plugin = yaml.safe_load((release.out / "spot-rebalancer.yaml").read_text())
    version = release.manifest["version"]
    archive = release.out / f"kubectl-spot_rebalancer-{version}.tar.gz"
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "spot-rebalancer"
    assert plugin["spec"]["version"] == f"v{version}"
    assert plugin["spec"]["homepage"] == PROJECT_URL
    platforms = plugin["spec"]["platforms"]
    assert {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
            for p in platforms} == {("linux", "amd64"), ("linux", "arm64"),
                                    ("darwin", "amd64"), ("darwin", "arm64")}  # fmt: skip
    for platform in platforms:
        assert platform["sha256"] == sha256_of(archive)
        assert platform["uri"] == (f"{PROJECT_URL}/releases/download/v{version}/{archive.name}")
        assert platform["bin"] == "kubectl-spot_rebalancer"
    with tarfile.open(archive) as opened:
        members = {m.name.removeprefix("./"): m for m in opened.getmembers()}
        launcher = members["kubectl-spot_rebalancer"]
        assert launcher.isfile() and launcher.mode & 0o111
        script = opened.extractfile(launcher)
        assert script is not None
        assert f"plugin-{version}" in script.read().decode()
        wheel = opened.extractfile(members[f"spot_rebalancer-{version}-py3-none-any.whl"])
        assert wheel is not None
        assert hashlib.sha256(wheel.read()).hexdigest() == sha256_of(
            release.out / f"spot_rebalancer-{version}-py3-none-any.whl"
        )
        assert "requirements.lock" in members


def test_the_krew_plugin_runs_as_krew_installs_it(release: Release, tmp_path: Path) -> None:
    """krew unpacks the archive into its store and links `bin` from its bin folder; the first
    run installs the wheel and the locked dependencies (from the package index, ~30 s), the
    next starts at once."""
    version = release.manifest["version"]
    store = tmp_path / "store" / "spot-rebalancer" / f"v{version}"
    store.mkdir(parents=True)
    with tarfile.open(release.out / f"kubectl-spot_rebalancer-{version}.tar.gz") as archive:
        archive.extractall(store, filter="data")
    (tmp_path / "bin").mkdir()
    linked = tmp_path / "bin" / "kubectl-spot_rebalancer"
    linked.symlink_to(store / "kubectl-spot_rebalancer")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        # The Python 3.11+ this suite runs on, whatever python3 on PATH is.
        "SPOT_REBALANCER_PYTHON": sys.executable,
    }
    for attempt in ("first", "second"):
        ran = subprocess.run(
            [str(linked), "--help"], capture_output=True, text=True, timeout=300, check=False,
            env=env,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.startswith("usage: kubectl spot-rebalancer"), ran.stdout
        assert ("first run, installing" in ran.stderr) == (attempt == "first"), ran.stderr
    assert (tmp_path / "cache" / "spot-rebalancer" / f"plugin-{version}" / ".installed").exists()


def test_the_wheel_carries_the_plugin_and_the_release_version(release: Release) -> None:
    version = release.manifest["version"]
    with zipfile.ZipFile(release.out / f"spot_rebalancer-{version}-py3-none-any.whl") as wheel:
        metadata = wheel.read(f"spot_rebalancer-{version}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"spot_rebalancer-{version}.dist-info/entry_points.txt")
    assert f"Version: {version}\n" in metadata
    assert b"kubectl-spot_rebalancer = rebalancer.plugin.main:main" in entry_points
    assert not any(name.startswith("rebalancer_sim") for name in wheel.namelist())


def test_a_release_whose_versions_disagree_is_refused(tmp_path: Path) -> None:
    """pyproject.toml and Chart.yaml's appVersion are one version: a commit where they differ
    cannot be released (the image tag and the package would say different things)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(clone)], check=True)
    for shared in (".venv", ".cache"):
        (clone / shared).symlink_to(ROOT / shared)
    pyproject = clone / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('\nversion = "', '\nversion = "9', 1))
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "commit", "--quiet", "-am", "disagree"], check=True)
    result = subprocess.run(
        [str(clone / "scripts" / "release"), "--registry", "127.0.0.1:1/x",
         "--project-url", PROJECT_URL, "--no-push", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, check=False, env=helm_environment(),
    )  # fmt: skip
    assert result.returncode == 1
    assert "pyproject.toml says 9" in result.stderr and "make them equal" in result.stderr
    assert not list((tmp_path / "out").glob("*"))


# ---------------------------------------------------------------- the new user's path


RELEASE_NAME = "published"
NAMESPACE = "published-system"


def _json(plane: ControlPlane, *args: str) -> dict[str, Any]:
    return json.loads(plane.kubectl(*args, "-o", "json"))  # type: ignore[no-any-return]


def _pods(plane: ControlPlane) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE_NAME}"
    return list(_json(plane, "get", "pods", "-n", NAMESPACE, "-l", selector)["items"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return bool(pod["spec"].get("nodeName")) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


@contextlib.contextmanager
def installed_from_registry(
    release: Release, plane: ControlPlane, *values: str, first: Sequence[dict[str, Any]] = ()
) -> Iterator[tuple[Release, list[dict[str, Any]]]]:
    """`helm install` the published chart from `oci://` with the AKS values (and `--set` these)
    into a namespace that enforces the restricted Pod Security Standard, where the objects
    `first` were created before; yields the release (its helm talking to this control plane)
    and its pods once every one is bound and Ready. Uninstalled afterwards."""
    env = {**release.env, "KUBECONFIG": str(plane.admin_kubeconfig)}
    release = Release(release.out, release.manifest, release.registry, env)
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl(
        "label", "namespace", NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    if first:
        plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": list(first)}))  # fmt: skip
    version = release.manifest["chart"]["version"]
    sets = [arg for value in values for arg in ("--set", value)]
    try:
        # The AKS values as a user has them, minus the prometheus-operator kinds this control
        # plane has no CRDs for (tests/k8s/test_chart_install.py installs those too).
        installed = release.helm(
            "install", RELEASE_NAME, release.chart_ref, "--version", version, "--plain-http",
            "-n", NAMESPACE, "-f", str(CHART / "values-aks-spot.yaml"),
            "--set", "serviceMonitor.enabled=false", "--set", "prometheusRule.enabled=false",
            *sets,
        )  # fmt: skip
        assert "PodSecurity" not in installed.stderr, installed.stderr
        status = json.loads(
            release.helm("status", RELEASE_NAME, "-n", NAMESPACE, "-o", "json").stdout
        )
        assert status["info"]["status"] == "deployed"
        nodes = _json(plane, "get", "nodes")["items"]
        spot = [n for n in nodes if n["metadata"]["labels"].get(
            "kubernetes.azure.com/scalesetpriority") == "spot"]  # fmt: skip
        wanted = len(spot) + 2  # an agent per spot node, two controller replicas
        deadline = time.monotonic() + 60
        while len(pods := _pods(plane)) < wanted:
            assert time.monotonic() < deadline, f"{len(pods)} of {wanted} pods admitted"
            time.sleep(0.2)
        # Bound to nodes and Ready (kwok's kubelet stand-in marks a scheduled pod Ready).
        while unready := [p["metadata"]["name"] for p in _pods(plane) if not _ready(p)]:
            assert time.monotonic() < deadline, f"not bound and Ready: {unready}"
            time.sleep(0.2)
        events = _json(plane, "get", "events", "-n", NAMESPACE)["items"]
        assert [e["message"] for e in events if e.get("reason") == "FailedCreate"] == []
        yield release, _pods(plane)
    finally:
        release.helm("uninstall", RELEASE_NAME, "-n", NAMESPACE, "--wait", "--timeout", "60s",
                     check=False)  # fmt: skip
        plane.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")


@pytest.mark.k8s
def test_helm_install_from_the_registry_into_the_control_plane(
    release: Release, control_plane: ControlPlane
) -> None:
    with installed_from_registry(release, control_plane) as (published, pods):
        image = f"{published.image_ref}@{published.manifest['image']['digest']}"
        assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {image}
        # The image those pods name is in the registry, by that digest.
        assert published.crane("digest", image).strip() == published.manifest["image"]["digest"]


# ---------------------------------------------------------------- issue 20's acceptance


def released_environment(release: Release, folder: Path) -> Path:
    """A fresh virtual environment with the release's wheel installed (`--no-index --no-deps`):
    the console scripts `rebalancer` (the image's entry point) and `kubectl-spot_rebalancer` come
    from it. Its dependencies are this suite's, installed from the same requirements.lock the
    release ships, put on its path by a .pth line instead of a second download; that line adds
    no .pth of theirs, so the checkout's editable install stays out and the wheel's `rebalancer`
    is the only one there is."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheel = release.out / f"spot_rebalancer-{release.manifest['version']}-py3-none-any.whl"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-index", "--no-deps", str(wheel)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(where) / "locked-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # What runs is the wheel's code, whatever the folder it starts in.
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m, rebalancer; "
         "print(rebalancer.__file__); print(m.version('spot-rebalancer'))"],
        capture_output=True, text=True, check=True, cwd=folder,
    ).stdout.split()  # fmt: skip
    assert imported == [
        str(next(venv.glob("lib/python*/site-packages/rebalancer/__init__.py"))),
        release.manifest["version"],
    ], imported
    return venv


def as_the_kubelet_runs(
    plane: ControlPlane, pods: list[dict[str, Any]], folder: Path
) -> tuple[ChartRbac, dict[str, Path]]:
    """What the released chart's pods run with, for host processes that play them: the env of
    each component's container resolved as the kubelet does (plain values, the downward API,
    Secret keys), and tokens of its ServiceAccount bound to a pod as the kubelet's projected
    token is: the controller's to its first pod, each agent's to the agent pod on its node (the
    chart's admission policy lets an agent change only the Node its token's pod is on). The
    ChartRbac, and node -> that agent's kubeconfig."""
    kubeconfigs: dict[str, Path] = {}
    env: dict[str, dict[str, str]] = {}
    agents: dict[str, Path] = {}
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        name, account = pod["metadata"]["name"], pod["spec"]["serviceAccountName"]
        if component == "agent":
            agents[pod["spec"]["nodeName"]] = plane.token_kubeconfig(
                folder / f"{name}.kubeconfig", NAMESPACE, account, pod=name
            )
        if component in env:
            continue
        kubeconfigs[component] = plane.token_kubeconfig(
            folder / f"{component}.kubeconfig", NAMESPACE, account, pod=name
        )
        (container,) = pod["spec"]["containers"]
        env[component] = {e["name"]: _env_value(plane, pod, e) for e in container["env"]}
    return ChartRbac(kubeconfigs=kubeconfigs, env=env, objects=[]), agents


def _env_value(plane: ControlPlane, pod: dict[str, Any], entry: dict[str, Any]) -> str:
    if "valueFrom" not in entry:
        return str(entry.get("value", ""))  # the API server drops an empty value
    source = entry["valueFrom"]
    if "fieldRef" in source:
        found: Any = pod
        for part in source["fieldRef"]["fieldPath"].split("."):
            found = found[part]
        return str(found)
    key = source["secretKeyRef"]
    data = plane.kubectl(
        "get", "secret", key["name"], "-n", NAMESPACE, "-o", f"jsonpath={{.data.{key['key']}}}"
    )
    return base64.b64decode(data).decode()


def kubectl_plugin(plane: ControlPlane, venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl spot-rebalancer ...` through the real kubectl, which finds the plugin on PATH
    where the released wheel put it."""
    return subprocess.run(
        [KUBECTL, "spot-rebalancer", *args, "--kubeconfig", str(plane.admin_kubeconfig),
         "-n", NAMESPACE],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(venv)},
    )  # fmt: skip


@pytest.mark.k8s
async def test_the_new_users_path(
    release: Release, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Issue 20's acceptance: the release made by scripts/release → the chart installed from the
    local registry (`oci://`), its notifications pointed at a local receiver through a Secret →
    its agent and controller pods admitted and Ready → a Preempt on a spot node → the
    notification received → `kubectl spot-rebalancer status` shows the notice.

    kwok's pods run no containers, so the agents and the controller run as host processes of the
    released wheel (its `rebalancer` entry point, as the image's), each with a token of the
    ServiceAccount its released pod has and the env that pod carries: any call the released RBAC
    does not allow fails the test (tests/k8s/rig.py). Azure is the IMDS emulator and the rig's
    cloud, which deletes the VM's pods and Node once the eviction starts."""
    plane = control_plane
    venv = released_environment(release, tmp_path)
    receiver = Receiver()
    placeholder = ChartRbac(kubeconfigs={}, env={}, objects=[])
    async with serve(receiver.app()) as base, kube_rig(plane, placeholder, tmp_path) as rig:
        secret = {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "notify"},
            "stringData": {"url": base + SECRET_PATH},
        }  # fmt: skip
        with installed_from_registry(
            release, plane, "notifications.webhookURLSecretName=notify", first=[secret]
        ) as (_, pods):
            rig.chart, agent_kubeconfigs = as_the_kubelet_runs(plane, pods, tmp_path)
            rig.command = (str(venv / "bin" / "rebalancer"),)
            assert rig.chart.env["controller"]["REBALANCER_NOTIFY_WEBHOOK_URL"] == (
                base + SECRET_PATH
            )
            (controller_pod, *_) = sorted(
                p["metadata"]["name"]
                for p in pods
                if p["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"
            )
            try:
                # Replacements take 8 s to be Ready: the notice stays while the plugin looks.
                await rig.deploy(startup_seconds=8)
                for node_name in rig.spot_nodes():  # as the DaemonSet's pod on that node
                    rig.spawn(
                        f"agent-{node_name}", ["agent"],
                        NODE_NAME=node_name,
                        REBALANCER_IMDS_URL=rig.imds_url_for(node_name),
                        REBALANCER_KUBECONFIG=str(agent_kubeconfigs[node_name]),
                    )  # fmt: skip
                rig.start_controller(controller_pod)
                await rig.until_ready()
                doomed = sorted(p["spec"]["nodeName"] for p in rig.pods())[0]
                assert rig.pool_of(doomed) == "gpuspot"
                event = rig.preempt(doomed, notice_seconds=30)
                await rig.wait_for(
                    lambda: (rig.node(doomed) or {"spec": {}})["spec"].get("unschedulable"),
                    timeout=10,
                    what="the node cordoned",
                )
                (notified,) = await receiver.wait_for(
                    lambda bodies: [b for b in bodies if b["kind"] == "notice"],
                    timeout=15,
                    what="the notice's notification",
                )
                assert notified["title"] == f"Preempt notice on {doomed}: acting"
                assert notified["facts"]["node"] == doomed
                assert notified["facts"]["event id"] == event.event_id
                shown = await asyncio.to_thread(kubectl_plugin, plane, venv, "status")
                assert shown.returncode == 0, shown.stderr
                notice_rows = [
                    line.split()
                    for line in shown.stdout.splitlines()
                    if line.startswith(f"{doomed} ")
                ]
                assert [[row[2], row[3], row[-1]] for row in notice_rows] == [
                    ["Preempt", event.event_id, "yes"]  # the event, and the node cordoned
                ], shown.stdout
                assert f"leader {controller_pod}" in shown.stdout, shown.stdout
                # The outcome: the replicas failed over and the VM went.
                await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="VM gone")
                await rig.wait_for(lambda: rig.ready_count() == 3, timeout=15, what="3 Ready")
                assert rig.imds.events[event.event_id].acknowledged_by
            finally:
                rig.stop_all()  # before the release and its RBAC go
