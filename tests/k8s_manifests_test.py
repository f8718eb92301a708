"""Checks the Kubernetes manifests in deploy/k8s without a cluster: every file parses as YAML, and
the references between objects hold (labels and selectors, named ports, probes, the ConfigMap,
the autoscalers' targets), and the shutdown timings fit together.

    python3 tests/k8s_manifests_test.py [REPO_ROOT]

Needs Debian's python3-yaml (scripts/install-deps); exits 77 (ctest: skipped) without it. Exits 1
naming every problem found.
"""
import pathlib
import re
import sys

try:
    import yaml
except ImportError:
    print("k8s_manifests_test: SKIPPED: no yaml module (scripts/install-deps installs python3-yaml)")
    sys.exit(77)

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
K8S = ROOT / "deploy" / "k8s"
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


def flag_values(text):
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.lstrip("-").partition("=")
            values[name] = value
    return values


def check_variant(directory, objects, config_maps):
    """Checks one kustomization (deploy/k8s, or deploy/k8s/cuda with its base)."""
    by_kind = {}
    for path, doc in objects:
        by_kind.setdefault(doc["kind"], []).append((path, doc))
    deployments = by_kind.get("Deployment", [])
    if not deployments:
        problem(directory, "no Deployment")
    pod_labels = []
    for path, deployment in deployments:
        name = deployment["metadata"]["name"]
        spec = deployment["spec"]
        template = spec["template"]
        labels = template["metadata"]["labels"]
        pod_labels.append(labels)
        if not matches(spec["selector"]["matchLabels"], labels):
            problem(path, f"Deployment {name}: selector does not match its pod labels")
        pod = template["spec"]
        containers = pod["containers"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in containers:
            where = f"{path}: Deployment {name}, container {container['name']}"
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
            # Shutdown: preStop sleep + the server's drain must end within the grace period.
            pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {})
            sleep = pre_stop.get("command", [])
            if sleep[:1] != ["sleep"]:
                problem(where, "preStop should be a sleep, for endpoints to drop the pod first")
                continue
            flags_text = None
            for mount in container.get("volumeMounts", []):
                config_map = volumes.get(mount["name"], {}).get("configMap", {}).get("name")
                if mount["name"] not in volumes:
                    problem(where, f"volumeMount {mount['name']} has no volume")
                elif config_map is not None:
                    if config_map not in config_maps:
                        problem(where, f"volume {mount['name']} names ConfigMap {config_map}, "
                                "which is not in the manifests")
                        continue
                    for key, text in config_maps[config_map].items():
                        if f"--flagfile={mount['mountPath']}/{key}" in container.get("args", []):
                            flags_text = text
            if flags_text is None:
                problem(where, "args have no --flagfile from a mounted ConfigMap")
                continue
            flags = flag_values(flags_text)
            unknown = set(flags) - server_flags()
            if unknown:
                problem(where, f"the ConfigMap sets flags the server lacks: {sorted(unknown)}")
            for flag, port in (("port", "grpc"), ("metrics_port", "metrics")):
                if int(flags.get(flag, -1)) != ports.get(port):
                    problem(where, f"--{flag} is not the {port} container port")
            grace = int(flags.get("shutdown_grace_s", 5))
            period = pod.get("terminationGracePeriodSeconds", 30)
            if int(sleep[1]) + grace >= period:
                problem(where, f"preStop sleep {sleep[1]} s + --shutdown_grace_s={grace} does not "
                        f"end before terminationGracePeriodSeconds={period}")
    names = {doc["metadata"]["name"] for _, doc in deployments}
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
    services = {doc["metadata"]["name"]: doc for _, doc in by_kind.get("Service", [])}
    if services.get("tensorops-headless", {}).get("spec", {}).get("clusterIP") != "None":
        problem(directory, "no headless Service tensorops-headless")
    if services.get("tensorops", {}).get("spec", {}).get("type") != "ClusterIP":
        problem(directory, "no ClusterIP Service tensorops")
    for path, hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]
        if target["kind"] != "Deployment" or target["name"] not in names:
            problem(path, f"HorizontalPodAutoscaler targets {target['name']}, not a Deployment here")
    for path, pdb in by_kind.get("PodDisruptionBudget", []):
        if not any(matches(pdb["spec"]["selector"]["matchLabels"], l) for l in pod_labels):
            problem(path, f"PodDisruptionBudget {pdb['metadata']['name']} selects no pod")
    for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap"):
        if kind not in by_kind:
            problem(directory, f"no {kind}")


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
    for directory in (K8S, K8S / "cuda"):
        objects = resources(directory)
        config_maps = {doc["metadata"]["name"]: doc["data"] for _, doc in objects
                       if doc["kind"] == "ConfigMap"}
        check_variant(directory.relative_to(ROOT), objects, config_maps)
        listed = {path for path, _ in objects}
        for path in directory.glob("*.yaml"):
            if path.name != "kustomization.yaml" and path.relative_to(ROOT) not in listed:
                problem(path.relative_to(ROOT), "not listed in its kustomization.yaml")


main()
if problems:
    print("\n".join(dict.fromkeys(problems)))
    sys.exit(1)
print(f"k8s manifests: {len(list(K8S.rglob('*.yaml')))} files parse and agree")
