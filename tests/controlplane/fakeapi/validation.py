"""Validation and defaulting by the API's rules: object names, labels and metadata; pods
(defaults, QoS class, what an update may change); CustomResourceDefinitions and their
status."""

import copy
import re

from .errors import cause, invalid_value, required
from .util import dumps, rfc3339


_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
RE_DNS1123_LABEL = re.compile(_LABEL + r"\Z")
RE_DNS1123_SUBDOMAIN = re.compile(_LABEL + r"(\." + _LABEL + r")*\Z")
RE_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
RE_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
RE_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")

MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
MSG_1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def name_errors(value, kind="subdomain"):
    if kind == "label":
        if len(value) > 63:
            return "must be no more than 63 characters"
        return None if RE_DNS1123_LABEL.match(value) else MSG_LABEL
    if kind == "1035":
        if len(value) > 63:
            return "must be no more than 63 characters"
        return None if RE_DNS1035_LABEL.match(value) else MSG_1035
    if len(value) > 253:
        return "must be no more than 253 characters"
    return None if RE_DNS1123_SUBDOMAIN.match(value) else MSG_SUBDOMAIN


def qualified_name_error(key):
    if not isinstance(key, str):
        return "must be a string"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a qualified name must consist of alphanumeric characters, '-', '_' or '.'"
    if prefix and (len(prefix) > 253 or not RE_DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix part " + MSG_SUBDOMAIN
    if not name or len(name) > 63 or not RE_QUALIFIED_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def label_value_error(v):
    if not isinstance(v, str):
        return "must be a string"
    if len(v) > 63:
        return "must be no more than 63 characters"
    if not RE_LABEL_VALUE.match(v):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                "'my_value',  or '12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return None


def validate_metadata(meta, name_kind):
    causes = []
    name = meta.get("name")
    if name:
        if not isinstance(name, str):
            causes.append(invalid_value("metadata.name", name, "must be a string"))
        else:
            err = name_errors(name, name_kind)
            if err:
                causes.append(invalid_value("metadata.name", name, err))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(invalid_value("metadata.labels", labels, "must be an object"))
    else:
        for k, v in labels.items():
            err = qualified_name_error(k)
            if err:
                causes.append(invalid_value("metadata.labels", k, err))
            err = label_value_error(v)
            if err:
                causes.append(invalid_value("metadata.labels", v, err))
    ann = meta.get("annotations") or {}
    if not isinstance(ann, dict):
        causes.append(invalid_value("metadata.annotations", ann, "must be an object"))
    else:
        for k, v in ann.items():
            err = qualified_name_error(k)
            if err:
                causes.append(invalid_value("metadata.annotations", k, err))
            if not isinstance(v, str):
                causes.append(invalid_value("metadata.annotations", v, "must be a string"))
        if len(dumps(ann)) > 256 * 1024:
            causes.append(cause("FieldValueTooLong", "metadata.annotations",
                                "Too long: must have at most 262144 bytes"))
    return causes


def _image_pull_policy(image):
    tag = image.rsplit("/", 1)[-1]
    if "@" in tag:
        return "IfNotPresent"
    if ":" not in tag or tag.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def default_pod(pod):
    spec = pod.setdefault("spec", {})
    for k, v in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                 ("schedulerName", "default-scheduler"), ("terminationGracePeriodSeconds", 30),
                 ("securityContext", {}), ("enableServiceLinks", True), ("priority", 0),
                 ("preemptionPolicy", "PreemptLowerPriority")):
        spec.setdefault(k, v)
    if "serviceAccountName" not in spec and "serviceAccount" in spec:
        spec["serviceAccountName"] = spec["serviceAccount"]
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    for lst in ("initContainers", "containers"):
        for c in spec.get(lst) or []:
            if not isinstance(c, dict):
                continue
            if isinstance(c.get("image"), str):
                c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for p in c.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")


