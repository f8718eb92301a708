"""Checks the Kubernetes manifests in deploy/k8s without a cluster: every file parses as YAML, and
the references between objects hold (labels and selectors, named ports, probes, the ConfigMap,
the autoscalers' targets, the StatefulSet's Service, claim and --store_dir), and the shutdown
timings fit together.

    python3 tests/k8s_manifests_test.py [REPO_ROOT]

Needs Debian's python3-yaml (scripts/install-deps); exits 77 (ctest: skipped) without it. Exits 1
naming every problem found.
"""
import pathlib
import posixpath
import re
import sys

try:
    import yaml
except ImportError:
    print("k8s_manifests_test: SKIPPED: no yaml module (scripts/install-deps installs python3-yaml)")
    sys.exit(77)

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
K8S = ROOT / "deploy" / "k8s"
# The kustomizations checked: the stateless CPU variant, the CUDA one (with its base), and the
# StatefulSet with its durable store.
VARIANTS = (K8S, K8S / "cuda", K8S / "stateful")
WORKLOADS = ("Deployment", "StatefulSet")
# The slowest a volume is assumed to write the last snapshot at shutdown: terminationGracePeriod
# must leave --store_memory_bytes / this many seconds after the preStop sleep and the drain.
SNAPSHOT_BYTES_PER_S = 50_000_000
# The values server/store/durable_store.cc parses.
STORE_SYNC = {"always", "interval", "none"}
STORE_RECOVER = {"strict", "discard"}
problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def load(path):
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in docs:
        if path.name == "kustomization.yaml":
            continue
        for key in ("apiVersion", "kind", "metadata"):
            if key not in doc:
                problem(path, f"a document has no {key}")
        if "name" not in doc.get("metadata", {}):
            problem(path, f"a {doc.get('kind')} has no metadata.name")
    return docs


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def server_flags():
    """Names of the flags tensorops-server defines (server/main.cc)."""
    return set(re.findall(r"ABSL_FLAG\([^,]+,\s*(\w+)", (ROOT / "server/main.cc").read_text()))


def flag_values(lines):
    values = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.lstrip("-").partition("=")
            values[name] = value
    return values


def byte_count(text):
    """A byte count as the server's flags take it (512Mi, 2G, 1073741824), or as a Kubernetes
    quantity (10Gi); None when it is neither."""
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(text).strip())
    if not m:
        return None
    suffix = m.group(2) or ""
    base = 1024 if suffix.endswith("i") else 1000
    return int(m.group(1)) * base ** ("KMGT".index(suffix[0]) + 1 if suffix else 0)


