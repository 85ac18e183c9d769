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

Not here: kwok runs no containers, so no kubelet pulls the image from the registry (tests/image
runs the same Dockerfile's image; here crane reads it back by the digest the pods name).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.generated import CHART, ROOT, helm_environment
from tests.controlplane import ControlPlane
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


@pytest.mark.k8s
def test_helm_install_from_the_registry_into_the_control_plane(
    release: Release, control_plane: ControlPlane
) -> None:
    plane = control_plane
    env = {**release.env, "KUBECONFIG": str(plane.admin_kubeconfig)}
    release = Release(release.out, release.manifest, release.registry, env)
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl(
        "label", "namespace", NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    version = release.manifest["chart"]["version"]
    try:
        # The AKS values as a user has them, minus the prometheus-operator kinds this control
        # plane has no CRDs for (tests/k8s/test_chart_install.py installs those too).
        installed = release.helm(
            "install", RELEASE_NAME, release.chart_ref, "--version", version, "--plain-http",
            "-n", NAMESPACE, "-f", str(CHART / "values-aks-spot.yaml"),
            "--set", "serviceMonitor.enabled=false", "--set", "prometheusRule.enabled=false",
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
        pods = _pods(plane)
        events = _json(plane, "get", "events", "-n", NAMESPACE)["items"]
        assert [e["message"] for e in events if e.get("reason") == "FailedCreate"] == []
        image = f"{release.image_ref}@{release.manifest['image']['digest']}"
        assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {image}
        # The image those pods name is in the registry, by that digest.
        assert release.crane("digest", image).strip() == release.manifest["image"]["digest"]
    finally:
        release.helm("uninstall", RELEASE_NAME, "-n", NAMESPACE, "--wait", "--timeout", "60s",
                     check=False)  # fmt: skip
        plane.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
