"""The container images, built and run with podman:

  - deploy/build_images.sh --prebuilt builds all five images (router,
    agent-cpu, agent-oneapi, agent-rocm, agent-cuda) from the binaries
    already built on this host (CI mode: no compiling inside the builder),
    tagged dev and with the project's version, with OCI labels;
  - a scan of every image finds no setuid or setgid file, no shell and no
    package manager, and the program of every exec probe and compose
    healthcheck in the image; the cpu image carries no compiler (LLVM,
    clang, comgr) although the host's agent links HIP;
  - the cuda and rocm images start as uid 65532 on a read-only root and,
    with no GPU here, say so and exit 1;
  - a router, a cpu agent and a oneapi (PoCL) agent run on a podman network,
    --read-only; from the host the farcall CLI calls through the
    containerised router (both platforms), checks grpc.health.v1 on the
    router and the agent, and scrapes /metrics on both;
  - `podman stop` sends SIGTERM, and every container exits 0.

Run: .venv/bin/python -m pytest -q tests/deploy/test_containers.py
  (or .venv/bin/python tests/deploy/test_containers.py)
Needs podman, runc and mmdebstrap (scripts/install_deps.sh) and root, and
the Debian mirror for apt inside the builds. Builds take about a minute with
the base image cached (~/.cache/farcall), 30 s more the first time.
Containers and the network are removed at the end, pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import stat
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

TAG = os.environ.get("FARCALL_IMAGE_TAG", "dev")
IMAGES = ["router", "agent-cpu", "agent-oneapi", "agent-rocm", "agent-cuda"]
DEADLINE_S = 90
STOP_TIMEOUT_S = 40  # longer than the agents' default --drain_seconds (30)


def image(name: str) -> str:
    return f"localhost/farcall-{name}:{TAG}"


@pytest.fixture(scope="module")
def podman():
    return lib.Podman()


def _dockerfile_apt_lists() -> dict[str, list[str]]:
    """The packages each stage of the Dockerfile installs with apt-get."""
    text = re.sub(r"\\\n", " ", (lib.DEPLOY / "docker" / "Dockerfile").read_text())
    args = dict(re.findall(r"^ARG (\w+)=(\S*)", text, re.M))
    lists, stage = {}, None
    for line in text.splitlines():
        m = re.match(r"FROM \S+ AS (\S+)", line)
        if m:
            stage = m.group(1)
        for m in re.finditer(r"apt-get install -y --no-install-recommends ([^&]*)", line):
            words = [args.get(w[2:-1], "") if w.startswith("${") else w for w in m.group(1).split()]
            lists.setdefault(stage, []).extend(w for w in " ".join(words).split() if w)
    return lists


def _packages_linked(*binaries: str) -> set[str]:
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True, check=True).stdout
    libs = {l.split()[2] for l in out.splitlines() if "=>" in l and len(l.split()) > 2
            and l.split()[2].startswith("/")}
    pkgs = set()
    for lib_path in libs:
        for p in (lib_path, os.path.realpath(lib_path)):
            r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
            if r.returncode == 0:
                pkgs.add(r.stdout.split(":")[0])
                break
        else:
            pytest.fail(f"no Debian package owns {lib_path}")
    return pkgs


def _with_dependencies(pkgs: list[str]) -> set[str]:
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *pkgs],
                         capture_output=True, text=True, check=True).stdout
    return {l.strip().split(":")[0] for l in out.splitlines() if l and not l.startswith(" ")}


def test_runtime_package_lists_cover_what_the_binaries_link():
    """The images built from source rely on the Dockerfile's package lists:
    they must name (with their dependencies) every library the binaries
    link, so that a new dependency shows here rather than in a user's build."""
    for tool in ("ldd", "dpkg", "apt-cache"):
        lib.require_tool(tool, "a Debian 12 host")
    lists = _dockerfile_apt_lists()
    router_side = _with_dependencies(lists["runtime"])
    missing = _packages_linked(lib.router_bin(), lib.cli_bin()) - router_side
    assert not missing, f"the runtime stage lacks {sorted(missing)} (farcall-router, farcall)"
    agent_side = _with_dependencies(lists["runtime"] + lists["agent-runtime"] +
                                    lists["agent-oneapi-root"] + lists["agent-rocm-root"])
    missing = _packages_linked(lib.agent_bin()) - agent_side
    assert not missing, f"the agent images lack {sorted(missing)} (farcall-agent)"


