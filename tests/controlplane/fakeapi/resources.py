"""The resource table: ResourceType (one served resource and its discovery entry), the built-in
types, the Registry (built-ins plus the groups CRDs add at run time), and the minimal
OpenAPI v2 document."""

import collections

from .errors import cause, invalid_value, required
from .util import version_key
from .validation import name_errors


VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class ResourceType:
    def __init__(self, group, version, plural, kind, namespaced=True, short_names=(), status=False,
                 categories=(), subresources=(), custom=False, singular=None, list_kind=None,
                 printer_columns=None, crd=None):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced, self.short_names, self.has_status = namespaced, list(short_names), status
        self.categories, self.custom, self.crd = list(categories), custom, crd
        self.subresources = set(subresources) | ({"status"} if status else set())
        self.singular = singular or kind.lower()
        self.list_kind = list_kind or kind + "List"
        self.printer_columns = printer_columns
        self.storage_key = group + "/" + plural
        self.api_version = group + "/" + version if group else version
        self.qualified = plural + "." + group if group else plural
        self.validate = None   # obj -> [causes], for built-in types validated by their upstream rules

    def discovery(self):
        out = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                "kind": self.kind, "verbs": VERBS}]
        if self.short_names:
            out[0]["shortNames"] = self.short_names
        if self.categories:
            out[0]["categories"] = self.categories
        for sub in sorted(self.subresources):
            verbs = {"status": ["get", "patch", "update"], "log": ["get"], "binding": ["create"],
                     "eviction": ["create"], "finalize": ["update"]}[sub]
            kind = {"binding": "Binding", "eviction": "Eviction"}.get(sub, self.kind)
            e = {"name": self.plural + "/" + sub, "singularName": "", "namespaced": self.namespaced,
                 "kind": kind, "verbs": verbs}
            if sub == "eviction":
                e.update(group="policy", version="v1")
            out.append(e)
        return out


BUILTINS = [
    # group, version, plural, kind, namespaced, shortNames, status, categories, subresources, custom
    ("", "v1", "pods", "Pod", True, ["po"], True, ["all"], ["log", "binding", "eviction"], False),
    ("", "v1", "services", "Service", True, ["svc"], True, ["all"], [], False),
    ("", "v1", "configmaps", "ConfigMap", True, ["cm"], False, [], [], False),
    ("", "v1", "secrets", "Secret", True, [], False, [], [], False),
    ("", "v1", "events", "Event", True, ["ev"], False, [], [], False),
    ("", "v1", "namespaces", "Namespace", False, ["ns"], True, [], ["finalize"], False),
    ("", "v1", "nodes", "Node", False, ["no"], True, [], [], False),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"], False, [], [], False),
    ("", "v1", "endpoints", "Endpoints", True, ["ep"], False, [], [], False),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ["pvc"], True, [], [], False),
    ("coordination.k8s.io", "v1", "leases", "Lease", True, [], False, [], [], False),
    ("events.k8s.io", "v1", "events", "Event", True, [], False, [], [], False),
    ("apps", "v1", "deployments", "Deployment", True, ["deploy"], True, ["all"], [], False),
    ("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"], True, ["all"], [], False),
    ("apps", "v1", "replicasets", "ReplicaSet", True, ["rs"], True, ["all"], [], False),
    ("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], True, ["all"], [], False),
    ("batch", "v1", "jobs", "Job", True, [], True, ["all"], [], False),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"], True, [], [], False),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ["pc"], False, [], [], False),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, [], False, [], [], False),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, [], False, [], [], False),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, [], False, [], [], False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, [], False, [], [],
     False),
    ("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True, ["pg", "podgroup-v1beta1"], True, [], [],
     True),
    ("scheduling.volcano.sh", "v1beta1", "queues", "Queue", False, ["q", "queue-v1beta1"], True, [], [], True),
    ("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, ["pgs"], True, [], [], True),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
     ["crd", "crds"], True, ["api-extensions"], [], False),
]


# Kubernetes' own gang scheduling (scheduling.k8s.io Workload API), alpha and off by default, as on a
# real cluster without the GenericWorkload gate and runtime-config: served only when asked for
# (fake_apiserver.py --workload-api VERSION). The shapes and required fields are k8s.io/api's
# v0.35 (v1alpha1) and v0.36 (v1alpha2) types; objects are stored as written, without conversion.