def check_workload(path, workload, config_maps):
    """Checks a Deployment's or StatefulSet's pod template; returns its pod labels and, for each
    container whose flags could be read, (where, container, flags, grace period left after the
    preStop sleep and the drain)."""
    kind, name = workload["kind"], workload["metadata"]["name"]
    spec = workload["spec"]
    template = spec["template"]
    labels = template["metadata"]["labels"]
    if not matches(spec["selector"]["matchLabels"], labels):
        problem(path, f"{kind} {name}: selector does not match its pod labels")
    pod = template["spec"]
    security = pod.get("securityContext", {})
    if security.get("runAsNonRoot") is not True or not security.get("runAsUser"):
        problem(path, f"{kind} {name}: the pod should run as a non-root user (runAsNonRoot, runAsUser)")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    checked = []
    for container in pod["containers"]:
        where = f"{path}: {kind} {name}, container {container['name']}"
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        if None in ports:
            problem(where, "a port has no name")
        if ports.get("grpc") != 50051 or ports.get("metrics") != 9464:
            problem(where, "expected ports grpc=50051 and metrics=9464")
        for probe_name in ("readinessProbe", "livenessProbe"):
            probe = container.get(probe_name, {}).get("grpc")
            if probe is None:
                problem(where, f"{probe_name} is not a grpc probe")
            elif probe.get("port") not in ports.values():
                problem(where, f"{probe_name} probes port {probe.get('port')}, not a port of it")
        resources = container.get("resources", {})
        if not resources.get("requests") or not resources.get("limits"):
            problem(where, "resources need requests and limits")
        gpus = resources.get("limits", {}).get("nvidia.com/gpu")
        if (labels.get("tensorops/variant") == "cuda") != bool(gpus):
            problem(where, "nvidia.com/gpu limits belong to the cuda variant, and only there")
        if container.get("securityContext", {}).get("readOnlyRootFilesystem") is not True:
            problem(where, "the root file system should be read-only (state goes to volumes)")
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes and mount["name"] not in claims:
                problem(where, f"volumeMount {mount['name']} has no volume or volumeClaimTemplate")
        # Shutdown: preStop sleep + the server's drain must end within the grace period.
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {})
        sleep = pre_stop.get("command", [])
        if sleep[:1] != ["sleep"]:
            problem(where, "preStop should be a sleep, for endpoints to drop the pod first")
            continue
        flags_text = None
        args = container.get("args", [])
        for mount in container.get("volumeMounts", []):
            config_map = volumes.get(mount["name"], {}).get("configMap", {}).get("name")
            if config_map is None:
                continue
            if config_map not in config_maps:
                problem(where, f"volume {mount['name']} names ConfigMap {config_map}, "
                        "which is not in the manifests")
                continue
            for key, text in config_maps[config_map].items():
                if f"--flagfile={mount['mountPath']}/{key}" in args:
                    flags_text = text
        if flags_text is None:
            problem(where, "args have no --flagfile from a mounted ConfigMap")
            continue
        # The flag file's flags, then those of args (which come after --flagfile and win).
        flags = flag_values(flags_text.splitlines())
        flags.update(flag_values(a for a in args if not a.startswith("--flagfile=")))
        flags.pop("flagfile", None)
        unknown = set(flags) - server_flags()
        if unknown:
            problem(where, f"the ConfigMap or args set flags the server lacks: {sorted(unknown)}")
        for flag, port in (("port", "grpc"), ("metrics_port", "metrics")):
            if int(flags.get(flag, -1)) != ports.get(port):
                problem(where, f"--{flag} is not the {port} container port")
        grace = int(flags.get("shutdown_grace_s", 5))
        period = pod.get("terminationGracePeriodSeconds", 30)
        if int(sleep[1]) + grace >= period:
            problem(where, f"preStop sleep {sleep[1]} s + --shutdown_grace_s={grace} does not "
                    f"end before terminationGracePeriodSeconds={period}")
        checked.append((where, container, flags, period - int(sleep[1]) - grace))
    return labels, checked