@pytest.fixture(scope="module")
def images(podman):
    print(lib.build_images(podman, IMAGES, TAG))
    return IMAGES


def test_images_run_as_non_root_with_the_binary_as_entrypoint(podman, images):
    for name in images:
        cfg = json.loads(podman.inspect(image(name), "{{json .Config}}"))
        assert cfg["User"] == "65532:65532", name
        binary = "farcall-router" if name == "router" else "farcall-agent"
        assert cfg["Entrypoint"][0] == f"/usr/local/bin/{binary}", name
        ports = set(cfg.get("ExposedPorts", {}))
        assert ports == ({"50050/tcp", "9150/tcp"} if name == "router" else {"50051/tcp", "9151/tcp"}), name
        assert cfg.get("StopSignal", "SIGTERM") in ("SIGTERM", "15"), name


SHELLS = {"sh", "bash", "dash", "rbash", "ash", "zsh", "ksh", "mksh", "busybox"}
PACKAGE_MANAGERS = {"dpkg", "dpkg-deb", "dpkg-query", "apt", "apt-get", "apt-cache", "aptitude"}


@contextlib.contextmanager
def mounted(podman, ref: str):
    """The image's files, read-only, at a path on the host."""
    path = podman.run("image", "mount", ref).stdout.strip()
    try:
        yield pathlib.Path(path)
    finally:
        podman.run("image", "unmount", ref, check=False)


def _scan(root: pathlib.Path) -> dict[str, list[str]]:
    found = {"setuid": [], "shells": [], "package managers": [], "files": []}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = pathlib.Path(d, f)
            rel = "/" + str(p.relative_to(root))
            found["files"].append(rel)
            st = p.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                found["setuid"].append(f"{rel} {stat.filemode(st.st_mode)}")
            if f in SHELLS:
                found["shells"].append(rel)
            if f in PACKAGE_MANAGERS:
                found["package managers"].append(rel)
    return found