def qos_class(pod):
    cs = (pod.get("spec", {}).get("containers") or []) + (pod.get("spec", {}).get("initContainers") or [])
    any_res, guaranteed = False, True
    for c in cs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_res = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_res:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def volume_mount_causes(container_field, mounts):
    """A subPath must stay inside its volume, as the real server's validateLocalDescendingPath."""
    causes = []
    for j, m in enumerate(mounts if isinstance(mounts, list) else []):
        for key in ("subPath", "subPathExpr"):
            path = m.get(key) if isinstance(m, dict) else None
            if not isinstance(path, str) or not path:
                continue
            f = "%s.volumeMounts[%d].%s" % (container_field, j, key)
            if path.startswith("/"):
                causes.append(invalid_value(f, path, "must be a relative path"))
            if ".." in path.split("/"):
                causes.append(invalid_value(f, path, "must not contain '..'"))
    return causes


def validate_pod(pod):
    causes = []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        causes.append(required("spec.containers"))
    for lst in ("initContainers", "containers"):
        seen = set()
        for i, c in enumerate(spec.get(lst) or []):
            f = "spec.%s[%d]" % (lst, i)
            if not isinstance(c, dict):
                causes.append(invalid_value(f, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                causes.append(required(f + ".name"))
            elif not isinstance(name, str) or name_errors(name, "label"):
                causes.append(invalid_value(f + ".name", name, MSG_LABEL))
            elif name in seen:
                causes.append(cause("FieldValueDuplicate", f + ".name", 'Duplicate value: "%s"' % name))
            seen.add(name)
            if not c.get("image"):
                causes.append(required(f + ".image"))
            causes += volume_mount_causes(f, c.get("volumeMounts"))
            if lst == "initContainers" and c.get("restartPolicy") not in (None, "Always"):
                causes.append(cause("FieldValueNotSupported", f + ".restartPolicy",
                                    'Unsupported value: "%s": supported values: "Always"' % c.get("restartPolicy")))
    rp = spec.get("restartPolicy")
    if rp not in (None, "Always", "OnFailure", "Never"):
        causes.append(cause("FieldValueNotSupported", "spec.restartPolicy",
                            'Unsupported value: "%s": supported values: "Always", "OnFailure", "Never"' % rp))
    return causes


def _pod_spec_mutable_view(spec):
    s = copy.deepcopy(spec)
    for lst in ("containers", "initContainers"):
        for c in s.get(lst) or []:
            if isinstance(c, dict):
                c.pop("image", None)
    for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
        s.pop(k, None)
    return s


POD_UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                        "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                        "(allow it to be set to 1 if it was previously negative)")


def validate_crd(crd):
    causes = []
    spec = crd.get("spec") if isinstance(crd.get("spec"), dict) else {}
    group = spec.get("group")
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    if not group:
        causes.append(required("spec.group"))
    elif "." not in group:
        causes.append(invalid_value("spec.group", group, "should be a domain with at least one dot"))
    if not names.get("plural"):
        causes.append(required("spec.names.plural"))
    if not names.get("kind"):
        causes.append(required("spec.names.kind"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(cause("FieldValueNotSupported", "spec.scope", 'Unsupported value: "%s": supported values: '
                            '"Cluster", "Namespaced"' % spec.get("scope")))
    versions = spec.get("versions")
    if not versions or not isinstance(versions, list):
        causes.append(required("spec.versions", "must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        causes.append(invalid_value("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                    "must have exactly one version marked as storage version"))
    elif not all(isinstance(v, dict) and v.get("name") for v in versions):
        causes.append(required("spec.versions[0].name"))
    name = crd.get("metadata", {}).get("name", "")
    if group and names.get("plural") and name != names["plural"] + "." + group:
        causes.append(invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    return causes


def crd_status(crd):
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    now = rfc3339()
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    old = (crd.get("status") or {}).get("storedVersions") or []
    return {"acceptedNames": names,
            "conditions": [{"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
                            "reason": "NoConflicts", "message": "no conflicts found"},
                           {"type": "Established", "status": "True", "lastTransitionTime": now,
                            "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
            "storedVersions": old + [v for v in storage if v not in old]}