def check_stateful(path, statefulset, checked, services):
    """The StatefulSet's own checks: its headless Service, its claim mounted where --store_dir
    points, a writable volume for the non-root user, a startup probe that lets recovery finish, and
    time for the last snapshot at shutdown."""
    name = statefulset["metadata"]["name"]
    spec = statefulset["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    service = services.get(spec.get("serviceName"))
    if service is None:
        problem(path, f"StatefulSet {name}: serviceName {spec.get('serviceName')} is not a Service "
                "here")
    elif service["spec"].get("clusterIP") != "None" or not matches(service["spec"]["selector"],
                                                                    labels):
        problem(path, f"StatefulSet {name}: Service {spec['serviceName']} is not headless or does "
                "not select its pods")
    claims = {}
    for claim in spec.get("volumeClaimTemplates", []):
        claim_name = claim["metadata"]["name"]
        claims[claim_name] = claim
        claim_spec = claim.get("spec", {})
        if not set(claim_spec.get("accessModes", [])) & {"ReadWriteOnce", "ReadWriteOncePod"}:
            problem(path, f"StatefulSet {name}: claim {claim_name} is not ReadWriteOnce(Pod): one "
                    "server per store")
        if byte_count(claim_spec.get("resources", {}).get("requests", {}).get("storage", "")) is None:
            problem(path, f"StatefulSet {name}: claim {claim_name} requests no storage")
        if any(v["name"] == claim_name for v in pod.get("volumes", [])):
            problem(path, f"StatefulSet {name}: claim {claim_name} is also a pod volume")
    if not claims:
        problem(path, f"StatefulSet {name}: no volumeClaimTemplates (no PersistentVolumeClaim)")
    if not pod.get("securityContext", {}).get("fsGroup"):
        problem(path, f"StatefulSet {name}: no fsGroup: the non-root server cannot write the volume")
    for where, container, flags, left in checked:
        store_dir = flags.get("store_dir", "")
        if not store_dir:
            problem(where, "no --store_dir: the StatefulSet's store would be in memory only")
            continue
        store_dir = posixpath.normpath(store_dir)
        on_claim = [m for m in container.get("volumeMounts", []) if m["name"] in claims and (
            store_dir == posixpath.normpath(m["mountPath"])
            or store_dir.startswith(posixpath.normpath(m["mountPath"]) + "/"))]
        if not on_claim:
            problem(where, f"--store_dir={store_dir} is not on a mounted volumeClaimTemplate")
        elif on_claim[0].get("readOnly"):
            problem(where, f"--store_dir={store_dir} is on a read-only mount")
        else:
            store_bytes = byte_count(flags.get("store_memory_bytes", str(1 << 30)))
            storage = byte_count(claims[on_claim[0]["name"]]["spec"]["resources"]["requests"]
                                 ["storage"])
            if store_bytes is None:
                problem(where, "--store_memory_bytes is not a byte count")
            elif storage is not None and storage < 2 * store_bytes:
                problem(where, f"claim {on_claim[0]['name']} holds less than two snapshots of "
                        f"--store_memory_bytes={flags['store_memory_bytes']}")
            if store_bytes is not None and left < store_bytes / SNAPSHOT_BYTES_PER_S:
                problem(where, f"terminationGracePeriodSeconds leaves {left} s after the preStop "
                        f"sleep and --shutdown_grace_s for the last snapshot; "
                        f"--store_memory_bytes={flags['store_memory_bytes']} at "
                        f"{SNAPSHOT_BYTES_PER_S // 1_000_000} MB/s needs "
                        f"{store_bytes / SNAPSHOT_BYTES_PER_S:.0f} s")
        for flag, allowed in (("store_sync", STORE_SYNC), ("store_recover", STORE_RECOVER)):
            if flag in flags and flags[flag] not in allowed:
                problem(where, f"--{flag}={flags[flag]} is not one of {sorted(allowed)}")
        ports = [p["containerPort"] for p in container.get("ports", [])]
        probe = container.get("startupProbe", {}).get("grpc")
        if probe is None or probe.get("port") not in ports:
            problem(where, "startupProbe should be a grpc probe of its port: the server recovers "
                    "its store before it listens, and liveness must not kill it meanwhile")


def check_variant(directory, objects, config_maps):
    """Checks one kustomization (deploy/k8s, deploy/k8s/cuda with its base, deploy/k8s/stateful);
    returns its workloads as (kind, name, pod labels)."""
    by_kind = {}
    for path, doc in objects:
        by_kind.setdefault(doc["kind"], []).append((path, doc))
    stateful = bool(by_kind.get("StatefulSet"))
    if not by_kind.get("Deployment") and not stateful:
        problem(directory, "no Deployment or StatefulSet")
    services = {doc["metadata"]["name"]: doc for _, doc in by_kind.get("Service", [])}
    workloads = []
    for kind in WORKLOADS:
        for path, workload in by_kind.get(kind, []):
            labels, checked = check_workload(path, workload, config_maps)
            workloads.append((kind, workload["metadata"]["name"], labels))
            if kind == "StatefulSet":
                check_stateful(path, workload, checked, services)
            elif workload["spec"]["template"]["spec"].get("volumeClaimTemplates"):
                problem(path, "a Deployment's pod template cannot have volumeClaimTemplates")
    pod_labels = [labels for _, _, labels in workloads]
    for path, service in by_kind.get("Service", []):
        name = service["metadata"]["name"]
        selected = [labels for labels in pod_labels if matches(service["spec"]["selector"], labels)]
        if not selected:
            problem(path, f"Service {name} selects no pod")
        for port in service["spec"]["ports"]:
            if "name" not in port:
                problem(path, f"Service {name}: a port has no name")
            if port.get("targetPort") not in ("grpc", "metrics"):
                problem(path, f"Service {name}: targetPort {port.get('targetPort')} is not a "
                        "named container port")
    if not stateful:
        if services.get("tensorops-headless", {}).get("spec", {}).get("clusterIP") != "None":
            problem(directory, "no headless Service tensorops-headless")
        if services.get("tensorops", {}).get("spec", {}).get("type") != "ClusterIP":
            problem(directory, "no ClusterIP Service tensorops")
    names = {name for kind, name, _ in workloads if kind == "Deployment"}
    for path, hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]
        if target["kind"] != "Deployment" or target["name"] not in names:
            problem(path, f"HorizontalPodAutoscaler targets {target['name']}, not a Deployment here")
    for path, pdb in by_kind.get("PodDisruptionBudget", []):
        if not any(matches(pdb["spec"]["selector"]["matchLabels"], l) for l in pod_labels):
            problem(path, f"PodDisruptionBudget {pdb['metadata']['name']} selects no pod")
    # A StatefulSet's replicas each hold their own store: no autoscaler (and its single replica
    # would make a disruption budget block node drains).
    for kind in ("ConfigMap",) if stateful else ("HorizontalPodAutoscaler", "PodDisruptionBudget",
                                                 "ConfigMap"):
        if kind not in by_kind:
            problem(directory, f"no {kind}")
    return workloads