def _probe_commands() -> list[list[str]]:
    """The commands of every exec probe in deploy/k8s and every compose
    healthcheck: what an image must be able to run."""
    yaml = lib.require_module("yaml", "pip install -r python/requirements-dev.txt")
    commands = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("exec"), dict) and "command" in node["exec"]:
                commands.append(node["exec"]["command"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    for f in sorted(lib.K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            walk(doc)
    compose = yaml.safe_load((lib.DEPLOY / "compose.yaml").read_text())
    for s in compose["services"].values():
        test = s.get("healthcheck", {}).get("test")
        if test:
            assert test[0] == "CMD", f"a compose healthcheck needs a shell: {test}"
            commands.append(test[1:])
    assert commands, "no exec probe found in deploy/k8s or deploy/compose.yaml"
    return commands


def test_images_carry_nothing_setuid_no_shell_no_package_manager(podman, images):
    probes = _probe_commands()
    for argv in probes:
        assert pathlib.PurePath(argv[0]).name not in SHELLS, \
            f"a probe runs a shell, which no image has: {argv}"
    report = []
    for name in images:
        size = int(podman.run("image", "inspect", "--format", "{{.Size}}", image(name)).stdout)
        # One layer: no file of a lower layer hides under a later one, so
        # the mounted image shows every file the image ships.
        layers = int(podman.run("image", "inspect", "--format", "{{len .RootFS.Layers}}",
                                image(name)).stdout)
        assert layers == 1, f"{name} has {layers} layers"
        with mounted(podman, image(name)) as root:
            found = _scan(root)
            for argv in probes:
                prog = root / argv[0].lstrip("/")
                assert prog.is_file() and os.access(prog, os.X_OK), f"{name}: no {argv[0]} for {argv}"
        report.append(f"{name}: {size / 1e6:.0f} MB, {len(found['files'])} files")
        for what in ("setuid", "shells", "package managers"):
            assert not found[what], f"{name} has {what}: {found[what]}"
    print("\n".join(report))


def test_cpu_image_carries_no_compiler(podman, images):
    # The host's agent links HIP (and OpenCL): the cpu image carries those
    # libraries, but not the compiler HIP's package depends on and loads only
    # to build kernels, nor PoCL.
    with mounted(podman, image("agent-cpu")) as root:
        files = _scan(root)["files"]
    heavy = [f for f in files if re.search(r"/lib(LLVM|clang|amd_comgr|pocl)[-.]", f)]
    assert not heavy, heavy


def test_pushed_images_are_pinned_by_digest_in_an_overlay(podman, images, tmp_path):
    """build_images.sh --push writes the digests it pushed into a
    kustomization over deploy/k8s: the pushed images are pulled by those
    digests from the registry named, the others keep their tag. (No registry
    is reachable here: the push goes to an OCI layout, whose index names the
    digest of each image it holds.)"""
    from test_manifests import copy_of_k8s, render  # the manifests' renderer
    k8s = copy_of_k8s(tmp_path)
    layout = tmp_path / "layout"
    pushed = ["router", "agent-cpu"]
    r = subprocess.run(["bash", str(lib.DEPLOY / "build_images.sh"), "--no-build",
                        "--images=" + ",".join(pushed), f"--push=oci:{layout}",
                        "--registry-name=registry.example.com/ml",
                        f"--digests-overlay={k8s / 'release'}", f"--overlay-base={k8s}"],
                       capture_output=True, text=True, env=podman.env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    index = json.loads((layout / "index.json").read_text())
    digests = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"]
               for m in index["manifests"]}
    version = re.search(r"^project\(farcall VERSION ([0-9.]+)",
                        (lib.ROOT / "CMakeLists.txt").read_text(), re.M).group(1)
    seen = set()
    for d in render("release", k8s):
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            name = c["image"].split("/")[-1].split("@")[0].split(":")[0]
            target = name.removeprefix("farcall-")
            if target in pushed:
                want = digests[f"farcall-{target}-{version}"]
                assert c["image"] == f"registry.example.com/ml/farcall-{target}@{want}", c["image"]
                seen.add(target)
            else:
                assert c["image"] == f"localhost/farcall-{target}:{version}", c["image"]
    assert seen == set(pushed), seen
    # Without a name to pull by, an OCI layout push is refused before it starts.
    r = subprocess.run(["bash", str(lib.DEPLOY / "build_images.sh"), "--no-build",
                        f"--push=oci:{layout}"], capture_output=True, text=True, env=podman.env)
    assert r.returncode != 0 and "--registry-name" in r.stderr, r.stderr


def test_images_are_labelled_and_tagged_with_the_version(podman, images):
    version = re.search(r"^project\(farcall VERSION ([0-9.]+)",
                        (lib.ROOT / "CMakeLists.txt").read_text(), re.M).group(1)
    for name in images:
        labels = json.loads(podman.run("image", "inspect", "--format", "{{json .Labels}}",
                                       image(name)).stdout)
        assert labels.get("org.opencontainers.image.version") == version, (name, labels)
        assert labels.get("org.opencontainers.image.title") == f"farcall-{name}", (name, labels)
        for key in ("source", "description"):
            assert labels.get(f"org.opencontainers.image.{key}"), (name, key, labels)
        ids = {podman.run("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
               for ref in (image(name), f"localhost/farcall-{name}:{version}")}
        assert len(ids) == 1, f"{name}: :{TAG} and :{version} differ: {ids}"


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_gpu_images_start_and_report_no_device(podman, images, platform):
    r = podman.run("run", "--rm", "--read-only", image(f"agent-{platform}"), "--list_devices",
                   check=False)
    out = r.stdout + r.stderr
    if r.returncode == 0:
        print(f"{platform} devices here:\n{out}")
        return
    assert r.returncode == 1, out
    assert f"{platform}: no device found" in out, out


@pytest.fixture(scope="module")
def stack(podman, images):
    suffix = uuid.uuid4().hex[:8]
    net = f"farcall-test-{suffix}"
    names = {k: f"farcall-test-{k}-{suffix}" for k in ("agent-cpu", "agent-oneapi", "router")}
    created = []
    try:
        podman.run("network", "create", net)
        for k in ("agent-cpu", "agent-oneapi"):
            podman.run("run", "-d", "--name", names[k], "--network", net, "--read-only",
                       "-p", "127.0.0.1::50051", "-p", "127.0.0.1::9151", image(k))
            created.append(names[k])
        # The router gets the agents' IPs, which works whether or not the
        # network has DNS (test_compose.py checks names).
        ips = [podman.inspect(names[k], "{{(index .NetworkSettings.Networks \"%s\").IPAddress}}" % net)
               for k in ("agent-cpu", "agent-oneapi")]
        assert all(ips), ips
        podman.run("run", "-d", "--name", names["router"], "--network", net, "--read-only",
                   "-p", "127.0.0.1::50050", "-p", "127.0.0.1::9150", image("router"),
                   "--agents=" + ",".join(f"{ip}:50051" for ip in ips))
        created.append(names["router"])

        def port(name, p):
            return int(podman.run("port", name, f"{p}/tcp").stdout.strip().rsplit(":", 1)[1])
        s = {"names": names, "net": net,
             "router": f"127.0.0.1:{port(names['router'], 50050)}",
             "router_metrics": port(names["router"], 9150),
             "agent": f"127.0.0.1:{port(names['agent-cpu'], 50051)}",
             "agent_metrics": port(names["agent-cpu"], 9151)}

        def logs():
            return "\n".join(f"--- {n}:\n" + podman.run("logs", n, check=False).stderr
                             for n in created)

        def agents_serving():
            r = cli("agents", "--target=" + s["router"])
            return r.returncode == 0 and r.stdout.count("SERVING") == 2
        try:
            lib.wait_for("the containerised router to see both agents SERVING",
                         agents_serving, DEADLINE_S)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{logs()}")
        s["logs"] = logs
        yield s
    finally:
        for n in created:
            podman.run("rm", "-f", "-t", "0", n, check=False)
        podman.run("network", "rm", "-f", net, check=False)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([lib.cli_bin(), *args], capture_output=True, text=True, timeout=120)


def test_containers_are_read_only_and_not_root(podman, stack):
    for n in stack["names"].values():
        assert podman.inspect(n, "{{.HostConfig.ReadonlyRootfs}}") == "true", n
        assert podman.inspect(n, "{{.Config.User}}") == "65532:65532", n


@pytest.mark.parametrize("via_router", [False, True], ids=["named-agent", "via-router"])
@pytest.mark.parametrize("platform", ["cpu", "oneapi"])
def test_call_through_the_containerised_router(stack, platform, via_router):
    # By default the router names an agent and the CLI calls it (directly
    # when the host reaches the containers' network, else through the
    # router); --via_router sends the tensors through the router.
    r = cli("call", "axpy", "float32[8]:iota", "float32[8]:ones", "--results=float32[8]",
            "--aliases=1:0", "--attr=alpha=2.0", f"--platform={platform}",
            "--target=" + stack["router"], *(["--via_router"] if via_router else []))
    assert r.returncode == 0, r.stdout + r.stderr + stack["logs"]()
    assert "[1, 3, 5, 7, 9, 11, 13, 15]" in r.stdout, r.stdout
    assert f"({platform})" in r.stdout, r.stdout
    if via_router:
        assert "through the router" in r.stdout, r.stdout
    print(r.stdout)


def test_grpc_health_of_router_and_agent(stack):
    for target in (stack["router"], stack["agent"]):
        r = cli("health", "--target=" + target)
        assert r.returncode == 0 and "SERVING" in r.stdout, r.stdout + r.stderr


def test_metrics_scraped_from_the_host(stack):
    router = lib.http_get(f"http://127.0.0.1:{stack['router_metrics']}/metrics")
    assert re.search(r'^farcall_router_calls_total\{code="OK",handler="axpy",platform="cpu",'
                     r'tenant="[^"]*"\} [1-9]', router, re.M), router
    assert re.search(r'^farcall_router_resolves_total\{code="OK",handler="axpy",platform="cpu"\} '
                     r'[1-9]', router, re.M), router
    assert re.search(r'^farcall_router_agent_up\{[^}]*platform="oneapi"[^}]*\} 1', router, re.M), router
    agent = lib.http_get(f"http://127.0.0.1:{stack['agent_metrics']}/metrics")
    assert re.search(r'^farcall_agent_calls_total\{code="OK",handler="axpy",platform="cpu",'
                     r'tenant="[^"]*"\} [1-9]', agent, re.M), agent


def test_sigterm_stops_every_container_with_status_0(podman, stack):
    names = stack["names"]
    order = [names["router"], names["agent-cpu"], names["agent-oneapi"]]
    start = time.monotonic()
    podman.run("stop", "-t", str(STOP_TIMEOUT_S), *order, timeout=STOP_TIMEOUT_S * 3 + 30)
    took = time.monotonic() - start
    codes = {n: podman.inspect(n, "{{.State.ExitCode}}") for n in order}
    assert all(c == "0" for c in codes.values()), \
        f"exit codes after SIGTERM: {codes} (137: killed after {STOP_TIMEOUT_S} s)\n{stack['logs']()}"
    print(f"all stopped with status 0 in {took:.1f} s")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
