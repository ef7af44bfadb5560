"""Static checks of deploy/: the Kubernetes manifests (kubernetes-validate
--strict for Kubernetes 1.30 and the newest it knows, the restricted Pod
Security Standard, probes, the router's agent discovery, resources, the
ServiceMonitor and PrometheusRule that no schema covers), yamllint, the
compose file, the Dockerfile's stages and the generated monitoring objects.

Run: .venv/bin/python -m pytest -q tests/deploy/test_manifests.py
  (or .venv/bin/python tests/deploy/test_manifests.py)

The kustomizations are rendered by a small renderer here (resources,
namespace, images, JSON 6902 patches and secretGenerators with their hashed
names, which is all deploy/k8s uses), so that no kubectl is needed; where
kubectl is installed, its `kubectl kustomize` output is compared with it as
well. They are rendered from a copy of deploy/k8s in which stand-in files
take the place of the keys that the TLS overlay's secretGenerators read and
git ignores (deploy/k8s/tls/keys/).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import pathlib
import re
import shutil
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

KUSTOMIZATIONS = ["", "base", "gpu", "monitoring", "laptop", "tls", "examples/hpa-agent-cpu"]
NAMESPACE = "farcall"
SERVICE_ACCOUNT = "farcall"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
CLUSTER_SCOPED = {"Namespace"}
PLATFORM_DEVICE = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu", "oneapi": "gpu.intel.com/i915"}
ALLOWED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                        "persistentVolumeClaim", "projected", "secret"}
# Files the binaries read again when they change (core/security_flags.h:
# ReloadFiles), and files they read at start only. A Secret behind the first
# kind is updated in place; one behind the second must roll its pods.
RELOADED_FLAGS = {"tls_cert", "tls_key", "tls_ca", "tokens_file", "capability_signing_key_file",
                  "capability_verify_keys_file", "metrics_tokens_file", "metrics_client_ca"}
START_ONLY_FLAGS = {"agent_token_file", "agent_tls_ca", "agent_tls_cert", "agent_tls_key"}
DRAIN_SECONDS = 30  # --drain_seconds' default (core/limit_flags.cc)
MAX_CALL_SECONDS = 3600  # --max_call_seconds' default (core/limit_flags.cc)


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


def _kustomize_hash(secret: dict) -> str:
    """The suffix kustomize gives a generated Secret's name (api/hasher):
    sha256 of the JSON of its kind, type, data and name, where the name is
    always "" (kustomize looks it up by a path that finds nothing), the
    first 10 hex digits, with some digits and vowels swapped for letters."""
    encoded = json.dumps({"data": secret["data"], "kind": "Secret", "name": "",
                          "type": secret["type"]}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"}))


def _generator_files(g: dict) -> list[tuple[str, str]]:
    """(key, path) of each file a secretGenerator entry reads."""
    out = []
    for f in g.get("files", []):
        key, sep, path = f.partition("=")
        out.append((key, path) if sep else (pathlib.PurePath(f).name, f))
    return out


def _kustomize_base64(data: bytes) -> str:
    """Base64 as kustomize writes a generated Secret's values (kyaml): a
    value of 70 characters or more goes in lines of 70, each ending in a
    newline."""
    text = base64.b64encode(data).decode()
    if len(text) < 70:
        return text
    return "".join(text[i:i + 70] + "\n" for i in range(0, len(text), 70))


def _generate_secret(root: pathlib.Path, g: dict) -> dict:
    unknown = set(g) - {"name", "files", "options", "type"}
    assert not unknown, f"{root}: secretGenerator uses {unknown}, which this test's renderer lacks"
    assert set(g.get("options", {})) <= {"labels"}, f"{root}: secretGenerator options"
    data = {key: _kustomize_base64((root / path).read_bytes()) for key, path in _generator_files(g)}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {}, "type": g.get("type", "Opaque"),
              "data": data}
    secret["metadata"]["name"] = f"{g['name']}-{_kustomize_hash(secret)}"
    if g.get("options", {}).get("labels"):
        secret["metadata"]["labels"] = dict(g["options"]["labels"])
    return secret


def _rename_secret_references(docs: list[dict], names: dict[str, str]) -> None:
    """What kustomize's name references do for generated Secrets in pods."""
    for d in docs:
        spec = _pod_spec(d)
        if spec is None:
            continue
        for v in spec.get("volumes", []):
            if "secret" in v:
                v["secret"]["secretName"] = names.get(v["secret"]["secretName"],
                                                      v["secret"]["secretName"])
            for src in v.get("projected", {}).get("sources", []):
                if "secret" in src:
                    src["secret"]["name"] = names.get(src["secret"]["name"], src["secret"]["name"])
        for c in _containers(d):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    ref["name"] = names.get(ref["name"], ref["name"])
            for e in c.get("envFrom", []):
                if "secretRef" in e:
                    e["secretRef"]["name"] = names.get(e["secretRef"]["name"], e["secretRef"]["name"])