def _policy_causes(policy, field):
    if not isinstance(policy, dict):
        return [required(field)]
    if sum(k in policy for k in ("basic", "gang")) != 1:
        return [invalid_value(field, policy, "exactly one of basic or gang must be set")]
    if "gang" not in policy:
        return []
    count = (policy["gang"] or {}).get("minCount") if isinstance(policy["gang"], dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return [invalid_value(field + ".gang.minCount", count, "must be greater than or equal to 1")]
    return []


def _name_causes(value, field):
    if not value:
        return [required(field)]
    error = name_errors(value, "label") if isinstance(value, str) else "must be a string"
    return [invalid_value(field, value, error)] if error else []


def _workload_causes(groups_key, policy_key):
    def validate(obj):
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        causes = []
        ref = spec.get("controllerRef")
        if ref is not None:
            for key in ("kind", "name"):
                if not (ref or {}).get(key):
                    causes.append(required("spec.controllerRef." + key))
        groups = spec.get(groups_key)
        if not isinstance(groups, list) or not groups:
            return causes + [required("spec." + groups_key)]
        if len(groups) > 8:
            causes.append(cause("FieldValueTooMany", "spec." + groups_key, "Too many: %d: must have at most 8 items"
                                % len(groups)))
        seen = set()
        for i, group in enumerate(groups):
            field = "spec.%s[%d]" % (groups_key, i)
            group = group if isinstance(group, dict) else {}
            causes += _name_causes(group.get("name"), field + ".name")
            if group.get("name") in seen:
                causes.append(cause("FieldValueDuplicate", field + ".name", 'Duplicate value: "%s"' % group["name"]))
            seen.add(group.get("name"))
            causes += _policy_causes(group.get(policy_key), field + "." + policy_key)
        return causes
    return validate


def _podgroup_causes(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes = _policy_causes(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    ref = spec.get("podGroupTemplateRef")
    if ref is not None:
        workload = (ref or {}).get("workload")
        if not isinstance(workload, dict):
            causes.append(required("spec.podGroupTemplateRef.workload"))
        else:
            for key in ("workloadName", "podGroupTemplateName"):
                causes += _name_causes(workload.get(key), "spec.podGroupTemplateRef.workload." + key)
    return causes


# version -> [(plural, kind, has status, validator)]
WORKLOAD_API = {
    "v1alpha1": [("workloads", "Workload", False, _workload_causes("podGroups", "policy"))],
    "v1alpha2": [("workloads", "Workload", False, _workload_causes("podGroupTemplates", "schedulingPolicy")),
                 ("podgroups", "PodGroup", True, _podgroup_causes)],
}


class Registry:
    """Which (group, version, plural) are served; CRDs add and remove entries."""

    def __init__(self):
        self.types = collections.OrderedDict()   # (group, version, plural) -> ResourceType
        self.builtin = {}
        self.group_order = []
        for g, v, p, k, ns, sn, st, cat, sub, custom in BUILTINS:
            rt = ResourceType(g, v, p, k, ns, sn, st, cat, sub, custom)
            self._add(rt)
            self.builtin[(g, v, p)] = rt

    def serve_workload_api(self, versions):
        """Serves the scheduling.k8s.io Workload API in `versions` (keys of WORKLOAD_API) as built-ins."""
        for version in versions:
            for plural, kind, status, validate in WORKLOAD_API[version]:
                rt = ResourceType("scheduling.k8s.io", version, plural, kind, True, (), status)
                rt.validate = validate
                self._add(rt)
                self.builtin[(rt.group, version, plural)] = rt

    def _add(self, rt):
        self.types[(rt.group, rt.version, rt.plural)] = rt
        if rt.group and rt.group not in self.group_order:
            self.group_order.append(rt.group)

    def get(self, group, version, plural):
        return self.types.get((group, version, plural))

    def versions(self, group):
        vs = sorted({v for (g, v, _p) in self.types if g == group}, key=version_key, reverse=True)
        return vs

    def gv_resources(self, group, version):
        return [rt for (g, v, _p), rt in self.types.items() if g == group and v == version]

    def storage(self, key):
        """The preferred-version ResourceType for a storage key."""
        best = None
        for rt in self.types.values():
            if rt.storage_key == key and (best is None or version_key(rt.version) > version_key(best.version)):
                best = rt
        return best

    def resolvable(self, api_version, kind):
        g, _, v = (api_version or "").rpartition("/")
        return any(rt.group == g and rt.version == v and rt.kind == kind for rt in self.types.values())

    def groups(self):
        return [g for g in self.group_order if self.versions(g)]

    def register_crd(self, crd):
        spec = crd.get("spec", {})
        group, names = spec["group"], spec["names"]
        self.unregister_crd(crd["metadata"]["name"], restore=False)
        for ver in spec.get("versions", []):
            if not ver.get("served", True):
                continue
            cols = ver.get("additionalPrinterColumns")
            rt = ResourceType(group, ver["name"], names["plural"], names["kind"],
                              spec.get("scope", "Namespaced") == "Namespaced", names.get("shortNames", ()),
                              "status" in (ver.get("subresources") or {}),
                              names.get("categories", ()), (), True, names.get("singular"),
                              names.get("listKind"), cols, crd["metadata"]["name"])
            self._add(rt)

    def unregister_crd(self, crd_name, restore=True):
        gone = [k for k, rt in self.types.items() if rt.crd == crd_name]
        for k in gone:
            del self.types[k]
            if restore and k in self.builtin:
                self.types[k] = self.builtin[k]
        return gone


def _pb_field(num, payload):
    def varint(n):
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def openapi_v2_protobuf(version):
    info = _pb_field(1, b"Kubernetes") + _pb_field(2, version.encode())
    return _pb_field(1, b"2.0") + _pb_field(2, info) + _pb_field(8, b"") + _pb_field(9, b"")
