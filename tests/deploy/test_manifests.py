"""Static checks of deploy/: the Kubernetes manifests (kubernetes-validate
--strict for Kubernetes 1.30 and the newest it knows, the restricted Pod
Security Standard, probes, the router's agent discovery, resources, the
ServiceMonitor and PrometheusRule that no schema covers), yamllint, the
compose file, the Dockerfile's stages and the generated monitoring objects.

Run: .venv/bin/python -m pytest -q tests/deploy/test_manifests.py
  (or .venv/bin/python tests/deploy/test_manifests.py)

The kustomizations are rendered by a small renderer here (resources,
namespace, images and JSON 6902 patches, which is all deploy/k8s uses), so
that no kubectl is needed; where kubectl is installed, its `kubectl
kustomize` output is compared with it as well.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

try:
    import yaml
except ImportError:  # reported by the fixture below
    yaml = None

KUSTOMIZATIONS = ["", "base", "gpu", "monitoring", "laptop", "tls"]
NAMESPACE = "farcall"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
CLUSTER_SCOPED = {"Namespace"}
PLATFORM_DEVICE = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu", "oneapi": "gpu.intel.com/i915"}
ALLOWED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                        "persistentVolumeClaim", "projected", "secret"}


@pytest.fixture(scope="module", autouse=True)
def _yaml():
    if yaml is None:
        lib.unavailable("the Python module `yaml` (PyYAML)",
                        "pip install -r python/requirements-dev.txt")


# --- a small kustomize ---------------------------------------------------------

def _load_docs(path: pathlib.Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(doc: dict, ops: list[dict]) -> None:
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        kind = op["op"]
        if isinstance(node, list):
            if kind == "add":
                if last == "-":
                    node.append(copy.deepcopy(op["value"]))
                else:
                    node.insert(int(last), copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[int(last)] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[int(last)]
            else:
                raise AssertionError(f"unsupported JSON patch op {kind}")
        else:
            if kind == "add" or kind == "replace":
                if kind == "replace":
                    assert last in node, f"replace of a missing path {op['path']}"
                node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[last]
            else:
                raise AssertionError(f"unsupported JSON patch op {kind}")


def _matches(doc: dict, target: dict) -> bool:
    if "kind" in target and doc["kind"] != target["kind"]:
        return False
    if "name" in target and doc["metadata"]["name"] != target["name"]:
        return False
    if "labelSelector" in target:
        labels = doc["metadata"].get("labels", {})
        for term in target["labelSelector"].split(","):
            k, v = term.split("=")
            if labels.get(k.strip()) != v.strip():
                return False
    return True


def render(rel: str) -> list[dict]:
    """The objects `kubectl kustomize deploy/k8s/REL` would print."""
    root = lib.K8S / rel
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    unknown = set(k) - {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
    assert not unknown, f"{root}/kustomization.yaml uses {unknown}, which this test's renderer lacks"
    docs: list[dict] = []
    for r in k.get("resources", []):
        path = (root / r).resolve()
        if path.is_dir():
            docs += render(str(path.relative_to(lib.K8S)))
        else:
            docs += _load_docs(path)
    for p in k.get("patches", []):
        text = p["patch"] if "patch" in p else (root / p["path"]).read_text()
        ops = yaml.safe_load(text)
        assert isinstance(ops, list), f"{root}: only JSON 6902 patches are supported here"
        hit = [d for d in docs if _matches(d, p["target"])]
        assert hit, f"{root}: patch target {p['target']} matches nothing"
        for d in hit:
            _json_patch(d, ops)
    for img in k.get("images", []):
        for d in docs:
            for c in _containers(d):
                name, _, tag = c["image"].rpartition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    if "namespace" in k:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = k["namespace"]
    return docs


def _pod_spec(doc: dict) -> dict | None:
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return doc["spec"]["template"]["spec"]
    if doc["kind"] == "Pod":
        return doc["spec"]
    return None


def _containers(doc: dict) -> list[dict]:
    spec = _pod_spec(doc)
    if spec is None:
        return []
    return spec.get("containers", []) + spec.get("initContainers", [])


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {rel: render(rel) for rel in KUSTOMIZATIONS}


def _by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def _agents(docs):
    return [d for d in _by_kind(docs, "Deployment")
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == "agent"]


def _flag(args: list[str], name: str) -> str | None:
    value = None
    for a in args:
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
    return value


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    assert m, quantity
    return int(m.group(1)) * units.get(m.group(2), 1)


# --- Kubernetes ------------------------------------------------------------------

def test_every_manifest_belongs_to_a_kustomization():
    listed = set()
    for rel in KUSTOMIZATIONS:
        root = lib.K8S / rel
        k = yaml.safe_load((root / "kustomization.yaml").read_text())
        listed |= {(root / r).resolve() for r in k.get("resources", [])}
        listed |= {(root / p["path"]).resolve() for p in k.get("patches", []) if "path" in p}
    dirs = {(lib.K8S / rel).resolve() for rel in KUSTOMIZATIONS}
    for path in lib.K8S.rglob("*.yaml"):
        if path.name == "kustomization.yaml":
            assert path.parent.resolve() in dirs, f"{path}: a kustomization this test does not render"
            continue
        assert path.resolve() in listed, f"{path} is in no kustomization.yaml"


@pytest.mark.parametrize("version", ["1.30.0", "latest"])
def test_kubernetes_validate_strict(rendered, version, tmp_path):
    kv = lib.require_module("kubernetes_validate", "pip install -r python/requirements-dev.txt")
    tool = lib.require_tool("kubernetes-validate", "pip install -r python/requirements-dev.txt")
    if version == "latest":
        version = kv.latest_version()
    files = []
    for rel, docs in rendered.items():
        builtin = [d for d in docs if d["kind"] not in CRD_KINDS]
        path = tmp_path / f"{rel or 'all'}.yaml"
        path.write_text(yaml.safe_dump_all(builtin, sort_keys=False))
        files.append(str(path))
    r = subprocess.run([tool, "--strict", "--quiet", "-k", version, *files],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"kubernetes-validate --strict -k {version} failed:\n{out}"
    assert "Couldn't find schema" not in out, out
    print(f"kubernetes-validate --strict -k {version}: {len(files)} renders valid")


def test_kubectl_kustomize_agrees_with_this_renderer(rendered):
    """An extra check: kubectl is not a Debian package, so it is optional."""
    kubectl = lib.find_tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: the kustomizations were rendered by this test alone")
    for rel, mine in rendered.items():
        r = subprocess.run([kubectl, "kustomize", str(lib.K8S / rel)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"kubectl kustomize deploy/k8s/{rel}:\n{r.stderr}"
        theirs = [d for d in yaml.safe_load_all(r.stdout) if d]

        def key(d):
            return (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])

        assert sorted(map(key, theirs)) == sorted(map(key, mine)), rel
        mine_by = {key(d): d for d in mine}
        for d in theirs:
            assert d == mine_by[key(d)], f"deploy/k8s/{rel}: {key(d)} differs from kubectl's render"


def test_namespace_enforces_restricted(rendered):
    (ns,) = _by_kind(rendered[""], "Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_pods_meet_restricted_pod_security_standard(rendered, rel):
    for d in rendered[rel]:
        spec = _pod_spec(d)
        if spec is None:
            continue
        where = f"deploy/k8s/{rel}: {d['kind']} {d['metadata']['name']}"
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), f"{where}: {key}"
        psc = spec.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True, f"{where}: pod runAsNonRoot"
        assert psc.get("runAsUser", 1) != 0, where
        assert psc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"), \
            f"{where}: seccompProfile"
        assert spec.get("automountServiceAccountToken") is False, f"{where}: no API token needed"
        for v in spec.get("volumes", []):
            types = set(v) - {"name"}
            assert types <= ALLOWED_VOLUME_TYPES, f"{where}: volume {v['name']} is {types}"
        for c in _containers(d):
            csc = c.get("securityContext", {})
            cw = f"{where} container {c['name']}"
            assert csc.get("allowPrivilegeEscalation") is False, f"{cw}: allowPrivilegeEscalation"
            assert csc.get("readOnlyRootFilesystem") is True, f"{cw}: readOnlyRootFilesystem"
            assert not csc.get("privileged"), cw
            assert "ALL" in csc.get("capabilities", {}).get("drop", []), f"{cw}: drop ALL"
            assert set(csc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}, cw
            assert csc.get("runAsUser", 1) != 0, cw
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{cw}: a writable /tmp (emptyDir) for a read-only root"


@pytest.mark.parametrize("rel", ["", "laptop"])
def test_grpc_probes_on_the_serving_port(rendered, rel):
    for d in _by_kind(rendered[rel], "Deployment"):
        for c in _containers(d):
            grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
            for probe in ("readinessProbe", "livenessProbe"):
                assert c[probe]["grpc"]["port"] == grpc_port, f"{d['metadata']['name']} {probe}"


def test_tls_overlay_serves_tls_and_probes_with_the_cli(rendered):
    docs = rendered["tls"]
    for d in _by_kind(docs, "Deployment"):
        c = d["spec"]["template"]["spec"]["containers"][0]
        args = c["args"]
        name = d["metadata"]["name"]
        for flag in ("tls_cert", "tls_key", "tokens_file", "capability_key_file"):
            assert _flag(args, flag), f"{name}: --{flag}"
        if name == "farcall-router":
            assert _flag(args, "agent_tls_ca") and _flag(args, "agent_token_file"), name
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        for flag in ("tls_cert", "tls_key", "tokens_file", "agent_tls_ca", "agent_token_file",
                     "capability_key_file"):
            value = _flag(args, flag)
            if value:
                assert any(value.startswith(m + "/") for m in mounts.values()), f"{name}: --{flag}"
        for v in ("tls", "tokens"):
            assert "secret" in volumes[v], f"{name}: volume {v}"
        grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = c[probe]["exec"]["command"]
            assert cmd[:2] == ["/usr/local/bin/farcall", "health"], f"{name} {probe}"
            assert f"--target=localhost:{grpc_port}" in cmd, f"{name} {probe}"
            assert any(a.startswith("--tls_ca=") for a in cmd), f"{name} {probe}"


def test_router_finds_every_platform_through_a_headless_service(rendered):
    docs = rendered[""]
    (router,) = [d for d in _by_kind(docs, "Deployment") if d["metadata"]["name"] == "farcall-router"]
    assert router["spec"]["replicas"] >= 2
    pdbs = [p for p in _by_kind(docs, "PodDisruptionBudget")
            if p["spec"]["selector"]["matchLabels"].items()
            <= router["spec"]["template"]["metadata"]["labels"].items()]
    assert pdbs and pdbs[0]["spec"].get("minAvailable", 0) >= 1, "router PodDisruptionBudget"
    agents_flag = _flag(router["spec"]["template"]["spec"]["containers"][0]["args"], "agents")
    sources = agents_flag.split(",")
    services = {s["metadata"]["name"]: s for s in _by_kind(docs, "Service")}
    found = set()
    for src in sources:
        # server/agent_discovery.cc: dns:///NAME:PORT, every address NAME resolves to.
        m = re.fullmatch(r"dns:///([a-z0-9-]+)\.([a-z0-9-]+)\.svc:(\d+)", src)
        assert m, f"--agents entry {src!r} is not dns:///NAME.NAMESPACE.svc:PORT"
        name, ns, port = m.group(1), m.group(2), int(m.group(3))
        assert ns == NAMESPACE, src
        svc = services[name]
        assert svc["spec"].get("clusterIP") == "None", f"{name} must be headless"
        assert port in [p["port"] for p in svc["spec"]["ports"]], src
        found.add(name)
    for a in _agents(docs):
        labels = a["spec"]["template"]["metadata"]["labels"]
        selecting = [s for s in services.values()
                     if s["spec"]["selector"].items() <= labels.items()]
        assert len(selecting) == 1, f"{a['metadata']['name']}: one Service selects it"
        assert selecting[0]["metadata"]["name"] in found, \
            f"the router's --agents misses {selecting[0]['metadata']['name']}"
        assert selecting[0]["spec"]["ports"][0]["targetPort"] == "grpc"
    assert {a["metadata"]["name"] for a in _agents(docs)} == {
        f"farcall-agent-{p}" for p in ("cpu", "cuda", "rocm", "oneapi")}


@pytest.mark.parametrize("rel", ["", "laptop"])
def test_agent_resources_devices_and_budget(rendered, rel):
    for a in _agents(rendered[rel]):
        name = a["metadata"]["name"]
        platform = name.rsplit("-", 1)[1]
        spec = a["spec"]["template"]["spec"]
        c = spec["containers"][0]
        assert c["image"].startswith(f"localhost/farcall-agent-{platform}:"), name
        req, lim = c["resources"]["requests"], c["resources"]["limits"]
        # Guaranteed QoS: the budget (3/4 of the memory limit) is memory the
        # node has set aside.
        assert req["memory"] == lim["memory"] and req["cpu"] == lim["cpu"], name
        budget = _flag(c["args"], "max_inflight_bytes")
        if budget:
            assert int(budget) <= _bytes(lim["memory"]), f"{name}: budget over the memory limit"
        assert spec["terminationGracePeriodSeconds"] > 30, f"{name}: longer than the 30 s drain"
        if platform in PLATFORM_DEVICE:
            res = PLATFORM_DEVICE[platform]
            assert int(lim[res]) >= 1, f"{name}: {res}"
            assert spec.get("nodeSelector"), f"{name}: nodeSelector"
            assert any(t.get("key") == res for t in spec.get("tolerations", [])), name
        else:
            assert not spec.get("nodeSelector") and not spec.get("tolerations"), name
        workers = _flag(c["args"], "workers")
        if workers:
            assert int(workers) <= _bytes(str(lim["cpu"]).rstrip("m")), name


def test_network_policies_fence_agents_and_routers(rendered):
    docs = rendered[""]
    policies = {p["metadata"]["name"]: p["spec"] for p in _by_kind(docs, "NetworkPolicy")}
    assert set(policies) == {"farcall-agents", "farcall-router"}
    agents, router = policies["farcall-agents"], policies["farcall-router"]
    # Every agent Deployment (cpu and the devices) is selected.
    selector = agents["podSelector"]["matchLabels"]
    for a in _agents(docs):
        labels = a["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), a["metadata"]["name"]
    assert agents["policyTypes"] == ["Ingress"] and router["policyTypes"] == ["Ingress"]
    client = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"farcall.dev/client": "true"}}}
    routers = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "farcall-router"}}}
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    # Agents: any TCP port (gRPC and UCX) from routers and labelled clients
    # only; metrics from Prometheus's namespace only.
    (calls, metrics) = agents["ingress"]
    assert calls["from"] == [routers, client] and "ports" not in calls
    assert metrics == {"from": [monitoring], "ports": [{"protocol": "TCP", "port": "metrics"}]}
    # The router: gRPC from labelled clients; metrics and status page from
    # Prometheus's namespace.
    (calls, metrics) = router["ingress"]
    assert calls == {"from": [client], "ports": [{"protocol": "TCP", "port": "grpc"}]}
    assert metrics == {"from": [monitoring], "ports": [{"protocol": "TCP", "port": "metrics"}]}
    # The named ports exist on the pods they fence.
    for d in _by_kind(docs, "Deployment"):
        ports = {p["name"] for c in d["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        assert {"grpc", "metrics"} <= ports, d["metadata"]["name"]


def test_service_monitor_scrapes_every_metrics_port(rendered):
    docs = rendered[""]
    (sm,) = _by_kind(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm) <= {"apiVersion", "kind", "metadata", "spec"}
    spec = sm["spec"]
    selector = spec["selector"]["matchLabels"]
    assert selector, "selector.matchLabels"
    services = _by_kind(docs, "Service")
    selected = [s for s in services if selector.items() <= s["metadata"].get("labels", {}).items()]
    with_metrics = [s for s in services if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    assert {s["metadata"]["name"] for s in selected} == {s["metadata"]["name"] for s in with_metrics}
    assert len(selected) == 5, [s["metadata"]["name"] for s in selected]
    ns_sel = spec.get("namespaceSelector", {})
    assert not ns_sel or NAMESPACE in ns_sel.get("matchNames", []) or ns_sel.get("any")
    assert spec["endpoints"], "endpoints"
    for ep in spec["endpoints"]:
        assert ep["path"] == "/metrics"
        assert ep.get("scheme", "http") == "http"
        for s in selected:
            ports = {p["name"]: p for p in s["spec"]["ports"]}
            assert ep["port"] in ports, f"{s['metadata']['name']} has no port named {ep['port']}"
        for key in ("interval", "scrapeTimeout"):
            if key in ep:
                assert re.fullmatch(r"\d+(ms|s|m|h)", ep[key]), ep[key]
    assert sm["metadata"]["namespace"] == NAMESPACE


def test_prometheus_rule_holds_the_rules_file(rendered):
    (pr,) = _by_kind(rendered[""], "PrometheusRule")
    assert pr["apiVersion"] == "monitoring.coreos.com/v1"
    rules = yaml.safe_load(lib.RULES_FILE.read_text())
    assert pr["spec"] == {"groups": rules["groups"]}
    for g in pr["spec"]["groups"]:
        assert g["name"] and g["rules"]
        for r in g["rules"]:
            assert ("alert" in r) != ("record" in r) and r["expr"]


def test_generated_monitoring_objects_are_in_step():
    r = subprocess.run([sys.executable, str(lib.K8S / "monitoring" / "generate.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_dashboard_configmap_matches_farcall_json(rendered):
    (cm,) = [c for c in _by_kind(rendered[""], "ConfigMap")
             if c["metadata"]["name"] == "farcall-grafana-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["farcall.json"]) == json.loads(lib.DASHBOARD_FILE.read_text())


# --- yamllint, compose, the dashboard, the Dockerfile ----------------------------------

def test_yamllint():
    tool = lib.require_tool("yamllint", "pip install -r python/requirements-dev.txt")
    r = subprocess.run([tool, "--strict", "-c", str(lib.DEPLOY / ".yamllint"), "deploy/"],
                       cwd=lib.ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def _dockerfile_stages() -> dict[str, dict]:
    stages: dict[str, dict] = {}
    current = None
    text = (lib.DEPLOY / "docker" / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    args = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and current is None:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest, re.I)
            assert m, f"every stage is named: FROM {rest}"
            current = {"from": m.group(1), "lines": [], "name": m.group(2)}
            stages[m.group(2)] = current
        else:
            current["lines"].append((word, rest))
    stages["__args__"] = args
    return stages


def test_dockerfile_stages_and_images():
    stages = _dockerfile_stages()
    args = stages.pop("__args__")
    seen = set()
    for name, st in stages.items():
        base = st["from"]
        m = re.fullmatch(r"\$\{(\w+)\}", base)
        if m:
            assert args.get(m.group(1)), f"FROM ${{{m.group(1)}}} needs a default"
        else:
            assert base == "scratch" or base in seen, f"stage {name}: FROM {base} is no earlier stage"
        for word, rest in st["lines"]:
            if word == "COPY":
                m = re.match(r"--from=(\S+)\s+(.*)", rest)
                if m:
                    assert m.group(1) in seen, f"stage {name}: COPY --from={m.group(1)} is no earlier stage"
                else:
                    src = rest.split()[0]
                    assert (lib.ROOT / src).exists(), f"stage {name}: COPY {src}"
        seen.add(name)
    # Prebuilt binaries replace these stages (build_images.sh --prebuilt).
    for s in ("binaries", "binaries-rocm", "binaries-cuda"):
        assert s in stages
    script = (lib.DEPLOY / "build_images.sh").read_text()
    all_images = re.search(r"^ALL_IMAGES=(\S+)", script, re.M).group(1).split(",")
    assert set(all_images) == {"router", "agent-cpu", "agent-oneapi", "agent-rocm", "agent-cuda"}
    for target in all_images:
        lines = stages[target]["lines"]
        words = [w for w, _ in lines]
        assert ("USER", "65532:65532") in lines, f"{target}: non-root user"
        assert "EXPOSE" in words or "EXPOSE" in [w for w, _ in stages[stages[target]["from"]]["lines"]], target
        (entry,) = [json.loads(r) for w, r in lines if w == "ENTRYPOINT"]
        binary = "farcall-router" if target == "router" else "farcall-agent"
        assert entry[0] == f"/usr/local/bin/{binary}", target
        assert any(a.startswith("--listen=0.0.0.0:") for a in entry), target
        assert any(a.startswith("--metrics_listen=0.0.0.0:") for a in entry), target
        if target != "router":
            assert f"--platform={target.split('-', 1)[1]}" in entry, target
        assert any(w == "RUN" and "ldd" in r for w, r in lines), f"{target}: ldd check"
    for arg in re.findall(r'--build-arg "(\w+)=', script):
        assert arg in args or any(("ARG", arg) == (w, r.partition("=")[0])
                                  for st in stages.values() for w, r in st["lines"]), arg


def test_build_images_script_parses_and_has_help():
    r = subprocess.run(["bash", "-n", str(lib.DEPLOY / "build_images.sh")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["bash", str(lib.DEPLOY / "build_images.sh"), "--help"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--prebuilt" in r.stdout, r.stdout + r.stderr


def test_compose_file_and_what_it_mounts():
    compose = yaml.safe_load((lib.DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) >= {"router", "agent-cpu", "prometheus", "grafana"}
    stages = _dockerfile_stages()
    for name, s in services.items():
        if "build" in s:
            b = s["build"]
            ctx = (lib.DEPLOY / b["context"]).resolve()
            assert ctx.is_dir(), f"{name}: build context {b['context']}"
            assert (ctx / b["dockerfile"]).is_file(), f"{name}: {b['dockerfile']}"
            assert b["target"] in stages, f"{name}: target {b['target']}"
            assert s["image"] == f"localhost/farcall-{b['target']}:dev", name
            assert s.get("read_only") is True and str(s.get("user", "")).startswith("65532"), name
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (lib.DEPLOY / src).exists(), f"{name}: volume source {src}"
            else:
                assert src in compose.get("volumes", {}), f"{name}: named volume {src}"
        for dep in s.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown {dep}"
    router_agents = _flag(services["router"]["command"], "agents").split(",")
    for a in router_agents:
        host, port = a.rsplit(":", 1)
        assert host in services, a
    # Prometheus: the mounted config scrapes the compose services and finds
    # its rules file where it is mounted.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    prom = yaml.safe_load((lib.DEPLOY / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    for rf in prom["rule_files"]:
        assert f"/etc/prometheus/{rf}" in mounts, rf
    targets = [t for sc in prom["scrape_configs"] for c in sc["static_configs"] for t in c["targets"]]
    for t in targets:
        host, port = t.rsplit(":", 1)
        assert host in services, t
    # Grafana: the provisioned dashboard folder is where farcall.json is mounted.
    gmounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    prov_dir = lib.DEPLOY / gmounts["/etc/grafana/provisioning/dashboards"]
    (provider,) = yaml.safe_load((prov_dir / "farcall.yml").read_text())["providers"]
    dash_mount = [m for m, src in gmounts.items() if src.endswith("farcall.json")]
    assert dash_mount and dash_mount[0].startswith(provider["options"]["path"] + "/")
    ds_dir = lib.DEPLOY / gmounts["/etc/grafana/provisioning/datasources"]
    (ds,) = yaml.safe_load((ds_dir / "prometheus.yml").read_text())["datasources"]
    assert re.match(r"http://prometheus:9090", ds["url"])


def test_dashboard_structure():
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    assert d["uid"] and d["title"]
    names = {v["name"]: v for v in d["templating"]["list"]}
    assert set(names) >= {"datasource", "platform", "handler", "agent"}
    assert "instance" in names["agent"]["query"], "the agent variable lists instances"
    ids = []

    def walk(ps):
        for p in ps:
            ids.append(p["id"])
            if p["type"] != "row":
                assert p.get("targets"), p["title"]
                assert p["datasource"]["uid"] == "${datasource}", p["title"]
                for t in p["targets"]:
                    assert t["expr"].strip() and t["refId"], p["title"]
            walk(p.get("panels", []))

    walk(d["panels"])
    assert len(ids) == len(set(ids)), "panel ids are unique"
    types = {p["type"] for p in d["panels"]}
    assert {"timeseries", "heatmap"} <= types
    # No two panels overlap on the grid.
    cells = {}
    for p in d["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for yy in range(g["y"], g["y"] + g["h"]):
                assert (x, yy) not in cells, f"{p['title']} overlaps {cells[(x, yy)]}"
                cells[(x, yy)] = p["title"]


def test_every_alert_is_explained_in_docs():
    rules = yaml.safe_load(lib.RULES_FILE.read_text())
    doc = (lib.ROOT / "docs" / "deploy.md").read_text()
    headings = {h.strip().lower() for h in re.findall(r"^#+\s+`?(\w+)`?\s*$", doc, re.M)}
    for g in rules["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert r["alert"].lower() in headings, f"docs/deploy.md has no heading {r['alert']}"
                assert r["annotations"]["runbook"] == f"docs/deploy.md#{r['alert'].lower()}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