def render(rel: str, k8s: pathlib.Path | None = None) -> list[dict]:
    """The objects `kubectl kustomize K8S/REL` would print (K8S: deploy/k8s,
    or a copy of it)."""
    k8s = (k8s or lib.K8S).resolve()
    root = k8s / rel
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    unknown = set(k) - {"apiVersion", "kind", "namespace", "resources", "images", "patches",
                        "secretGenerator"}
    assert not unknown, f"{root}/kustomization.yaml uses {unknown}, which this test's renderer lacks"
    docs: list[dict] = []
    for r in k.get("resources", []):
        path = (root / r).resolve()
        if path.is_dir():
            docs += render(str(path.relative_to(k8s)), k8s)
        else:
            docs += _load_docs(path)
    generated = {}
    for g in k.get("secretGenerator", []):
        secret = _generate_secret(root, g)
        generated[g["name"]] = secret["metadata"]["name"]
        docs.append(secret)
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
                if name == img["name"] and "digest" in img:  # a digest wins over a tag
                    c["image"] = f"{img.get('newName', name)}@{img['digest']}"
                elif name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    if "namespace" in k:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = k["namespace"]
    _rename_secret_references(docs, generated)
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


def _generator_sources(k8s: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """(kustomization, file) for every file a secretGenerator reads."""
    out = []
    for rel in KUSTOMIZATIONS:
        root = k8s / rel
        k = yaml.safe_load((root / "kustomization.yaml").read_text())
        for g in k.get("secretGenerator", []):
            out += [(rel, root / path) for _, path in _generator_files(g)]
    return out


def copy_of_k8s(dest: pathlib.Path, contents: dict[str, bytes] | None = None) -> pathlib.Path:
    """deploy/k8s copied to DEST/k8s, without the keys the secretGenerators
    read (git ignores them; a developer's real ones stay where they are);
    stand-ins take their place, or CONTENTS[file name] where given."""
    sources = {p.resolve() for _, p in _generator_sources(lib.K8S)}

    def skip(directory, names):
        return [n for n in names if (pathlib.Path(directory) / n).resolve() in sources]

    k8s = dest / "k8s"
    shutil.copytree(lib.K8S, k8s, ignore=skip)
    for _, path in _generator_sources(k8s):
        path.write_bytes((contents or {}).get(path.name, f"stand-in for {path.name} ".encode() * 4))
    return k8s


@pytest.fixture(scope="module")
def k8s_copy(tmp_path_factory) -> pathlib.Path:
    return copy_of_k8s(tmp_path_factory.mktemp("deploy"))


@pytest.fixture(scope="module")
def rendered(k8s_copy) -> dict[str, list[dict]]:
    return {rel: render(rel, k8s_copy) for rel in KUSTOMIZATIONS}


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
        path = tmp_path / f"{rel.replace('/', '-') or 'all'}.yaml"
        path.write_text(yaml.safe_dump_all(builtin, sort_keys=False))
        files.append(str(path))
    r = subprocess.run([tool, "--strict", "--quiet", "-k", version, *files],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"kubernetes-validate --strict -k {version} failed:\n{out}"
    assert "Couldn't find schema" not in out, out
    print(f"kubernetes-validate --strict -k {version}: {len(files)} renders valid")


def test_kubectl_kustomize_agrees_with_this_renderer(rendered, k8s_copy):
    """An extra check: kubectl is not a Debian package, so it is optional."""
    kubectl = lib.find_tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: the kustomizations were rendered by this test alone")
    for rel, mine in rendered.items():
        r = subprocess.run([kubectl, "kustomize", str(k8s_copy / rel)],
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
        for flag in ("tls_cert", "tls_key", "tokens_file"):
            assert _flag(args, flag), f"{name}: --{flag}"
        # The router signs capabilities with its private key; agents verify
        # them with public keys only, so that no agent can make one.
        router = name == "farcall-router"
        assert bool(_flag(args, "capability_signing_key_file")) == router, name
        assert bool(_flag(args, "capability_verify_keys_file")) != router, name
        assert not _flag(args, "capability_key_file"), f"{name}: the retired shared secret"
        if router:
            assert _flag(args, "agent_tls_ca") and _flag(args, "agent_token_file"), name
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        for flag in ("tls_cert", "tls_key", "tokens_file", "agent_tls_ca", "agent_token_file",
                     "capability_signing_key_file", "capability_verify_keys_file"):
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
        # server/agent_discovery.cc: dns:///NAME:PORT, every address NAME
        # resolves to. A Service's short name resolves in the pod's own
        # namespace (its DNS search path), so no namespace is named.
        m = re.fullmatch(r"dns:///([a-z0-9-]+):(\d+)", src)
        assert m, f"--agents entry {src!r} is not dns:///SERVICE:PORT"
        name, port = m.group(1), int(m.group(2))
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


UCX_RANGE = {"protocol": "TCP", "port": 50100, "endPort": 50199}


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
    assert agents["policyTypes"] == ["Ingress", "Egress"] and router["policyTypes"] == ["Ingress"]
    # Clients: labelled pods in namespaces named by the cluster's admin, never
    # any namespace (any tenant may label its own pods).
    named = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                   "values": ["farcall", "training"]}]}
    client = {"namespaceSelector": named,
              "podSelector": {"matchLabels": {"farcall.dev/client": "true"}}}
    routers = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "farcall-router"}}}
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    grpc = {"protocol": "TCP", "port": "grpc"}
    metrics_port = {"protocol": "TCP", "port": "metrics"}
    # Agents: gRPC from routers; gRPC and UCX's range from clients; metrics
    # from Prometheus's namespace. Every rule names its ports.
    (from_routers, from_clients, metrics) = agents["ingress"]
    assert from_routers == {"from": [routers], "ports": [grpc]}
    assert from_clients == {"from": [client], "ports": [grpc, UCX_RANGE]}
    assert metrics == {"from": [monitoring], "ports": [metrics_port]}
    # Agents reach DNS and their clients' UCX ports, nothing else.
    (dns, ucx) = agents["egress"]
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert ucx == {"to": [client], "ports": [UCX_RANGE]}
    # The router: gRPC from the same clients; metrics and status page from
    # Prometheus's namespace.
    (calls, metrics) = router["ingress"]
    assert calls == {"from": [client], "ports": [grpc]}
    assert metrics == {"from": [monitoring], "ports": [metrics_port]}
    # The metrics port opens to Prometheus's namespace alone, and no rule
    # anywhere leaves its ports (all of them) open.
    for spec in policies.values():
        for rule in spec.get("ingress", []):
            assert rule.get("ports"), rule
            if metrics_port in rule["ports"]:
                assert rule["from"] == [monitoring], rule
            for peer in rule["from"]:
                assert peer.get("namespaceSelector") != {}, rule
    # The named ports exist on the pods they fence.
    for d in _by_kind(docs, "Deployment"):
        ports = {p["name"] for c in d["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        assert {"grpc", "metrics"} <= ports, d["metadata"]["name"]


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_agents_pin_ucx_to_the_ports_the_policy_opens(rendered, rel):
    """UCX picks its listening ports; every agent pins them
    (UCX_TCP_PORT_RANGE) to the range the NetworkPolicy opens."""
    for a in _agents(rendered[rel]):
        env = {e["name"]: e.get("value") for e in _containers(a)[0].get("env", [])}
        assert env.get("UCX_TCP_PORT_RANGE") == "50100-50199", a["metadata"]["name"]


def _selected_by(docs, kind, pod_labels):
    return [d for d in _by_kind(docs, kind)
            if d["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()]


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_pods_run_as_a_service_account_without_a_token(rendered, rel):
    docs = rendered[rel]
    accounts = {a["metadata"]["name"]: a for a in _by_kind(docs, "ServiceAccount")}
    for d in docs:
        spec = _pod_spec(d)
        if spec is None:
            continue
        name = f"deploy/k8s/{rel}: {d['kind']} {d['metadata']['name']}"
        assert spec.get("serviceAccountName") == SERVICE_ACCOUNT, f"{name}: serviceAccountName"
        if accounts:  # renders without base/ (gpu/) rely on base's
            assert SERVICE_ACCOUNT in accounts, f"{name}: no ServiceAccount {SERVICE_ACCOUNT}"
    for a in accounts.values():
        assert a["automountServiceAccountToken"] is False, a["metadata"]["name"]
        assert a["metadata"]["namespace"] == NAMESPACE
    # Nothing grants it anything: farcall never calls the Kubernetes API.
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        assert not _by_kind(docs, kind), f"deploy/k8s/{rel}: {kind}"


@pytest.mark.parametrize("rel", ["", "laptop", "tls", "examples/hpa-agent-cpu"])
def test_disruption_budgets_never_block_a_drain(rendered, rel):
    docs = rendered[rel]
    for d in _by_kind(docs, "Deployment"):
        name = d["metadata"]["name"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        (pdb,) = _selected_by(docs, "PodDisruptionBudget", labels) or [None]
        assert pdb is not None, f"deploy/k8s/{rel}: no PodDisruptionBudget selects {name}"
        spec = pdb["spec"]
        replicas = d["spec"].get("replicas", 1)
        if "maxUnavailable" in spec:
            assert int(spec["maxUnavailable"]) >= 1, f"{name}: maxUnavailable 0 blocks every eviction"
        else:
            assert int(spec["minAvailable"]) < replicas, \
                f"{name}: minAvailable {spec['minAvailable']} of {replicas} blocks every eviction"
        # A pod that is not ready (crash-looping) never holds up a node's drain.
        assert spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow", name


@pytest.mark.parametrize("rel", ["", "laptop", "tls"])
def test_agents_spread_over_nodes_and_zones(rendered, rel):
    for a in _agents(rendered[rel]):
        name = a["metadata"]["name"]
        labels = a["spec"]["template"]["metadata"]["labels"]
        spread = a["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
        keys = {c["topologyKey"] for c in spread}
        assert {"kubernetes.io/hostname", "topology.kubernetes.io/zone"} <= keys, f"{name}: {keys}"
        for c in spread:
            assert c["labelSelector"]["matchLabels"].items() <= labels.items(), name
            assert c["labelSelector"]["matchLabels"], f"{name}: spread over its own pods"
            # Spreading must never leave an agent Pending (GPUs sit on few nodes).
            assert c["whenUnsatisfiable"] == "ScheduleAnyway", name
            assert c["maxSkew"] == 1, name
            # Each rollout's new pods are spread on their own.
            assert "pod-template-hash" in c.get("matchLabelKeys", []), name


@pytest.mark.parametrize("rel", ["", "laptop", "tls"])
def test_rollout_strategies(rendered, rel):
    for d in _by_kind(rendered[rel], "Deployment"):
        name = d["metadata"]["name"]
        platform = name.rsplit("-", 1)[1]
        strategy = d["spec"].get("strategy", {})
        assert strategy.get("type") == "RollingUpdate", name
        ru = strategy["rollingUpdate"]
        if platform in PLATFORM_DEVICE:
            # A full GPU pool cannot place a surge pod: it would wait Pending
            # and the rollout with it.
            assert str(ru["maxSurge"]) in ("0", "0%"), f"{name}: maxSurge {ru['maxSurge']}"
            assert int(str(ru["maxUnavailable"]).rstrip("%")) >= 1, name
        else:
            assert str(ru["maxUnavailable"]) in ("0", "0%"), f"{name}: maxUnavailable"
            assert int(str(ru["maxSurge"]).rstrip("%")) >= 1, name


@pytest.mark.parametrize("rel", ["", "laptop", "tls"])
def test_router_keeps_serving_until_its_endpoints_are_gone(rendered, rel):
    (router,) = [d for d in _by_kind(rendered[rel], "Deployment")
                 if d["metadata"]["name"] == "farcall-router"]
    spec = router["spec"]["template"]["spec"]
    c = spec["containers"][0]
    pre_stop = c.get("lifecycle", {}).get("preStop", {})
    # Kubernetes' own sleep (1.30 and later): nothing in the image runs.
    assert set(pre_stop) == {"sleep"}, f"preStop {pre_stop}: use sleep, not exec or httpGet"
    sleep = pre_stop["sleep"]["seconds"]
    assert 5 <= sleep <= 30, sleep
    drain = float(_flag(c["args"], "drain_seconds") or DRAIN_SECONDS)
    assert spec["terminationGracePeriodSeconds"] > sleep + drain, \
        "the grace period covers the preStop sleep and the drain"


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_drains_never_cut_a_call_the_agents_allow(rendered, rel):
    """Every agent drains for at least its longest call (--max_call_seconds),
    and the router for the agents' longest, so that a roll or a node drain
    never cuts a call; each grace period covers the preStop sleep and the
    drain."""
    longest = 0.0
    for a in _agents(rendered[rel]):
        c = _containers(a)[0]
        drain = float(_flag(c["args"], "drain_seconds") or DRAIN_SECONDS)
        max_call = float(_flag(c["args"], "max_call_seconds") or MAX_CALL_SECONDS)
        longest = max(longest, max_call)
        assert drain >= max_call, (a["metadata"]["name"], drain, max_call)
        grace = a["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= drain + 5, (a["metadata"]["name"], grace, drain)
    for router in [d for d in _by_kind(rendered[rel], "Deployment")
                   if d["metadata"]["name"] == "farcall-router"]:
        c = _containers(router)[0]
        drain = float(_flag(c["args"], "drain_seconds") or DRAIN_SECONDS)
        assert drain >= longest, (drain, longest)
        sleep = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        grace = router["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= sleep + drain + 5, (grace, sleep, drain)


def _project_version() -> str:
    text = (lib.ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(farcall VERSION ([0-9][0-9.]*)", text).group(1)


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_images_and_pods_carry_the_release_version(rendered, rel):
    """Every image is the release's tag (CMakeLists.txt's version, which
    deploy/build_images.sh tags), not a moving `dev`, and every Deployment
    and its pods say which version they run."""
    version = _project_version()
    for d in _by_kind(rendered[rel], "Deployment"):
        name = d["metadata"]["name"]
        assert d["metadata"]["labels"].get("app.kubernetes.io/version") == version, name
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        assert pod_labels.get("app.kubernetes.io/version") == version, name
        # A version label in a selector could never change.
        assert "app.kubernetes.io/version" not in d["spec"]["selector"]["matchLabels"], name
        for c in _containers(d):
            assert c["image"].endswith(":" + version), (name, c["image"])


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_emptydirs_have_ephemeral_storage_requests(rendered, rel):
    for d in rendered[rel]:
        spec = _pod_spec(d)
        if spec is None:
            continue
        empty = {v["name"]: v["emptyDir"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for c in _containers(d):
            where = f"deploy/k8s/{rel}: {d['metadata']['name']} container {c['name']}"
            mounted = [empty[m["name"]] for m in c.get("volumeMounts", []) if m["name"] in empty]
            if not mounted:
                continue
            for e in mounted:
                assert e.get("sizeLimit"), f"{where}: an emptyDir without sizeLimit"
                assert e.get("medium", "") == "", f"{where}: a memory-backed emptyDir"
            want = sum(_bytes(e["sizeLimit"]) for e in mounted)
            res = c.get("resources", {})
            req = res.get("requests", {}).get("ephemeral-storage")
            lim = res.get("limits", {}).get("ephemeral-storage")
            # Logs count against it too: some room above the emptyDirs.
            assert req and _bytes(req) > want, f"{where}: ephemeral-storage request {req} for {want} B"
            assert lim and _bytes(lim) >= _bytes(req), f"{where}: ephemeral-storage limit {lim}"


def _strings_of(c: dict) -> list[str]:
    out = list(c.get("command", [])) + list(c.get("args", []))
    out += [e["value"] for e in c.get("env", []) if "value" in e]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        out += c.get(probe, {}).get("exec", {}).get("command", [])
    return out


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_no_namespace_in_arguments(rendered, rel):
    """Names in arguments resolve in the pod's own namespace (short Service
    names) or take it from the downward API: the kustomizations alone say
    where farcall runs."""
    for d in rendered[rel]:
        for c in _containers(d):
            where = f"deploy/k8s/{rel}: {d['metadata']['name']}"
            from_api = {e["name"] for e in c.get("env", [])
                        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                        == "metadata.namespace"}
            for s in _strings_of(c):
                assert not re.search(rf"\.{NAMESPACE}(\.|:|/|$)", s), f"{where}: {s!r} names the namespace"
                for m in re.finditer(r"([^./=\s]+)\.svc\b", s):
                    var = re.fullmatch(r"\$\((\w+)\)", m.group(1))
                    assert var and var.group(1) in from_api, \
                        f"{where}: {s!r}: the namespace before .svc comes from the downward API"


def test_tls_overlay_rolls_pods_when_a_secret_read_at_start_changes(rendered, tmp_path):
    docs = rendered["tls"]
    tls = yaml.safe_load((lib.K8S / "tls" / "kustomization.yaml").read_text())
    generated = {g["name"] for g in tls["secretGenerator"]}
    secrets = {s["metadata"]["name"] for s in _by_kind(docs, "Secret")}
    for d in _by_kind(docs, "Deployment"):
        name = d["metadata"]["name"]
        c = d["spec"]["template"]["spec"]["containers"][0]
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        for flag in RELOADED_FLAGS | START_ONLY_FLAGS:
            value = _flag(c["args"], flag)
            if not value:
                continue
            (volume,) = [v for path, v in mounts.items() if value.startswith(path + "/")]
            secret = volumes[volume]["secret"]["secretName"]
            base, _, suffix = secret.rpartition("-")
            if flag in START_ONLY_FLAGS:
                # Read at start only: a generated Secret, whose name changes
                # with its content, so that a change rolls the pods.
                assert base in generated and secret in secrets, f"{name}: --{flag} from {secret}"
                assert re.fullmatch(r"[a-z0-9]{10}", suffix), secret
            else:
                # Read again when it changes: a Secret of a fixed name (made
                # by hand or by cert-manager), updated in place.
                assert secret not in secrets and base not in generated, f"{name}: --{flag} from {secret}"

    def templates(contents):
        k8s = copy_of_k8s(tmp_path / str(len(list(tmp_path.iterdir()))), contents)
        return {d["metadata"]["name"]: d["spec"]["template"]
                for d in _by_kind(render("tls", k8s), "Deployment")}

    before = templates({})
    assert templates({}) == before, "the same keys give the same pods"
    # The router's token for the agents is the router's alone.
    after = templates({"router-agent-token": b"another token, 24 bytes or more"})
    assert {n for n in before if before[n] != after[n]} == {"farcall-router"}


@pytest.mark.parametrize("rel", ["", "tls"])
def test_agents_take_their_id_from_the_pod_name(rendered, rel):
    """Replicas of one Deployment listen on one port: the agent's default id
    carries the pod's name (POD_NAME, from the downward API), so that a
    capability bound to one agent opens no other replica."""
    for d in _by_kind(rendered[rel], "Deployment"):
        if d["metadata"]["labels"].get("app.kubernetes.io/component") != "agent":
            continue
        c = d["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in c.get("env", [])}
        assert env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get(
            "fieldPath") == "metadata.name", d["metadata"]["name"]
        assert not _flag(c["args"], "agent_id"), f"{d['metadata']['name']}: one --agent_id for every replica"


def test_tls_overlay_keeps_metrics_and_status_page_fenced(rendered):
    """The router's status page and every /metrics are served on the metrics
    port, which only the monitoring namespace reaches, with TLS as without."""
    plain, tls = rendered[""], rendered["tls"]

    def policies(docs):
        return {p["metadata"]["name"]: p["spec"] for p in _by_kind(docs, "NetworkPolicy")}

    assert policies(tls) == policies(plain)
    for d in _by_kind(tls, "Deployment"):
        c = d["spec"]["template"]["spec"]["containers"][0]
        # The images listen for metrics on the port named "metrics"; nothing
        # moves it elsewhere.
        assert _flag(c["args"], "metrics_listen") is None, d["metadata"]["name"]
        assert d["spec"]["template"]["spec"].get("hostNetwork") is not True


def test_tls_overlay_scrapes_metrics_over_https_with_a_token(rendered):
    """In the TLS overlay every metrics port serves TLS and asks for the
    metrics token, and the ServiceMonitors scrape every one of them over
    https, checking the certificate's name, with that token."""
    docs = rendered["tls"]
    token_secrets = set()
    for d in _by_kind(docs, "Deployment"):
        name = d["metadata"]["name"]
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert "--metrics_tls" in c["args"], f"{name}: --metrics_tls"
        tokens = _flag(c["args"], "metrics_tokens_file")
        assert tokens, f"{name}: --metrics_tokens_file"
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        (mount,) = [m for m in mounts if tokens.startswith(m + "/")]
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        secret = volumes[mounts[mount]]["secret"]
        # The pods hold the tokens file (digests), never Prometheus' token.
        assert [i["key"] for i in secret["items"]] == ["tokens"], name
        token_secrets.add(secret["secretName"])
    assert len(token_secrets) == 1, token_secrets
    monitors = _by_kind(docs, "ServiceMonitor")
    services = [s for s in _by_kind(docs, "Service")
                if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    scraped = {}
    for sm in monitors:
        selector = sm["spec"]["selector"]["matchLabels"]
        for ep in sm["spec"]["endpoints"]:
            assert ep["scheme"] == "https", sm["metadata"]["name"]
            # The Secret whose "tokens" the pods check holds the scraper's "token".
            assert ep["bearerTokenSecret"] == {"name": next(iter(token_secrets)), "key": "token"}
            tls = ep["tlsConfig"]
            assert tls["ca"]["secret"]["key"] == "ca.crt" and tls["serverName"], sm["metadata"]["name"]
            for s in services:
                if selector.items() <= s["metadata"].get("labels", {}).items():
                    scraped.setdefault(s["metadata"]["name"], []).append(tls["serverName"])
    assert sorted(scraped) == sorted(s["metadata"]["name"] for s in services), scraped
    assert all(len(names) == 1 for names in scraped.values()), f"scraped twice: {scraped}"
    # Each Service's pods are checked as the name their certificate holds.
    for svc, (server_name,) in scraped.items():
        component = "router" if svc == "farcall-router" else "agent"
        assert server_name == f"farcall-{component}.{NAMESPACE}.svc", (svc, server_name)


def test_cpu_agent_autoscaler_example(rendered):
    docs = rendered["examples/hpa-agent-cpu"]
    assert not _by_kind(rendered[""], "HorizontalPodAutoscaler"), "an example, not applied by default"
    (hpa,) = _by_kind(docs, "HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    (deploy,) = [d for d in _by_kind(docs, target["kind"]) if d["metadata"]["name"] == target["name"]]
    assert target["name"] == "farcall-agent-cpu"
    assert "replicas" not in deploy["spec"], "the autoscaler owns the count"
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    name = metric["pods"]["metric"]["name"]
    assert name == "farcall_agent_inflight_calls"
    # A metric the agent exports (declared in device_agents/agent_metrics.h).
    assert f'"{name}"' in (lib.ROOT / "device_agents" / "agent_metrics.h").read_text()
    workers = int(_flag(deploy["spec"]["template"]["spec"]["containers"][0]["args"], "workers"))
    assert 0 < float(metric["pods"]["target"]["averageValue"]) <= workers


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
        # The device plugin says which GPUs an agent sees, never the image.
        assert not any(w == "ENV" and "NVIDIA_VISIBLE_DEVICES" in r for w, r in lines), target
        assert "EXPOSE" in words or "EXPOSE" in [w for w, _ in stages[stages[target]["from"]]["lines"]], target
        (entry,) = [json.loads(r) for w, r in lines if w == "ENTRYPOINT"]
        binary = "farcall-router" if target == "router" else "farcall-agent"
        assert entry[0] == f"/usr/local/bin/{binary}", target
        assert any(a.startswith("--listen=0.0.0.0:") for a in entry), target
        assert any(a.startswith("--metrics_listen=0.0.0.0:") for a in entry), target
        if target != "router":
            assert f"--platform={target.split('-', 1)[1]}" in entry, target
        # The image is the root filesystem its Debian stage made: on
        # `scratch`, with nothing to run a RUN step, it holds only what
        # slim_root.sh copied, after the stage checked the libraries.
        assert stages[target]["from"] in stages and \
            stages[stages[target]["from"]]["from"] == "scratch", f"{target}: on scratch"
        assert ("COPY", f"--from={target}-root /rootfs/ /") in lines, f"{target}: its root"
        assert "RUN" not in words, f"{target}: a RUN step needs a shell in the image"
        root_runs = [r for w, r in stages[f"{target}-root"]["lines"] if w == "RUN"]
        assert any("ldd" in r and "slim_root.sh /rootfs" in r for r in root_runs), \
            f"{target}-root: ldd check and slim_root.sh"
    # The labels' version when the build does not pass one (build_images.sh
    # does) is the project's.
    version = re.search(r"^project\(farcall VERSION ([0-9.]+)",
                        (lib.ROOT / "CMakeLists.txt").read_text(), re.M).group(1)
    (base,) = [st for st in stages.values() if st["from"] == "scratch" and
               any(w == "LABEL" and "org.opencontainers.image.version" in r for w, r in st["lines"])]
    assert ("ARG", f"VERSION={version}") in base["lines"], "ARG VERSION in step with CMakeLists.txt"
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


def test_compose_secure_file_signs_and_verifies_on_the_right_sides():
    """compose.secure.yaml: the router authenticates callers and signs
    capabilities with the private key; the agent verifies them with the
    public key only; every key file comes from the mounted keys directory
    that deploy/compose_keys.sh writes."""
    base = yaml.safe_load((lib.DEPLOY / "compose.yaml").read_text())["services"]
    secure = yaml.safe_load((lib.DEPLOY / "compose.secure.yaml").read_text())["services"]
    assert set(secure) == {"router", "agent-cpu"} and set(secure) <= set(base)
    router, agent = secure["router"]["command"], secure["agent-cpu"]["command"]
    assert _flag(router, "agents") == _flag(base["router"]["command"], "agents")
    assert _flag(router, "tokens_file") and _flag(router, "capability_signing_key_file")
    assert not _flag(router, "capability_verify_keys_file")
    assert _flag(agent, "tokens_file") and _flag(agent, "capability_verify_keys_file")
    assert not _flag(agent, "capability_signing_key_file")
    script = (lib.DEPLOY / "compose_keys.sh").read_text()
    for name, command in (("router", router), ("agent", agent)):
        (volume,) = secure["router" if name == "router" else "agent-cpu"]["volumes"]
        src, dest, mode = volume.rsplit(":", 2)
        assert src == "${FARCALL_COMPOSE_KEYS:-./keys}/" + name and mode == "ro", volume
        for a in command:
            if a.endswith(("_file", ".pem")) or "_file=" in a:
                path = a.split("=", 1)[1]
                assert path.startswith(dest + "/"), a
                assert f'"$dir/{name}/{path[len(dest) + 1:]}"' in script, f"compose_keys.sh writes {a}"


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
    # The router finds agents by service name, through DNS (dns:///), so
    # that a name that resolves to nothing is logged and counted as such.
    router_agents = _flag(services["router"]["command"], "agents").split(",")
    for a in router_agents:
        assert a.startswith("dns:///"), a
        host, port = a.removeprefix("dns:///").rsplit(":", 1)
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


def _dashboard_panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def _reads(expr: str, *names: str) -> bool:
    return any(re.search(rf"(?<![a-zA-Z0-9_:]){re.escape(n)}(?![a-zA-Z0-9_])", expr) for n in names)


def test_dashboard_opens_with_a_summary_row():
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    panels = sorted(d["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert panels[0]["type"] == "row" and panels[0]["title"] == "Summary", panels[0]["title"]
    summary = []
    for p in panels[1:]:
        if p["type"] == "row":
            break
        summary.append(p)
    assert summary and all(p["type"] == "stat" for p in summary), [p["title"] for p in summary]
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in summary}

    def one(what, test):
        hits = [title for title, e in exprs.items() if test(e)]
        assert len(hits) == 1, f"the summary row has one panel of {what}: {hits}"

    one("calls/s", lambda e: "rate(farcall_agent_calls_total" in e and "code=~" not in e)
    one("server-side errors",
        lambda e: "farcall_agent_calls_total" in e and "INTERNAL" in e and "DATA_LOSS" in e)
    one("live agents per platform",
        lambda e: "farcall_router_agent_up" in e and re.search(r"sum by \(platform\)", e))
    # The p99 is the figure the SLO alert watches.
    rules = yaml.safe_load(lib.RULES_FILE.read_text())
    (slo,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "FarcallLatencyP99OverSLO"]
    (recorded,) = re.findall(r"[a-z_]+:farcall_[a-z_]+:[a-z0-9_]+", slo["expr"].split(">")[0])
    one("p99", lambda e: recorded in e)


def test_dashboard_names_agents_by_one_label():
    """Every panel names an agent by `host`: the address without its port,
    from the agents' own `instance` (IP:9151) or the routers' `agent`
    (IP:50051) label alike, and $agent lists those hosts."""
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    (var,) = [v for v in d["templating"]["list"] if v["name"] == "agent"]
    assert "instance" in var["query"] and var["regex"] == "/^(.+):[0-9]+$/", var
    for p in _dashboard_panels(d):
        for t in p.get("targets", []):
            where = f"{p['title']!r} {t['refId']}"
            expr, legend = t["expr"], t.get("legendFormat", "")
            for label, value in re.findall(r'(\w+)=~"([^"]*\$agent[^"]*)"', expr):
                assert label in ("instance", "agent") and value == "$agent:[0-9]+", \
                    f"{where}: {label}=~{value!r} (want instance=~ or agent=~\"$agent:[0-9]+\")"
            # Series of single agents: read about agents, and not summed away.
            about_agents = "$agent" in expr or _reads(
                expr, "farcall_router_agent_up", "farcall_router_agent_inflight_calls")
            aggregations = re.findall(r"\b(?:sum|max|min|avg|count)\s*(?:by\s*\(([^)]*)\))?\s*\(", expr)
            per_agent = about_agents and "histogram_quantile" not in expr and all(
                re.search(r"\b(host|instance|agent)\b", by) for by in aggregations)
            assert "{{agent}}" not in legend, f"{where}: legend {legend!r} uses agent, not host"
            if per_agent:
                assert "{{host}}" in legend, f"{where}: legend {legend!r} names agents by host"
                assert "{{instance}}" not in legend, f"{where}: legend {legend!r}"
            if "{{instance}}" in legend:
                assert legend.startswith("router "), f"{where}: only routers go by instance: {legend!r}"
            if "{{host}}" in legend or re.search(r"by \([^)]*\bhost\b", expr):
                assert re.search(r'label_replace\(.*"host", "\$1", "(instance|agent)", "\(\.\+\):\[0-9\]\+"\)',
                                 expr), f"{where}: host made from instance or agent"


def test_dashboard_keeps_refusals_in_view_whatever_the_platform():
    """Refused calls and Resolve answers carry platform and handler "-"
    (server/call_record.h), and calls for an unknown handler carry handler
    "-" on the agents: a chosen platform or handler must not hide them."""
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    seen = 0
    for p in _dashboard_panels(d):
        for t in p.get("targets", []):
            expr = t["expr"]
            if _reads(expr, "farcall_router_calls_total", "farcall_router_resolves_total"):
                seen += 1
                assert 'platform=~"$platform|-"' in expr, f"{p['title']!r}: {expr}"
                assert 'handler=~"$handler"' not in expr, f"{p['title']!r}: {expr}"
            if _reads(expr, "farcall_agent_calls_total") and 'code!="OK"' in expr:
                assert 'handler=~"$handler|-"' in expr, f"{p['title']!r}: {expr}"
    assert seen >= 2


_BYTES_METRIC = re.compile(r"(?<![a-zA-Z0-9_:])(farcall|process)_[a-z0-9_]*_bytes(_total)?\b")
_BYTE_UNITS = {"bytes", "decbytes", "Bps", "binBps"}


def test_dashboard_never_charts_counts_and_bytes_on_one_axis():
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    for p in _dashboard_panels(d):
        if p["type"] not in ("timeseries", "stat"):
            continue
        for o in p.get("fieldConfig", {}).get("overrides", []):
            ids = {prop["id"] for prop in o.get("properties", [])}
            assert not ids & {"unit", "custom.axisPlacement"}, \
                f"{p['title']!r}: one unit and one axis per panel (a second one goes in a panel of its own)"
        unit = p["fieldConfig"]["defaults"].get("unit")
        for t in p["targets"]:
            # A ratio of bytes to bytes is no longer bytes.
            is_bytes = bool(_BYTES_METRIC.search(t["expr"])) and " / " not in t["expr"]
            assert is_bytes == (unit in _BYTE_UNITS), \
                f"{p['title']!r} {t['refId']}: unit {unit} for {t['expr']}"


def test_dashboard_latency_is_the_agents_and_processes_are_charted():
    d = json.loads(lib.DASHBOARD_FILE.read_text())
    exprs = [(p["title"], t["expr"]) for p in _dashboard_panels(d) for t in p.get("targets", [])]
    # Latency where the calls are: the three stages on the agents, added up.
    assert any(all(f"farcall_agent_{s}_seconds_bucket" in e for s in ("transfer", "queue", "execute"))
               for _, e in exprs), "a panel of the agents' whole time per call"
    # Process metrics (the binaries' own), for farcall's processes only.
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_start_time_seconds"):
        uses = [(title, e) for title, e in exprs if _reads(e, name)]
        assert uses, f"no panel charts {name}"
        for title, e in uses:
            assert "group_left" in e and "farcall_build_info" in e, f"{title!r}: {e}"
    # Restarts on Kubernetes, from kube-state-metrics.
    assert any(_reads(e, "kube_pod_container_status_restarts_total") for _, e in exprs)


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


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_every_server_logs_json_for_shippers(rendered, rel):
    """Agents and routers write --log_format=json in the cluster (one object
    per line, UTC times, the call's id and principal)."""
    servers = 0
    for d in rendered[rel]:
        for c in _containers(d):
            if c["name"] not in ("router", "agent"):
                continue
            servers += 1
            assert "--log_format=json" in c.get("args", []), \
                f"deploy/k8s/{rel}: {d['metadata']['name']} logs text"
    assert servers > 0 or not any(_containers(d) for d in rendered[rel])