def resources(directory):
    """The objects a kustomization lists, its bases' included, as (path, document) pairs."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects = []
    for entry in kustomization["resources"]:
        path = (directory / entry).resolve()
        if path.is_dir():
            objects += resources(path)
        else:
            objects += [(path.relative_to(ROOT), doc) for doc in load(path)]
    return objects


def main():
    for path in sorted(K8S.rglob("*.yaml")):
        try:
            load(path)
        except yaml.YAMLError as e:
            problem(path, f"not YAML: {e}")
    if problems:
        return
    workloads, services, flag_files = {}, {}, {}
    for directory in VARIANTS:
        objects = resources(directory)
        config_maps = {doc["metadata"]["name"]: doc["data"] for _, doc in objects
                       if doc["kind"] == "ConfigMap"}
        for kind, name, labels in check_variant(directory.relative_to(ROOT), objects, config_maps):
            workloads[(kind, name)] = labels
        for path, doc in objects:
            if doc["kind"] == "Service":
                services[doc["metadata"]["name"]] = (path, doc)
            if doc["kind"] == "ConfigMap":
                for key, text in doc["data"].items():
                    flag_files[(path, key)] = flag_values(text.splitlines())
        listed = {path for path, _ in objects}
        for path in directory.glob("*.yaml"):
            if path.name != "kustomization.yaml" and path.relative_to(ROOT) not in listed:
                problem(path.relative_to(ROOT), "not listed in its kustomization.yaml")
    # Across the variants, which may share a namespace: a Service that reaches a StatefulSet's pods
    # reaches no other workload's (a call spread over replicas with different stores would find a
    # tensor on one and not on the next).
    for path, service in services.values():
        selected = [key for key, labels in workloads.items()
                    if matches(service["spec"]["selector"], labels)]
        if len(selected) > 1 and any(kind == "StatefulSet" for kind, _ in selected):
            problem(path, f"Service {service['metadata']['name']} selects the pods of "
                    f"{', '.join(f'{k} {n}' for k, n in selected)}: a StatefulSet's replicas "
                    "hold their own tensors and must not share a Service with other pods")
    # The variants' flag files agree on every flag the base's sets (deploy/k8s/configmap.yaml):
    # the stateful one only adds the store's.
    base = {key: flags for key, flags in flag_files.items()
            if key[0] == (K8S / "configmap.yaml").relative_to(ROOT)}
    for (path, key), flags in flag_files.items():
        for (_, base_key), base_flags in base.items():
            if key != base_key:
                continue
            differ = sorted(f for f, v in base_flags.items() if flags.get(f) != v)
            if differ:
                problem(path, f"{key} differs from deploy/k8s/configmap.yaml's in {differ}")


main()
if problems:
    print("\n".join(dict.fromkeys(problems)))
    sys.exit(1)
print(f"k8s manifests: {len(list(K8S.rglob('*.yaml')))} files parse and agree")
