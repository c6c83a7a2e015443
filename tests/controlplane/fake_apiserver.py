#!/usr/bin/env python3
"""A fake Kubernetes API server plus a kubelet stand-in, for tests.

Standard library only (python3 >= 3.11).  It is deliberately an independent
implementation: it shares no code with FleetJob's C++ Kubernetes client, so a
misunderstanding of the API in one cannot hide itself in the other.

Command line
------------
    fake_apiserver.py --listen 127.0.0.1:0 --ready-file PATH
                      [--tls-cert C --tls-key K [--client-ca CA]]
                      [--token T ...] [--kubelet auto|manual|podman]
                      [--watch-cache-size N] [--bookmark-interval SECONDS]
                      [--nodes N] [--run-delay-ms MS] [--server-version v1.32.0]
                      [--verbose]

Port 0 binds an ephemeral port.  Once serving, "http(s)://HOST:PORT\\n" is
written atomically (tmp + rename) to --ready-file.  SIGTERM / SIGINT stop the
server and exit 0.  As a module: ``FakeApiServer(...).start()`` / ``.url`` /
``.stop()`` (also a context manager).

Kubernetes API served (JSON only)
---------------------------------
Discovery (/version, /api, /api/v1, /apis, /apis/G, /apis/G/V; /openapi/v2 is a
minimal empty document - protobuf or JSON by Accept - so client-side
validation finds no schema and skips; /openapi/v3 is 404).  Built-in types:
core/v1 pods (+status, log, binding, eviction), services, configmaps, secrets,
events, namespaces, nodes, serviceaccounts, endpoints, persistentvolumeclaims;
coordination.k8s.io/v1 leases; events.k8s.io/v1 events; apps/v1 deployments,
statefulsets, replicasets, daemonsets; batch/v1 jobs; policy/v1
poddisruptionbudgets; scheduling.k8s.io/v1 priorityclasses;
rbac.authorization.k8s.io/v1 roles, rolebindings, clusterroles,
clusterrolebindings; scheduling.volcano.sh/v1beta1 podgroups, queues;
scheduling.x-k8s.io/v1alpha1 podgroups; apiextensions.k8s.io/v1
customresourcedefinitions (creating one serves its group dynamically).
Only pods are "run" (by the kubelet stand-in); everything else is stored.

Semantics: one global resourceVersion counter; uid, creationTimestamp,
generateName, generation (bumped when anything outside metadata/status
changes); 409 AlreadyExists / Conflict; 404; 422 Invalid with causes; status
subresource isolation; list with label/field selectors and limit/continue
(consistent snapshot; 410 Expired when it is gone); merge, strategic-merge
(built-in types only; 415 for custom resources, as the real server) and
JSON patch; delete with preconditions, finalizers, graceful pod deletion and
propagationPolicy Foreground/Background/Orphan garbage collection; chunked
watch with bookmarks, timeoutSeconds, replay from a bounded per-resource
history and ERROR 410 Expired for a too old resourceVersion.

Test control API (not authenticated, never faulted, not logged)
---------------------------------------------------------------
All bodies are JSON; answers are JSON.

POST /fake/v1/namespaces/{ns}/pods/{name}      pod outcome, body one of:
    {"action":"run", "node":N?}          bind (pool node or N) + IP + Running
    {"action":"succeed"}                 Succeeded, containers exit 0
    {"action":"fail","exitCode":N,"container":C?,"reason":R?}
                                         Failed, terminated exitCode N (Error)
    {"action":"evict","message":M?}      Failed, reason Evicted
    {"action":"restart","container":C?,"exitCode":N?}
                                         restartCount+1, lastState, NEW podIP
    {"action":"ready","container":C?,"ready":bool}   (all containers if no C)
    {"action":"unschedulable","message":M?}  PodScheduled False Unschedulable
    -> 200 with the pod; 404 Status when the pod does not exist.
POST /fake/v1/namespaces/{ns}/pods/{name}/log  {"text":T,"container":C?,
    "replace":false} appends T to the container's log (first container if no C).
POST /fake/v1/faults  any of (each key optional; several rules may coexist):
    {"latencyMs":N}                       delay every API request by N ms
    {"failNext":K,"code":500|503|429|...,"retryAfter":S?,"match":"METHOD /path-prefix"?}
        the next K matching requests fail with a Status body (429 and 503
        carry Retry-After: S, 429 default 1).  METHOD may be "*" or "WATCH"
        (watch requests only); match may be just a path prefix.
    {"dropWatches":true}                  close every open watch abruptly
                                          (no terminating chunk)
    {"expireWatches":true}                send ERROR 410 Expired on every open
                                          watch, then end it
    {"compact":true}                      forget watch history and list
                                          snapshots: older RVs get 410
    {"truncateNext":K,"abort":bool?,"match":..?}  body cut in half (Content-
                                          Length of the cut body; with abort the
                                          full length is announced and the
                                          connection closed mid-body)
    {"garbageNext":K,"match":..?}         200 with a non-JSON body
    {"hugeNext":K,"bytes":N,"match":..?}  200 with a valid JSON body of N bytes
    {"wrongContentTypeNext":K,"match":..?} 200 text/html page
    {"tokens":[...]}                      accepted bearer tokens ([] = no auth)
    {"reset":true}                        clear all faults (not tokens)
GET  /fake/v1/faults                       current fault state
POST /fake/v1/tokens {"tokens":[...]}      same as the faults key
GET  /fake/v1/requests                     {"requests":[{"method","path","query",
                                          "code","time","durationMs","watch"}]}
DELETE /fake/v1/requests                   clear that log
POST /fake/v1/config  {"kubelet":"auto"|"manual","runDelayMs":N,
    "terminationDelayMs":N,"bookmarkIntervalMs":N,"probeReadyDefault":bool,
    "watchCacheSize":N,"podNetwork":"cluster"|"loopback"}    (GET returns it;
    loopback pod IPs are 127.x addresses, so a test can run a pod's processes)
GET  /fake/v1/state    {"resourceVersion":"N","watches":N,"objects":{key:count}}
    ("watches" counts registered watch streams: poll it instead of sleeping
    until a watch is established)
POST /fake/v1/seed     {"path":"/api/v1/namespaces/default/pods","count":N,
    "template":{...},"namePrefix":"p-","start":0} creates N objects
    in-process (fast fixture set-up for benchmarks);
    -> {"created":N,"resourceVersion":"RV"}

Kubelet stand-in
----------------
Nodes node-0..node-{N-1} (InternalIP 172.18.0.2...) exist as Node objects.  In
"auto" mode a new pod with the default scheduler is bound round-robin
(MODIFIED: spec.nodeName, PodScheduled), then started (MODIFIED: hostIP, a
never reused 10.x podIP or the node IP with hostNetwork, Running, ready
containers, conditions); init containers complete first (restartPolicy Always
ones stay running as sidecars).  A pod with spec.nodeName preset to a pool node
is started without binding; one bound to an unknown node, or with another
schedulerName (gang schedulers), stays Pending until a test "run"s it or
POSTs pods/NAME/binding.  Containers with readiness/startup probes are ready
unless probeReadyDefault is false; "ready" actions override.  Deleting a
bound pod is graceful (MODIFIED with deletionTimestamp, then the stand-in
removes it after terminationDelayMs); gracePeriodSeconds=0 deletes at once.

Real containers (--kubelet podman)
----------------------------------
podman_kubelet.py replaces the stand-in: bound pods run as podman pods on a
podman network of their own, with real addresses, container statuses, probes,
env, volumes, securityContext and logs (see that module).  The server then
also listens on the network's gateway (TLS with a certificate made for it and
127.0.0.1 unless one is given), pods get KUBERNETES_SERVICE_HOST/PORT for it,
every namespace gets the kube-root-ca.crt ConfigMap, and the pods' service-
account tokens are accepted.  Needs root, podman, runc and catatonit; the
simulated pod actions of the control API are refused.

Not implemented (on purpose)
----------------------------
Server-side apply (apply-patch+yaml -> 415), protobuf and YAML bodies,
aggregated discovery (clients fall back to the legacy documents),
/openapi/v3, schema validation/pruning/defaulting of custom resources and
fieldValidation=Strict (unknown fields are stored as sent), CRD conversion
(all served versions share one storage; apiVersion is rewritten), admission,
RBAC/authorization (any authenticated caller may do anything), managedFields,
selfLink, scale/exec/attach/port-forward/proxy subresources, workload
controllers (Deployments, Jobs, ... are only stored; no Endpoints), restart
policies and probes (the stand-in does what the test says), scheduling
constraints (resources, nodeSelector, node affinity, taints; required pod
anti-affinity on kubernetes.io/hostname with matchLabels is honoured).  core/v1 and
events.k8s.io/v1 Events are separate stores.  Namespace and CRD deletion
remove their contents at once, ignoring the contents' finalizers.  A list with
resourceVersionMatch=Exact for a still retained RV returns the current state,
and a resourceVersion newer than the server's is not waited for.  The watch
history is per resource type (--watch-cache-size events each).  Garbage
collection matches owners by uid only.  Strategic merge patch knows the merge
keys of a built-in table (containers, env, volumes, ports, conditions, ...).
"""

import argparse
import base64
import collections
import copy
import hashlib
import heapq
import itertools
import json
import os
import random
import re
import select
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 3 * 1024 * 1024
WATCH_QUEUE_LIMIT = 200000

# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def rfc3339(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def rfc3339nano(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%09dZ" % int((t % 1) * 1e9)


def parse_time(s):
    try:
        return time.mktime(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    except (TypeError, ValueError):
        return None


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def parse_bool(s, default=False):
    if s is None or s == "":
        return default
    if s in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if s in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ApiError.bad_request('invalid boolean value: "%s"' % s)


def human_age(seconds):
    s = int(max(0, seconds))
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = m // 60
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    return "%dd" % (h // 24)


def version_key(v):
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (0, 0, 0)
    return ({None: 3, "beta": 2, "alpha": 1}[m.group(2)], int(m.group(1)), int(m.group(3) or 0))


# --------------------------------------------------------------------------
# Errors as Status bodies
# --------------------------------------------------------------------------

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Expired",
           413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.headers = details, headers or {}

    def body(self):
        return status_body(self.code, self.reason, self.message, self.details)

    @staticmethod
    def _details(rt, name, kind=None):
        d = {}
        if name:
            d["name"] = name
        if rt is not None and rt.group:
            d["group"] = rt.group
        d["kind"] = kind or (rt.plural if rt is not None else "")
        return d

    @classmethod
    def not_found(cls, rt, name):
        return cls(404, "NotFound", '%s "%s" not found' % (rt.qualified, name), cls._details(rt, name))

    @classmethod
    def already_exists(cls, rt, name):
        return cls(409, "AlreadyExists", '%s "%s" already exists' % (rt.qualified, name),
                   cls._details(rt, name))

    @classmethod
    def conflict(cls, rt, name, msg="the object has been modified; please apply your changes "
                                    "to the latest version and try again"):
        return cls(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (rt.qualified, name, msg),
                   cls._details(rt, name))

    @classmethod
    def invalid(cls, rt, name, causes):
        kind = rt.kind + ("." + rt.group if rt.group else "")
        errs = ["%s: %s" % (c["field"], c["message"]) for c in causes]
        agg = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        d = cls._details(rt, name, kind=rt.kind)
        d["causes"] = causes
        return cls(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, agg), d)

    @classmethod
    def bad_request(cls, msg):
        return cls(400, "BadRequest", msg)

    @classmethod
    def not_allowed(cls):
        return cls(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    @classmethod
    def path_not_found(cls):
        return cls(404, "NotFound", "the server could not find the requested resource", {})

    @classmethod
    def expired(cls, msg):
        return cls(410, "Expired", msg)


def cause(ctype, field, message):
    return {"reason": ctype, "message": message, "field": field}  # as the real API names it


def required(field, detail=""):
    return cause("FieldValueRequired", field, "Required value" + (": " + detail if detail else ""))


def invalid_value(field, value, detail):
    return cause("FieldValueInvalid", field, "Invalid value: %s: %s" % (json.dumps(value), detail))


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Resource types and the registry
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------

_SEL_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|<|>|[^\s,()=!<>]+)")


def parse_label_selector(s):
    """-> list of (key, op, values).  Raises ApiError 400 on bad syntax."""
    if s is None or not s.strip():
        return []
    toks, pos = [], 0
    s = s.strip()
    while pos < len(s):
        m = _SEL_TOKEN.match(s, pos)
        if not m:
            raise ApiError.bad_request("unable to parse requirement: invalid selector %r" % s)
        toks.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    reqs, i = [], 0

    def bad(msg):
        return ApiError.bad_request("unable to parse requirement: " + msg)

    def check_key(k):
        if k in ("in", "notin", "=", "==", "!=", "(", ")", ",", "!", "<", ">"):
            raise bad("found '%s', expected: identifier" % k)
        err = qualified_name_error(k)
        if err:
            raise bad('key: Invalid value: "%s": %s' % (k, err))

    def check_value(v):
        err = label_value_error(v)
        if err:
            raise bad('values[0][%s]: Invalid value: "%s": %s' % (v, v, err))

    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks):
                raise bad("found '', expected: identifier")
            check_key(toks[i + 1])
            reqs.append((toks[i + 1], "!", []))
            i += 2
        else:
            key = toks[i]
            check_key(key)
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append((key, "exists", []))
            else:
                op = toks[i]
                i += 1
                if op in ("=", "==", "!="):
                    val = ""
                    if i < len(toks) and toks[i] != ",":
                        val = toks[i]
                        i += 1
                    check_value(val)
                    reqs.append((key, "!=" if op == "!=" else "=", [val]))
                elif op in ("in", "notin"):
                    if i >= len(toks) or toks[i] != "(":
                        raise bad("found '%s', expected: '('" % (toks[i] if i < len(toks) else ""))
                    i += 1
                    vals = []
                    while i < len(toks) and toks[i] != ")":
                        if toks[i] != ",":
                            check_value(toks[i])
                            vals.append(toks[i])
                        i += 1
                    if i >= len(toks):
                        raise bad("found '', expected: ')'")
                    i += 1
                    if not vals:
                        raise bad("for 'in', 'notin' operators, values set can't be empty")
                    reqs.append((key, op, vals))
                elif op in ("<", ">"):
                    if i >= len(toks):
                        raise bad("found '', expected: integer")
                    try:
                        int(toks[i])
                    except ValueError:
                        raise bad("for 'Gt', 'Lt' operators, the value must be an integer")
                    reqs.append((key, op, [toks[i]]))
                    i += 1
                else:
                    raise bad("found '%s', expected: in, notin, =, ==, !=, gt, lt" % op)
        if i < len(toks):
            if toks[i] != ",":
                raise bad("found '%s', expected: ','" % toks[i])
            i += 1
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "=" and (not has or v != vals[0]):
            return False
        if op == "!=" and has and v == vals[0]:
            return False
        if op == "in" and (not has or v not in vals):
            return False
        if op == "notin" and has and v in vals:
            return False
        if op in ("<", ">"):
            try:
                n = int(v)
            except (TypeError, ValueError):
                return False
            if (op == ">" and not n > int(vals[0])) or (op == "<" and not n < int(vals[0])):
                return False
    return True


def _g(obj, *path, default=""):
    for p in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(p)
    return default if obj is None else obj


def field_set(storage_key, obj):
    meta = obj.get("metadata", {})
    f = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}
    if storage_key == "/pods":
        spec, st = obj.get("spec", {}), obj.get("status", {})
        f.update({"spec.nodeName": spec.get("nodeName", ""), "spec.restartPolicy": spec.get("restartPolicy", ""),
                  "spec.schedulerName": spec.get("schedulerName", ""),
                  "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                  "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
                  "status.phase": st.get("phase", ""), "status.podIP": st.get("podIP", ""),
                  "status.nominatedNodeName": st.get("nominatedNodeName", "")})
    elif storage_key == "/events":
        io = obj.get("involvedObject", {})
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            f["involvedObject." + k] = io.get(k, "")
        f.update({"reason": obj.get("reason", ""), "reportingComponent": obj.get("reportingComponent", ""),
                  "source": _g(obj, "source", "component"), "type": obj.get("type", "")})
    elif storage_key == "/namespaces":
        f["status.phase"] = _g(obj, "status", "phase")
    elif storage_key == "/nodes":
        f["spec.unschedulable"] = "true" if _g(obj, "spec", "unschedulable", default=False) else "false"
    elif storage_key == "/secrets":
        f["type"] = obj.get("type", "")
    elif storage_key == "/services":
        f["spec.clusterIP"] = _g(obj, "spec", "clusterIP")
        f["spec.type"] = _g(obj, "spec", "type")
    return f


FIELD_NAMES = {}


def parse_field_selector(s, storage_key):
    if s is None or not s.strip():
        return []
    sample = set(field_set(storage_key, {"metadata": {}}).keys())
    reqs = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise ApiError.bad_request("invalid selector: '%s'; can't understand '%s'" % (s, part))
        key, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in sample:
            raise ApiError.bad_request('field label not supported: %s' % key)
        reqs.append((key, "!=" if op == "!=" else "=", val))
    return reqs


def fields_match(reqs, storage_key, obj):
    if not reqs:
        return True
    fs = field_set(storage_key, obj)
    for key, op, val in reqs:
        if (fs.get(key, "") == val) != (op == "="):
            return False
    return True


# --------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


SMP_MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
                  "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
                  "imagePullSecrets": "name", "hostAliases": "ip", "ownerReferences": "uid",
                  "conditions": "type", "resourceClaims": "name", "topologySpreadConstraints": "topologyKey",
                  "secrets": "name", "subjects": None}
SMP_PRIMITIVE_MERGE = {"finalizers"}
_DELETE = object()


def _smp_merge_key(field, items):
    if field == "ports":
        return "containerPort" if any(isinstance(x, dict) and "containerPort" in x for x in items) else "port"
    return SMP_MERGE_KEYS.get(field)


def strategic_merge_patch(orig, patch):
    """A strategic merge patch for built-in types: lists are merged by the
    patchMergeKey of a small built-in table; $patch, $setElementOrder,
    $deleteFromPrimitiveList and $retainKeys directives are understood."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(orig) if isinstance(orig, dict) else {}
    orders = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            if isinstance(result.get(f), list):
                result[f] = [x for x in result[f] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            sub = strategic_merge_patch(result.get(k), v)
            if sub is _DELETE:
                result.pop(k, None)
            else:
                result[k] = sub
        elif isinstance(v, list):
            result[k] = _smp_list(k, result.get(k), v)
        else:
            result[k] = v
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    for f, order in orders.items():
        lst = result.get(f)
        if not isinstance(lst, list):
            continue
        key = _smp_merge_key(f, lst + order)
        ident = (lambda x: x.get(key) if isinstance(x, dict) else x) if key else (lambda x: x)
        pos = {json.dumps(ident(o), sort_keys=True): i for i, o in enumerate(order)}
        result[f] = sorted(lst, key=lambda x: pos.get(json.dumps(ident(x), sort_keys=True), len(pos)))
    return result


def _smp_list(field, orig, patch):
    orig = orig if isinstance(orig, list) else []
    if field in SMP_PRIMITIVE_MERGE:
        out = list(orig)
        for x in patch:
            if x not in out:
                out.append(x)
        return out
    key = _smp_merge_key(field, orig + patch)
    if not key or not all(isinstance(x, dict) for x in patch):
        return copy.deepcopy([x for x in patch if not (isinstance(x, dict) and x.get("$patch"))])
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return copy.deepcopy([x for x in patch if x.get("$patch") != "replace"])
    out = list(orig)
    for pe in patch:
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == pe.get(key)), None)
        if pe.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in pe.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], pe)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be an array of operations")
    doc = copy.deepcopy(doc)

    def parent(path):
        parts = _pointer(path)
        if not parts:
            raise ValueError("cannot operate on the document root")
        cur = doc
        for p in parts[:-1]:
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ValueError("missing path %s" % path)
        return cur, parts[-1]

    def get(path):
        cur = doc
        for p in _pointer(path):
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ValueError("missing path %s" % path)
        return cur

    def add(path, value):
        cont, last = parent(path)
        if isinstance(cont, list):
            if last == "-":
                cont.append(value)
            else:
                i = int(last)
                if i < 0 or i > len(cont):
                    raise ValueError("index out of range in %s" % path)
                cont.insert(i, value)
        elif isinstance(cont, dict):
            cont[last] = value
        else:
            raise ValueError("cannot add at %s" % path)

    def remove(path):
        cont, last = parent(path)
        if isinstance(cont, list):
            return cont.pop(int(last))
        if isinstance(cont, dict) and last in cont:
            return cont.pop(last)
        raise ValueError("missing path %s" % path)

    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError("invalid operation %r" % (op,))
        kind, path = op["op"], op["path"]
        try:
            if kind == "add":
                add(path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(path)
            elif kind == "replace":
                remove(path)
                add(path, copy.deepcopy(op["value"]))
            elif kind == "move":
                add(path, remove(op["from"]))
            elif kind == "copy":
                add(path, copy.deepcopy(get(op["from"])))
            elif kind == "test":
                if get(path) != op.get("value"):
                    raise ValueError("testing value %s failed" % path)
            else:
                raise ValueError("unexpected kind: %s" % kind)
        except (IndexError, KeyError, TypeError) as e:
            raise ValueError("%s %s: %s" % (kind, path, e))
    return doc


# --------------------------------------------------------------------------
# Type specific defaulting and validation
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------


class Event:
    __slots__ = ("rv", "type", "obj", "old")

    def __init__(self, rv, etype, obj, old):
        self.rv, self.type, self.obj, self.old = rv, etype, obj, old


class Watcher:
    def __init__(self, rt, key, ns, label_reqs, field_reqs, conn):
        self.rt, self.key, self.ns = rt, key, ns
        self.label_reqs, self.field_reqs = label_reqs, field_reqs
        self.cond = threading.Condition(threading.Lock())
        self.queue = collections.deque()
        self.conn = conn
        self.dropped = self.expired = self.closed = False

    def matches(self, obj):
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.ns is not None and meta.get("namespace") != self.ns:
            return False
        return labels_match(self.label_reqs, meta.get("labels")) and fields_match(self.field_reqs, self.key, obj)

    def transform(self, ev):
        cur = self.matches(ev.obj)
        if ev.type == "ADDED":
            return ("ADDED", ev.obj) if cur else None
        if ev.type == "DELETED":
            return ("DELETED", ev.obj) if cur else None
        prev = self.matches(ev.old)
        if cur and prev:
            return ("MODIFIED", ev.obj)
        if cur:
            return ("ADDED", ev.obj)
        if prev:
            old = dict(ev.old)
            old["metadata"] = dict(old["metadata"], resourceVersion=str(ev.rv))
            return ("DELETED", old)
        return None

    def offer(self, ev):
        t = self.transform(ev)
        if t is None:
            return
        with self.cond:
            if len(self.queue) >= WATCH_QUEUE_LIMIT:
                self.closed = True
            else:
                self.queue.append(t)
            self.cond.notify()

    def signal(self, **flags):
        with self.cond:
            for k, v in flags.items():
                setattr(self, k, v)
            self.cond.notify()


class Store:
    def __init__(self, server):
        self.server = server
        self.registry = Registry()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        self.objects = collections.defaultdict(dict)   # storage key -> {(ns, name): obj}
        self.history = collections.defaultdict(collections.deque)
        self.compacted = collections.defaultdict(int)
        self.cache_size = server.watch_cache_size
        self.watchers = set()
        self.uids = {}                                   # uid -> (key, ns, name)
        self.dependents = collections.defaultdict(set)   # owner uid -> {dependent uid}
        self.pending_termination = set()                 # pod uids the kubelet still has to finish
        self.snapshots = collections.OrderedDict()
        self.snap_ids = itertools.count(1)
        self.logs = {}                                   # (ns, pod, container) -> [(t, line)]
        self.prev_logs = {}

    # ---- low level ------------------------------------------------------
    def _index(self, obj, add):
        meta = obj["metadata"]
        uid = meta.get("uid")
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid"):
                if add:
                    self.dependents[ref["uid"]].add(uid)
                else:
                    self.dependents.get(ref["uid"], set()).discard(uid)
                    if not self.dependents.get(ref["uid"], True):
                        del self.dependents[ref["uid"]]

    def _commit(self, rt, etype, obj, old):
        self.rv += 1
        rv = self.rv
        key = rt.storage_key
        meta = obj["metadata"]
        if etype == "DELETED":
            obj = dict(obj)
            obj["metadata"] = meta = dict(meta)
        meta["resourceVersion"] = str(rv)
        k = (meta.get("namespace", ""), meta["name"])
        if old is not None:
            self._index(old, False)
        if etype == "DELETED":
            self.objects[key].pop(k, None)
            self.uids.pop(meta.get("uid"), None)
        else:
            self.objects[key][k] = obj
            self.uids[meta["uid"]] = (key, k[0], k[1])
            self._index(obj, True)
        ev = Event(rv, etype, obj, old)
        hist = self.history[key]
        hist.append(ev)
        while len(hist) > self.cache_size:
            self.compacted[key] = hist.popleft().rv
        for w in list(self.watchers):
            if w.key == key:
                w.offer(ev)
        self.changed.notify_all()
        return obj

    def _find(self, rt, ns, name):
        return self.objects[rt.storage_key].get((ns or "", name))

    def by_uid(self, uid):
        loc = self.uids.get(uid)
        if not loc:
            return None, None
        return self.registry.storage(loc[0]), self.objects[loc[0]].get((loc[1], loc[2]))

    def namespace_exists(self, ns):
        return ("", ns) in self.objects["/namespaces"]

    def compact(self):
        with self.lock:
            for key in list(self.history):
                self.history[key].clear()
            for key in set(self.objects) | set(self.history):
                self.compacted[key] = self.rv
            self.snapshots.clear()

    # ---- create ---------------------------------------------------------
    def create(self, rt, ns, body, dry_run=False, internal=False):
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request was in an unknown format")
        with self.lock:
            self._check_type_meta(rt, body)
            meta = body.get("metadata")
            if meta is None:
                meta = body["metadata"] = {}
            if not isinstance(meta, dict):
                raise ApiError.bad_request("metadata must be an object")
            if meta.get("resourceVersion"):
                raise ApiError.bad_request("resourceVersion should not be set on objects to be created")
            if rt.namespaced:
                if meta.get("namespace") and meta["namespace"] != ns:
                    raise ApiError.bad_request("the namespace of the provided object does not match the "
                                               "namespace sent on the request")
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(100):
                    cand = meta["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))
                    if not self._find(rt, ns, cand):
                        meta["name"] = cand
                        break
            if rt.namespaced and not self.namespace_exists(ns):
                raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                               {"name": ns, "kind": "namespaces"})
            name = meta.get("name") or ""
            causes = []
            if not name:
                causes.append(required("metadata.name", "name or generateName is required"))
            causes += validate_metadata(meta, self._name_kind(rt))
            causes += self._validate_type(rt, body, None)
            if causes:
                raise ApiError.invalid(rt, name, causes)
            if self._find(rt, ns, name):
                raise ApiError.already_exists(rt, name)
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339()
            meta["generation"] = 1
            body["apiVersion"], body["kind"] = rt.api_version, rt.kind
            self._default_on_create(rt, body)
            if dry_run:
                meta["resourceVersion"] = ""
                return body
            obj = self._commit(rt, "ADDED", body, None)
            self._after_create(rt, obj)
            return obj

    def _name_kind(self, rt):
        if rt.storage_key == "/namespaces":
            return "label"
        if rt.storage_key == "/services":
            return "1035"
        return "subdomain"

    def _check_type_meta(self, rt, body):
        av, kind = body.get("apiVersion"), body.get("kind")
        ok_versions = {rt.api_version}
        if rt.custom:
            ok_versions |= {t.api_version for t in self.registry.types.values() if t.storage_key == rt.storage_key}
        if av and av not in ok_versions:
            raise ApiError.bad_request("the API version in the data (%s) does not match the expected API "
                                       "version (%s)" % (av, rt.api_version))
        if kind and kind != rt.kind:
            raise ApiError.bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                                       % (kind, rt.kind))

    def _validate_type(self, rt, obj, old):
        key = rt.storage_key
        if key == "/pods":
            return validate_pod(obj)
        if key == "apiextensions.k8s.io/customresourcedefinitions":
            return validate_crd(obj)
        if key == "/services":
            spec = obj.get("spec") or {}
            if spec.get("clusterIP") != "None" and spec.get("type") != "ExternalName" and not spec.get("ports"):
                return [required("spec.ports")]
        return []

    def _default_on_create(self, rt, obj):
        key = rt.storage_key
        if rt.has_status and key not in ("/namespaces", "/nodes"):
            obj.pop("status", None)
        if key == "/pods":
            default_pod(obj)
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj)}
        elif key == "/namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif key == "/services":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if not spec.get("clusterIP") and spec["type"] != "ExternalName":
                n = self.server.next_cluster_ip()
                spec["clusterIP"] = "10.96.%d.%d" % (n // 250, n % 250 + 2)
            if spec.get("clusterIP"):
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
            for p in spec.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
                    p.setdefault("targetPort", p.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif key == "apiextensions.k8s.io/customresourcedefinitions":
            obj["status"] = crd_status(obj)

    def _after_create(self, rt, obj):
        key = rt.storage_key
        if key == "/namespaces":
            ns = obj["metadata"]["name"]
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
            self.create(self.registry.get("", "v1", "serviceaccounts"), ns, sa)
            if self.server.root_ca_pem:   # as kube-controller-manager's root-ca-cert-publisher
                self.create(self.registry.get("", "v1", "configmaps"), ns, {
                    "metadata": {"name": "kube-root-ca.crt", "namespace": ns},
                    "data": {"ca.crt": self.server.root_ca_pem}})
        elif key == "apiextensions.k8s.io/customresourcedefinitions":
            self.registry.register_crd(obj)
        elif key == "/pods":
            self.server.kubelet.pod_created(obj)
        self._gc_check(obj)

    # ---- read -----------------------------------------------------------
    def get(self, rt, ns, name):
        with self.lock:
            obj = self._find(rt, ns, name)
            if obj is None:
                raise ApiError.not_found(rt, name)
            return obj

    def list(self, rt, ns, params):
        label_reqs = parse_label_selector(params.get("labelSelector"))
        field_reqs = parse_field_selector(params.get("fieldSelector"), rt.storage_key)
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            raise ApiError.bad_request("invalid limit")
        cont = params.get("continue") or ""
        with self.lock:
            key = rt.storage_key
            rvm = params.get("resourceVersionMatch")
            rvs = params.get("resourceVersion")
            if rvm and not rvs:
                raise ApiError.invalid(rt, "", [cause("FieldValueForbidden", "resourceVersionMatch",
                                                      "Forbidden: resourceVersionMatch is forbidden unless "
                                                      "resourceVersion is provided")])
            if rvs and rvs != "0" and not cont:
                try:
                    want = int(rvs)
                except ValueError:
                    raise ApiError.bad_request('invalid resourceVersion "%s"' % rvs)
                if rvm == "Exact" and want < self.compacted[key]:
                    raise ApiError.expired("too old resource version: %d (%d)" % (want, self.compacted[key]))
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont + "=" * (-len(cont) % 4)))
                    sid, start, snap_rv = tok["sid"], tok["start"], tok["rv"]
                except Exception:
                    raise ApiError.bad_request("continue key is not valid: incorrect encoded start "
                                               "resourceVersion (version meta.k8s.io/v1)")
                snap = self.snapshots.get(sid)
                if snap is None or snap[0] != key:
                    raise ApiError.expired(
                        "The provided continue parameter is too old to display a consistent list result. You "
                        "can start a new list without the continue parameter, or use the continue value from "
                        "the response.")
                _, rv, objs = snap
                if snap_rv != rv:
                    raise ApiError.bad_request("continue key is not valid")
            else:
                rv = self.rv
                objs = [o for _, o in sorted(self.objects[key].items())]
                start, sid = "", None
            matching = []
            for o in objs:
                meta = o["metadata"]
                k = meta.get("namespace", "") + "/" + meta["name"]
                if start and k < start:
                    continue
                if ns is not None and meta.get("namespace") != ns:
                    continue
                if labels_match(label_reqs, meta.get("labels")) and fields_match(field_reqs, key, o):
                    matching.append((k, o))
            list_meta = {"resourceVersion": str(rv)}
            if limit > 0 and len(matching) > limit:
                if sid is None:
                    sid = next(self.snap_ids)
                    self.snapshots[sid] = (key, rv, objs)
                    while len(self.snapshots) > 64:
                        self.snapshots.popitem(last=False)
                nxt = matching[limit][0]
                list_meta["continue"] = base64.urlsafe_b64encode(dumps(
                    {"v": "meta.k8s.io/v1", "rv": rv, "start": nxt, "sid": sid}).encode()).decode().rstrip("=")
                if not label_reqs and not field_reqs:
                    list_meta["remainingItemCount"] = len(matching) - limit
                matching = matching[:limit]
            return [o for _, o in matching], list_meta

    # ---- update / patch --------------------------------------------------
    def update(self, rt, ns, name, body, subresource=None, dry_run=False):
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request was in an unknown format")
        with self.lock:
            self._check_type_meta(rt, body)
            meta = body.get("metadata")
            if not isinstance(meta, dict):
                meta = body["metadata"] = {}
            if meta.get("name", "") != name:
                raise ApiError.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                           % (meta.get("name", ""), name))
            if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                           "sent on the request")
            old = self._find(rt, ns, name)
            if old is None:
                raise ApiError.not_found(rt, name)
            return self._apply_update(rt, old, body, subresource, dry_run)

    def patch(self, rt, ns, name, raw, ctype, subresource=None, dry_run=False):
        ctype = (ctype or "").split(";")[0].strip().lower()
        accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        if not rt.custom:
            accepted += ", application/strategic-merge-patch+json"
        if ctype not in ("application/json-patch+json", "application/merge-patch+json",
                         "application/strategic-merge-patch+json") or (
                ctype == "application/strategic-merge-patch+json" and rt.custom):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: " + accepted)
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise ApiError.bad_request("error decoding patch: %s" % e)
        with self.lock:
            old = self._find(rt, ns, name)
            if old is None:
                raise ApiError.not_found(rt, name)
            base = copy.deepcopy(old)
            try:
                if ctype == "application/json-patch+json":
                    new = json_patch(base, patch)
                elif not isinstance(patch, dict):
                    raise ApiError.bad_request("error decoding patch: a merge patch must be a JSON object")
                elif ctype == "application/merge-patch+json":
                    new = merge_patch(base, patch)
                else:
                    new = strategic_merge_patch(base, patch)
            except ValueError as e:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                               "request: %s" % e)
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise ApiError.bad_request("the patched object is not a valid object")
            if new["metadata"].get("name") != name:
                raise ApiError.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                           % (new["metadata"].get("name"), name))
            self._check_type_meta(rt, new)
            return self._apply_update(rt, old, new, subresource, dry_run)

    def _apply_update(self, rt, old, new, subresource, dry_run):
        name = old["metadata"]["name"]
        meta = new["metadata"]
        rvs = meta.get("resourceVersion")
        if rvs:
            try:
                int(rvs)
            except (TypeError, ValueError):
                raise ApiError.bad_request('invalid resourceVersion "%s"' % rvs)
            if rvs != old["metadata"]["resourceVersion"]:
                raise ApiError.conflict(rt, name)
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise ApiError.conflict(rt, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                    % (old["metadata"]["uid"], meta["uid"]))
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        else:
            result = new
            om = old["metadata"]
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "namespace", "generation"):
                if k in om:
                    meta[k] = om[k]
                else:
                    meta.pop(k, None)
            meta.pop("managedFields", None)
            meta.pop("selfLink", None)
            if rt.has_status:
                if "status" in old:
                    result["status"] = old["status"]
                else:
                    result.pop("status", None)
            causes = validate_metadata(meta, self._name_kind(rt)) + self._validate_type(rt, result, old)
            if causes:
                raise ApiError.invalid(rt, name, causes)
            if rt.storage_key == "/pods":
                default_pod(result)
                if _pod_spec_mutable_view(result.get("spec", {})) != _pod_spec_mutable_view(old.get("spec", {})):
                    raise ApiError.invalid(rt, name, [cause("FieldValueForbidden", "spec",
                                                            "Forbidden: " + POD_UPDATE_FORBIDDEN)])
            elif rt.storage_key == "/services":
                spec, ospec = result.setdefault("spec", {}), old.get("spec", {})
                for k in ("clusterIP", "clusterIPs"):
                    if not spec.get(k) and ospec.get(k):
                        spec[k] = ospec[k]
            if om.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(om.get("finalizers") or [])
                if added:
                    raise ApiError.invalid(rt, name, [cause(
                        "FieldValueForbidden", "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new "
                        "finalizers %s" % json.dumps(sorted(added)))])
            skip = ("metadata", "status") if rt.has_status else ("metadata",)
            if any(result.get(k) != old.get(k) for k in set(result) | set(old)
                   if k not in skip and k not in ("kind", "apiVersion")):
                meta["generation"] = om.get("generation", 0) + 1
        result["apiVersion"], result["kind"] = old.get("apiVersion", rt.api_version), rt.kind
        result["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if result == old:
            return old          # no-op: nothing written, no new resourceVersion, no event
        if dry_run:
            return result
        rm = result["metadata"]
        if rm.get("deletionTimestamp") and not rm.get("finalizers") and \
                rm.get("uid") not in self.pending_termination:
            self._delete_now(rt, result, old)
            return result
        obj = self._commit(rt, "MODIFIED", result, old)
        if rt.storage_key == "apiextensions.k8s.io/customresourcedefinitions" and subresource != "status":
            self._refresh_crd(obj)
        self._gc_check(obj)
        return obj

    def _refresh_crd(self, crd):
        causes = validate_crd(crd)
        if causes:
            return
        st = crd_status(crd)
        if st["storedVersions"] != (crd.get("status") or {}).get("storedVersions"):
            new = copy.deepcopy(crd)
            new["status"] = st
            self._commit(self.registry.storage("apiextensions.k8s.io/customresourcedefinitions"), "MODIFIED",
                         new, crd)
        self.registry.register_crd(crd)

    def internal_update(self, rt, obj, mutate):
        """Apply mutate(copy) and commit it if anything changed (kubelet, GC)."""
        new = copy.deepcopy(obj)
        mutate(new)
        new["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        if new == obj:
            return obj
        return self._commit(rt, "MODIFIED", new, obj)

    # ---- delete ---------------------------------------------------------
    def delete(self, rt, ns, name, opts, dry_run=False):
        with self.lock:
            obj = self._find(rt, ns, name)
            if obj is None:
                raise ApiError.not_found(rt, name)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
                raise ApiError.conflict(rt, name, "Precondition failed: UID in precondition: %s, UID in object "
                                        "meta: %s" % (pre["uid"], obj["metadata"]["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                raise ApiError.conflict(rt, name, "Precondition failed: ResourceVersion in precondition: %s, "
                                        "ResourceVersion in object meta: %s"
                                        % (pre["resourceVersion"], obj["metadata"]["resourceVersion"]))
            policy = opts.get("propagationPolicy")
            if policy is None and opts.get("orphanDependents") is not None:
                policy = "Orphan" if opts["orphanDependents"] else "Background"
            if policy not in (None, "Foreground", "Background", "Orphan"):
                raise ApiError.invalid(rt, name, [cause("FieldValueNotSupported", "propagationPolicy",
                                                        'Unsupported value: "%s": supported values: "Foreground", '
                                                        '"Background", "Orphan"' % policy)])
            if rt.storage_key == "/namespaces" and name in ("default", "kube-system", "kube-public"):
                raise ApiError(403, "Forbidden", 'namespaces "%s" is forbidden: this namespace may not be '
                               'deleted' % name, {"name": name, "kind": "namespaces"})
            if dry_run:
                return obj
            grace = opts.get("gracePeriodSeconds")
            return self._start_deletion(rt, obj, policy or "Background", grace)

    def delete_collection(self, rt, ns, params, opts):
        items, _ = self.list(rt, ns, {k: v for k, v in params.items() if k in ("labelSelector", "fieldSelector")})
        out = []
        with self.lock:
            for o in items:
                cur = self._find(rt, o["metadata"].get("namespace"), o["metadata"]["name"])
                if cur is not None and cur["metadata"]["uid"] == o["metadata"]["uid"]:
                    out.append(self._start_deletion(rt, cur, opts.get("propagationPolicy") or "Background",
                                                    opts.get("gracePeriodSeconds")))
        return out

    def _set_deleting(self, rt, obj, extra_finalizer=None, grace=0):
        def mut(o):
            m = o["metadata"]
            if not m.get("deletionTimestamp"):
                m["deletionTimestamp"] = rfc3339(time.time() + (grace or 0))
                m["deletionGracePeriodSeconds"] = grace or 0
                m["generation"] = m.get("generation", 0) + 1
            if extra_finalizer and extra_finalizer not in (m.get("finalizers") or []):
                m.setdefault("finalizers", []).append(extra_finalizer)
        return self.internal_update(rt, obj, mut)

    def _start_deletion(self, rt, obj, policy, grace=None):
        key = rt.storage_key
        meta = obj["metadata"]
        uid = meta["uid"]
        if key == "/namespaces":
            return self._delete_namespace(rt, obj)
        if key == "apiextensions.k8s.io/customresourcedefinitions":
            return self._delete_crd(rt, obj)
        if policy == "Orphan":
            for dep_uid in list(self.dependents.get(uid, ())):
                drt, dep = self.by_uid(dep_uid)
                if dep is not None:
                    self.internal_update(drt, dep, lambda o: self._drop_refs(o, {uid}))
        if key == "/pods":
            if grace is None:
                grace = obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
            node = obj.get("spec", {}).get("nodeName")
            if grace and int(grace) > 0 and node in self.server.kubelet.node_ips:
                if meta.get("deletionTimestamp"):
                    return obj
                obj = self._set_deleting(rt, obj, "foregroundDeletion" if policy == "Foreground" else None,
                                         int(grace))
                self.pending_termination.add(uid)
                self.server.kubelet.terminate(obj)
                if policy == "Foreground":
                    self._foreground(obj)
                return obj
            self.pending_termination.discard(uid)
        if policy == "Foreground" and self.dependents.get(uid):
            obj = self._set_deleting(rt, obj, "foregroundDeletion")
            self._foreground(obj)
            return self._find(rt, meta.get("namespace"), meta["name"]) or obj
        if meta.get("finalizers"):
            return self._set_deleting(rt, obj)
        self._delete_now(rt, obj)
        return obj

    def _foreground(self, owner):
        uid = owner["metadata"]["uid"]
        for dep_uid in list(self.dependents.get(uid, ())):
            drt, dep = self.by_uid(dep_uid)
            if dep is not None and not dep["metadata"].get("deletionTimestamp"):
                self._start_deletion(drt, dep, "Background")
        self._check_foreground(uid)

    def _check_foreground(self, owner_uid):
        rt, owner = self.by_uid(owner_uid)
        if owner is None or "foregroundDeletion" not in (owner["metadata"].get("finalizers") or []):
            return
        for dep_uid in self.dependents.get(owner_uid, ()):
            _drt, dep = self.by_uid(dep_uid)
            if dep is None:
                continue
            for ref in dep["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        new = copy.deepcopy(owner)
        fins = [f for f in new["metadata"]["finalizers"] if f != "foregroundDeletion"]
        if fins:
            new["metadata"]["finalizers"] = fins
            self._commit(rt, "MODIFIED", new, owner)
        elif owner_uid not in self.pending_termination:
            new["metadata"].pop("finalizers", None)
            self._delete_now(rt, new, owner)

    @staticmethod
    def _drop_refs(o, uids):
        refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            o["metadata"]["ownerReferences"] = refs
        else:
            o["metadata"].pop("ownerReferences", None)

    def _delete_now(self, rt, obj, old=None):
        """Remove obj from storage (DELETED event) and run the garbage collector."""
        meta = obj["metadata"]
        uid = meta["uid"]
        cur = self._find(rt, meta.get("namespace"), meta["name"])
        if cur is None or cur["metadata"]["uid"] != uid:
            return
        self.pending_termination.discard(uid)
        final = dict(obj)
        self._commit(rt, "DELETED", final, old if old is not None else cur)
        if rt.storage_key == "/pods":
            self.server.kubelet.pod_deleted(uid)
            for k in [k for k in self.logs if k[0] == meta.get("namespace") and k[1] == meta["name"]]:
                self.logs.pop(k, None)
                self.prev_logs.pop(k, None)
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid"):
                self._check_foreground(ref["uid"])
        for dep_uid in list(self.dependents.get(uid, ())):
            _drt, dep = self.by_uid(dep_uid)
            if dep is not None:
                self._gc_check(dep)

    def _gc_check(self, obj):
        """Garbage-collect obj if all its (resolvable) owners are gone."""
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return
        solid, dangling = [], set()
        for r in refs:
            if not isinstance(r, dict):
                continue
            if r.get("uid") in self.uids:
                solid.append(r)
            elif self.registry.resolvable(r.get("apiVersion"), r.get("kind")):
                dangling.add(r.get("uid"))
            else:
                solid.append(r)
        if not dangling:
            return
        rt = self.registry.storage(self.uids[obj["metadata"]["uid"]][0])
        if solid:
            self.internal_update(rt, obj, lambda o: self._drop_refs(o, dangling))
        elif not obj["metadata"].get("deletionTimestamp"):
            self._start_deletion(rt, obj, "Background")

    def _delete_namespace(self, rt, obj):
        ns = obj["metadata"]["name"]
        obj = self.internal_update(rt, obj, lambda o: (o["metadata"].setdefault("deletionTimestamp", rfc3339()),
                                                       o.setdefault("status", {}).update(phase="Terminating")))
        for key in list(self.objects):
            crt = self.registry.storage(key)
            if crt is None or not crt.namespaced:
                continue
            for (ons, _n), o in sorted(self.objects[key].items()):
                if ons == ns:
                    self._delete_now(crt, o)
        self._delete_now(rt, obj)
        return obj

    def _delete_crd(self, rt, crd):
        spec = crd.get("spec", {})
        key = spec.get("group", "") + "/" + spec.get("names", {}).get("plural", "")
        crd = self._set_deleting(rt, crd)
        crt = self.registry.storage(key)
        if crt is not None:
            for _k, o in sorted(self.objects[key].items()):
                self._delete_now(crt, o)
        self.registry.unregister_crd(crd["metadata"]["name"])
        if self.registry.storage(key) is None:
            for w in list(self.watchers):
                if w.key == key:
                    w.signal(closed=True)
        self._delete_now(rt, crd)
        return crd

    # ---- watch ----------------------------------------------------------
    def open_watch(self, rt, ns, params, conn):
        label_reqs = parse_label_selector(params.get("labelSelector"))
        field_reqs = parse_field_selector(params.get("fieldSelector"), rt.storage_key)
        rvs = params.get("resourceVersion")
        send_initial = parse_bool(params.get("sendInitialEvents"))
        bookmarks = parse_bool(params.get("allowWatchBookmarks"))
        with self.lock:
            key = rt.storage_key
            w = Watcher(rt, key, ns, label_reqs, field_reqs, conn)
            initial = []
            if send_initial or rvs in (None, "", "0"):
                for _k, o in sorted(self.objects[key].items()):
                    if w.matches(o):
                        initial.append(("ADDED", o))
                if send_initial and bookmarks:
                    initial.append(("BOOKMARK", self.bookmark_object(rt, self.rv, initial_end=True)))
            else:
                try:
                    want = int(rvs)
                except ValueError:
                    raise ApiError.bad_request('invalid resource version: "%s"' % rvs)
                if want < self.compacted[key]:
                    err = status_body(410, "Expired", "too old resource version: %d (%d)"
                                      % (want, self.compacted[key]))
                    return None, [("ERROR", err)]
                for ev in self.history[key]:
                    if ev.rv > want:
                        t = w.transform(ev)
                        if t:
                            initial.append(t)
            self.watchers.add(w)
            return w, initial

    def close_watch(self, w):
        with self.lock:
            self.watchers.discard(w)

    @staticmethod
    def bookmark_object(rt, rv, initial_end=False):
        meta = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}


# --------------------------------------------------------------------------
# Kubelet stand-in
# --------------------------------------------------------------------------


class Kubelet:
    def __init__(self, server, nodes):
        self.server = server
        self.store = server.store
        self.mode = server.kubelet_mode
        self.run_delay_ms = server.run_delay_ms
        self.termination_delay_ms = 0
        self.probe_ready_default = True
        self.pod_network = "cluster"   # "loopback": pod IPs in 127.0.0.0/8, so tests can run the pods
        self.node_ips = collections.OrderedDict(("node-%d" % i, "172.18.0.%d" % (i + 2)) for i in range(nodes))
        self.rr = itertools.count()
        self.ip_counter = itertools.count(1)
        self.ready = {}        # (pod uid, container) -> bool (set by tests)
        self.gateway = None    # where pods reach the API server (the podman kubelet's network)
        self.tasks = []
        self.seq = itertools.count()
        self.cond = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def _loop(self):
        while True:
            with self.cond:
                while not self.stopped and (not self.tasks or self.tasks[0][0] > time.monotonic()):
                    self.cond.wait(None if not self.tasks else max(0.0, self.tasks[0][0] - time.monotonic()))
                if self.stopped:
                    return
                _t, _s, fn = heapq.heappop(self.tasks)
            try:
                with self.store.lock:
                    fn()
            except Exception as e:  # keep the kubelet alive whatever a test does
                sys.stderr.write("fake kubelet: %r\n" % (e,))

    def later(self, delay_ms, fn):
        with self.cond:
            heapq.heappush(self.tasks, (time.monotonic() + delay_ms / 1000.0, next(self.seq), fn))
            self.cond.notify()

    # ---- helpers --------------------------------------------------------
    @property
    def pods(self):
        return self.store.registry.get("", "v1", "pods")

    def _current(self, ns, name, uid):
        pod = self.store._find(self.pods, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return None
        return pod

    def _update(self, pod, mutate):
        return self.store.internal_update(self.pods, pod, mutate)

    def new_pod_ip(self):
        n = next(self.ip_counter)
        if self.pod_network == "loopback":   # every 127/8 address is this host's: processes can bind them
            return "127.%d.%d.%d" % (1 + n // 65000, (n % 65000) // 250, n % 250 + 2)
        return "10.%d.%d.%d" % (244 + n // 65000, (n % 65000) // 250, n % 250 + 2)

    @staticmethod
    def _set_cond(pod, ctype, status, reason=None, message=None):
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        for c in conds:
            if c["type"] == ctype:
                if c["status"] != status:
                    c["lastTransitionTime"] = rfc3339()
                c["status"] = status
                for k, v in (("reason", reason), ("message", message)):
                    if v is None:
                        c.pop(k, None)
                    else:
                        c[k] = v
                return
        c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": rfc3339()}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        conds.append(c)
        order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled",
                 "DisruptionTarget"]
        conds.sort(key=lambda x: order.index(x["type"]) if x["type"] in order else 99)

    @staticmethod
    def _container_id(uid, name, restarts):
        return "containerd://" + hashlib.sha256(("%s/%s/%d" % (uid, name, restarts)).encode()).hexdigest()

    def _cstatus(self, pod, c, state, ready=False, restarts=0, last=None, started=None):
        image = c.get("image", "")
        st = {"name": c["name"], "image": image,
              "imageID": image.split("@")[0] + "@sha256:" + hashlib.sha256(image.encode()).hexdigest(),
              "ready": ready, "restartCount": restarts, "state": state, "lastState": last or {}}
        if "running" in state or "terminated" in state:
            st["containerID"] = self._container_id(pod["metadata"]["uid"], c["name"], restarts)
        st["started"] = bool(started if started is not None else "running" in state)
        return st

    def _want_ready(self, pod, c):
        v = self.ready.get((pod["metadata"]["uid"], c["name"]))
        if v is not None:
            return v
        if c.get("readinessProbe") or c.get("startupProbe"):
            return self.probe_ready_default
        return True

    def _recompute_ready(self, pod):
        st = pod["status"]
        cs = st.get("containerStatuses") or []
        sidecars = [s for s in st.get("initContainerStatuses") or []
                    if self._is_sidecar(pod, s["name"])]
        all_ready = bool(cs) and all(s["ready"] for s in cs + sidecars) and st.get("phase") == "Running"
        not_ready = [s["name"] for s in cs + sidecars if not s["ready"]]
        msg = "containers with unready status: [%s]" % " ".join(not_ready) if not_ready else None
        self._set_cond(pod, "ContainersReady", "True" if all_ready else "False",
                       None if all_ready else "ContainersNotReady", None if all_ready else msg)
        gates_ok = True
        for g in pod.get("spec", {}).get("readinessGates") or []:
            ok = any(c["type"] == g.get("conditionType") and c["status"] == "True" for c in st.get("conditions", []))
            gates_ok = gates_ok and ok
        ready = all_ready and gates_ok
        if st.get("phase") in ("Succeeded", "Failed"):
            self._set_cond(pod, "Ready", "False", "PodCompleted")
        else:
            self._set_cond(pod, "Ready", "True" if ready else "False",
                           None if ready else ("ContainersNotReady" if not all_ready else "ReadinessGatesNotReady"),
                           None if ready else (msg or "the status of pod readiness gates are not \"True\""))

    @staticmethod
    def _is_sidecar(pod, name):
        return any(c.get("name") == name and c.get("restartPolicy") == "Always"
                   for c in pod.get("spec", {}).get("initContainers") or [])

    # ---- lifecycle steps --------------------------------------------------
    def _bind(self, pod, node):
        pod["spec"]["nodeName"] = node
        self._set_cond(pod, "PodScheduled", "True")

    def _start(self, pod):
        spec, st = pod["spec"], pod.setdefault("status", {})
        node = spec["nodeName"]
        st["hostIP"] = self.node_ips[node]
        st["hostIPs"] = [{"ip": st["hostIP"]}]
        if not st.get("podIP"):
            st["podIP"] = st["hostIP"] if spec.get("hostNetwork") else self.new_pod_ip()
            st["podIPs"] = [{"ip": st["podIP"]}]
        st.setdefault("startTime", rfc3339())
        self._set_cond(pod, "PodReadyToStartContainers", "True")

    def _pending_init(self, pod):
        st, inits = pod["status"], pod["spec"].get("initContainers") or []
        st["phase"] = "Pending"
        st["initContainerStatuses"] = [
            self._cstatus(pod, c, {"running": {"startedAt": rfc3339()}} if i == 0 else
                          {"waiting": {"reason": "PodInitializing"}}) for i, c in enumerate(inits)]
        st["containerStatuses"] = [self._cstatus(pod, c, {"waiting": {"reason": "PodInitializing"}})
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "Initialized", "False", "ContainersNotInitialized",
                       "containers with incomplete status: [%s]" % " ".join(
                           c["name"] for c in inits if c.get("restartPolicy") != "Always"))
        self._recompute_ready(pod)

    def _creating(self, pod):
        st = pod["status"]
        st["phase"] = "Pending"
        st["containerStatuses"] = [self._cstatus(pod, c, {"waiting": {"reason": "ContainerCreating"}})
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "Initialized", "True")
        self._recompute_ready(pod)

    def _running(self, pod):
        st, now = pod["status"], rfc3339()
        old_init = {s["name"]: s for s in st.get("initContainerStatuses") or []}
        inits = pod["spec"].get("initContainers") or []
        if inits:
            out = []
            for c in inits:
                prev = old_init.get(c["name"], {})
                if c.get("restartPolicy") == "Always":
                    out.append(self._cstatus(pod, c, {"running": {"startedAt": now}}, self._want_ready(pod, c),
                                             prev.get("restartCount", 0)))
                else:
                    out.append(self._cstatus(pod, c, {"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
                        "containerID": self._container_id(pod["metadata"]["uid"], c["name"], 0)}},
                        False, prev.get("restartCount", 0), started=False))
            st["initContainerStatuses"] = out
        st["phase"] = "Running"
        st["containerStatuses"] = [self._cstatus(pod, c, {"running": {"startedAt": now}}, self._want_ready(pod, c))
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "PodReadyToStartContainers", "True")
        self._set_cond(pod, "Initialized", "True")
        self._set_cond(pod, "PodScheduled", "True")
        self._recompute_ready(pod)

    # ---- automatic flow -------------------------------------------------
    def pod_created(self, pod):
        """Called under the store lock after a pod was created."""
        if self.mode != "auto":
            return
        spec = pod.get("spec", {})
        if spec.get("nodeName"):
            if spec["nodeName"] in self.node_ips:
                self._schedule_start(pod)
            return
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return   # a gang scheduler that does not exist here: stays Pending
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]

        def bind():
            cur = self._current(ns, name, uid)
            if cur is None or cur["spec"].get("nodeName") or cur["metadata"].get("deletionTimestamp"):
                return
            node = self._node_for(cur)
            if node is None:
                return   # no node fits: Pending, as with the real scheduler
            cur = self._update(cur, lambda p: self._bind(p, node))
            self._schedule_start(cur)
        self.later(0, bind)

    def _node_for(self, pod):
        """The next node round robin that satisfies the pod's required pod anti-affinity on
        kubernetes.io/hostname (matchLabels terms, the pod's namespace), as the default scheduler
        would place it; None when no node does."""
        affinity = (pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}
        terms = [t for t in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
                 if t.get("topologyKey") == "kubernetes.io/hostname"]
        ns = pod["metadata"]["namespace"]
        nodes = list(self.node_ips)
        start = next(self.rr)

        def taken(node, term):
            want = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for (pns, _), other in self.store.objects[self.pods.storage_key].items():
                labels = other["metadata"].get("labels") or {}
                if (pns == ns and other["spec"].get("nodeName") == node and
                        other.get("status", {}).get("phase") not in ("Succeeded", "Failed") and
                        all(labels.get(k) == v for k, v in want.items())):
                    return True
            return False
        for i in range(len(nodes)):
            node = nodes[(start + i) % len(nodes)]
            if not any(taken(node, t) for t in terms):
                return node
        return None

    def _schedule_start(self, pod):
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        has_init = bool(pod["spec"].get("initContainers"))

        def start():
            cur = self._current(ns, name, uid)
            if cur is None or cur["metadata"].get("deletionTimestamp") or cur["status"].get("phase") != "Pending":
                return
            if cur["status"].get("containerStatuses"):
                return
            if has_init:
                cur = self._update(cur, lambda p: (self._start(p), self._pending_init(p)))
            elif self.run_delay_ms > 0:
                cur = self._update(cur, lambda p: (self._start(p), self._creating(p)))
            else:
                cur = self._update(cur, lambda p: (self._start(p), self._running(p)))
                return
            self.later(self.run_delay_ms, run)

        def run():
            cur = self._current(ns, name, uid)
            if cur is None or cur["metadata"].get("deletionTimestamp") or cur["status"].get("phase") != "Pending":
                return
            self._update(cur, self._running)
        self.later(0, start)

    def terminate(self, pod):
        """Graceful deletion: stop the containers and remove the pod."""
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]

        def finish():
            cur = self._current(ns, name, uid)
            if cur is None:
                return
            self.store.pending_termination.discard(uid)
            self.store._check_foreground(uid)
            cur = self._current(ns, name, uid)
            if cur is not None and not cur["metadata"].get("finalizers"):
                self.store._delete_now(self.pods, cur)
        self.later(self.termination_delay_ms, finish)

    # ---- test commands ----------------------------------------------------
    def action(self, ns, name, body):
        act = body.get("action")
        with self.store.lock:
            pod = self.store._find(self.pods, ns, name)
            if pod is None:
                raise ApiError.not_found(self.pods, name)
            uid = pod["metadata"]["uid"]
            containers = pod["spec"].get("containers") or []
            cname = body.get("container")
            if cname is not None and not any(c["name"] == cname for c in containers + (
                    pod["spec"].get("initContainers") or [])):
                raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
            now = rfc3339()
            if act == "run":
                if not pod["spec"].get("nodeName"):
                    node = body.get("node") or list(self.node_ips)[next(self.rr) % len(self.node_ips)]
                    if node not in self.node_ips:
                        raise ApiError.bad_request("unknown node %s" % node)
                    pod = self._update(pod, lambda p: self._bind(p, node))
                elif pod["spec"]["nodeName"] not in self.node_ips:
                    raise ApiError.bad_request("pod is bound to unknown node %s" % pod["spec"]["nodeName"])
                return self._update(pod, lambda p: (self._start(p), self._running(p)))
            if act in ("succeed", "fail", "evict"):
                code = 0 if act == "succeed" else int(body.get("exitCode", 137 if act == "evict" else 1))

                def term(p):
                    st = p.setdefault("status", {})
                    st["phase"] = "Succeeded" if act == "succeed" else "Failed"
                    old = {s["name"]: s for s in (st.get("containerStatuses") or [])
                           + (st.get("initContainerStatuses") or [])}
                    for lst in ("containerStatuses", "initContainerStatuses"):
                        specs = p["spec"].get("containers" if lst == "containerStatuses" else "initContainers") or []
                        if lst == "initContainerStatuses" and not specs:
                            continue
                        out = []
                        for c in specs:
                            prev = old.get(c["name"], {})
                            running = prev.get("state", {}).get("running")
                            if lst == "initContainerStatuses" and "terminated" in prev.get("state", {}):
                                out.append(prev)
                                continue
                            my = code if (cname is None or cname == c["name"]) else 0
                            reason = "Completed" if my == 0 else body.get("reason", "Error")
                            t = {"exitCode": my, "reason": reason,
                                 "startedAt": (running or {}).get("startedAt", now), "finishedAt": now,
                                 "containerID": self._container_id(uid, c["name"], prev.get("restartCount", 0))}
                            out.append(self._cstatus(p, c, {"terminated": t}, False, prev.get("restartCount", 0),
                                                     prev.get("lastState"), started=False))
                        st[lst] = out
                    if act == "evict":
                        st["reason"] = "Evicted"
                        st["message"] = body.get("message", "The node was low on resource: memory. ")
                        self._set_cond(p, "DisruptionTarget", "True", "TerminationByKubelet", st["message"])
                    self._recompute_ready(p)
                return self._update(pod, term)
            if act == "restart":
                def restart(p):
                    st = p.setdefault("status", {})
                    for s in st.get("containerStatuses") or []:
                        if cname is not None and s["name"] != cname:
                            continue
                        c = next(c for c in containers if c["name"] == s["name"])
                        n = s.get("restartCount", 0) + 1
                        started = (s.get("state", {}).get("running") or {}).get("startedAt", now)
                        last = {"terminated": {"exitCode": int(body.get("exitCode", 1)), "reason": "Error",
                                               "startedAt": started, "finishedAt": now,
                                               "containerID": s.get("containerID", "")}}
                        s.clear()
                        s.update(self._cstatus(p, c, {"running": {"startedAt": now}}, self._want_ready(p, c), n, last))
                    if st.get("podIP") and not p["spec"].get("hostNetwork"):
                        st["podIP"] = self.new_pod_ip()
                        st["podIPs"] = [{"ip": st["podIP"]}]
                    st["phase"] = "Running"
                    st.pop("reason", None)
                    st.pop("message", None)
                    self._recompute_ready(p)
                    for k in [k for k in self.store.logs if k[:2] == (ns, name)
                              and (cname is None or k[2] == cname)]:
                        self.store.prev_logs[k] = self.store.logs.pop(k)
                return self._update(pod, restart)
            if act == "ready":
                ready = bool(body.get("ready", True))
                for c in containers + (pod["spec"].get("initContainers") or []):
                    if cname is None or c["name"] == cname:
                        self.ready[(uid, c["name"])] = ready

                def set_ready(p):
                    st = p.setdefault("status", {})
                    for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
                        if (cname is None or s["name"] == cname) and "running" in s.get("state", {}):
                            s["ready"] = ready
                    if st.get("phase") == "Running":
                        self._recompute_ready(p)
                return self._update(pod, set_ready)
            if act == "unschedulable":
                msg = body.get("message", "0/%d nodes are available: insufficient resources." % len(self.node_ips))
                return self._update(pod, lambda p: self._set_cond(p, "PodScheduled", "False", "Unschedulable", msg))
            raise ApiError.bad_request("unknown action %r" % (act,))

    def pod_deleted(self, uid):
        """Called under the store lock when a pod left storage (the podman kubelet kills it)."""

    def bind(self, pod, node):
        if pod["spec"].get("nodeName"):
            raise ApiError.conflict(self.pods, pod["metadata"]["name"], "pod %s is already assigned to node "
                                    '"%s"' % (pod["metadata"]["name"], pod["spec"]["nodeName"]))
        pod = self._update(pod, lambda p: self._bind(p, node))
        if node in self.node_ips and self.mode == "auto":
            self._schedule_start(pod)
        return pod


# --------------------------------------------------------------------------
# Tables (kubectl get asks for them)
# --------------------------------------------------------------------------


def _col(name, typ="string", fmt="", desc="", priority=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc or name, "priority": priority}


def pod_status_reason(pod):
    st = pod.get("status", {})
    reason = st.get("reason") or st.get("phase") or "Unknown"
    inits = pod.get("spec", {}).get("initContainers") or []
    initializing = False
    for i, s in enumerate(st.get("initContainerStatuses") or []):
        state = s.get("state", {})
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "running" in state and s.get("started") and Kubelet._is_sidecar(pod, s["name"]):
            continue
        initializing = True
        if "terminated" in state:
            reason = "Init:" + (state["terminated"].get("reason") or "ExitCode:%d" % state["terminated"]["exitCode"])
        elif "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = "Init:%d/%d" % (i, len(inits))
        break
    if not initializing:
        running = False
        for s in reversed(st.get("containerStatuses") or []):
            state = s.get("state", {})
            if "waiting" in state and state["waiting"].get("reason"):
                reason = state["waiting"]["reason"]
            elif "terminated" in state:
                reason = state["terminated"].get("reason") or "ExitCode:%d" % state["terminated"]["exitCode"]
            elif "running" in state and s.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def table_for(rt, objs, include, list_meta):
    now = time.time()

    def age(o):
        t = parse_time(o["metadata"].get("creationTimestamp"))
        return "<unknown>" if t is None else human_age(now - t)
    key = rt.storage_key
    if key == "/pods":
        cols = [_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "string"), _col("Age"),
                _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
                _col("Readiness Gates", priority=1)]

        def row(o):
            st, spec = o.get("status", {}), o.get("spec", {})
            cs = st.get("containerStatuses") or []
            total = len(spec.get("containers") or [])
            ready = sum(1 for s in cs if s.get("ready"))
            restarts = sum(s.get("restartCount", 0) for s in cs)
            gates = spec.get("readinessGates") or []
            return [o["metadata"]["name"], "%d/%d" % (ready, total), pod_status_reason(o), str(restarts), age(o),
                    st.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
                    st.get("nominatedNodeName") or "<none>", "%d/%d" % (0, len(gates)) if gates else "<none>"]
    elif key == "/namespaces":
        cols = [_col("Name", fmt="name"), _col("Status"), _col("Age")]

        def row(o):
            return [o["metadata"]["name"], _g(o, "status", "phase"), age(o)]
    elif key == "/nodes":
        cols = [_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version")]

        def row(o):
            return [o["metadata"]["name"], "Ready", "<none>", age(o), _g(o, "status", "nodeInfo", "kubeletVersion")]
    elif key == "/services":
        cols = [_col("Name", fmt="name"), _col("Type"), _col("Cluster-IP"), _col("External-IP"), _col("Port(s)"),
                _col("Age")]

        def row(o):
            spec = o.get("spec", {})
            ports = ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP")) for p in spec.get("ports") or [])
            return [o["metadata"]["name"], spec.get("type", ""), spec.get("clusterIP", ""), "<none>",
                    ports or "<none>", age(o)]
    elif rt.printer_columns:
        pcs = rt.printer_columns
        cols = [_col("Name", fmt="name")] + [_col(c.get("name", ""), c.get("type", "string"), c.get("format", ""),
                                                   c.get("description", ""), c.get("priority", 0)) for c in pcs]

        def row(o):
            cells = [o["metadata"]["name"]]
            for c in pcs:
                v = simple_jsonpath(o, c.get("jsonPath", ""))
                if c.get("type") == "date" and isinstance(v, str):
                    t = parse_time(v)
                    v = human_age(now - t) if t is not None else v
                cells.append(v)
            return cells
    else:
        cols = [_col("Name", fmt="name"), _col("Age")]

        def row(o):
            return [o["metadata"]["name"], age(o)]
    rows = []
    for o in objs:
        r = {"cells": row(o)}
        if include == "Object":
            r["object"] = o
        elif include != "None":
            r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": o["metadata"]}
        rows.append(r)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": cols, "rows": rows}


def simple_jsonpath(obj, path):
    cur = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path.strip().lstrip(".")):
        if part.startswith("["):
            idx = int(part[1:-1])
            cur = cur[idx] if isinstance(cur, list) and idx < len(cur) else None
        else:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is None:
            return None
    return cur


# --------------------------------------------------------------------------
# Minimal OpenAPI v2 document (gnostic protobuf / JSON)
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------


FAULT_KEYS = {"latencyMs", "failNext", "code", "retryAfter", "match", "dropWatches", "expireWatches", "compact",
              "truncateNext", "abort", "garbageNext", "hugeNext", "bytes", "wrongContentTypeNext", "tokens",
              "reset"}
CONFIG_KEYS = {"kubelet", "runDelayMs", "terminationDelayMs", "bookmarkIntervalMs", "probeReadyDefault",
               "watchCacheSize", "podNetwork"}


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency_ms = 0
        self.rules = []       # dicts: kind, remaining, method, prefix, code, retryAfter, bytes, abort

    def add(self, body):
        with self.lock:
            if body.get("reset"):
                self.latency_ms = 0
                self.rules = []
            if "latencyMs" in body:
                self.latency_ms = max(0, int(body["latencyMs"]))
            method, prefix = "*", "/"
            if body.get("match"):
                parts = str(body["match"]).split(None, 1)
                if len(parts) == 2:
                    method, prefix = parts[0].upper(), parts[1]
                elif parts[0].startswith("/"):
                    prefix = parts[0]
                else:
                    method = parts[0].upper()
            for key, kind in (("failNext", "fail"), ("truncateNext", "truncate"), ("garbageNext", "garbage"),
                              ("hugeNext", "huge"), ("wrongContentTypeNext", "wrongct")):
                if int(body.get(key, 0) or 0) > 0:
                    code = int(body.get("code", 500))
                    if kind == "fail" and not 400 <= code <= 599:
                        raise ApiError.bad_request("code must be 4xx or 5xx")
                    self.rules.append({"kind": kind, "remaining": int(body[key]), "method": method,
                                       "prefix": prefix, "code": code, "retryAfter": body.get("retryAfter"),
                                       "bytes": int(body.get("bytes", 8 * 1024 * 1024)),
                                       "abort": bool(body.get("abort"))})

    def take(self, method, path, is_watch):
        with self.lock:
            for r in self.rules:
                if r["remaining"] <= 0:
                    continue
                m = r["method"]
                if m == "WATCH":
                    if not is_watch:
                        continue
                elif m != "*" and m != method:
                    continue
                if not path.startswith(r["prefix"]):
                    continue
                r["remaining"] -= 1
                rule = dict(r)
                self.rules = [x for x in self.rules if x["remaining"] > 0]
                return rule
        return None

    def state(self):
        with self.lock:
            return {"latencyMs": self.latency_ms, "rules": [dict(r) for r in self.rules]}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if self.fake.verbose:
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    sys_version = ""
    timeout = 300

    # ---- plumbing ---------------------------------------------------------
    def setup(self):
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
        super().setup()
        self.fake = self.server.fake
        with self.fake.conn_lock:
            self.fake.connections.add(self.request)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with self.fake.conn_lock:
            self.fake.connections.discard(self.request)

    def log_message(self, fmt, *args):
        if self.fake.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _raw_write(self, data):
        self.wfile.write(data)

    def send_body(self, code, body, ctype="application/json", headers=None):
        if isinstance(body, (dict, list)):
            data = (dumps(body) + "\n").encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        mal = getattr(self, "malform", None)
        self.malform = None
        abort = False
        if mal:
            kind = mal["kind"]
            if kind == "truncate":
                cut = data[:max(1, len(data) // 2)]
                if mal["abort"]:
                    abort = True
                else:
                    data = cut
            elif kind == "garbage":
                code, ctype, data = 200, "application/json", b"\x00\xff<<garbage}}\x9c not json at all {{["
            elif kind == "huge":
                return self._send_huge(mal["bytes"])
            elif kind == "wrongct":
                code, ctype = 200, "text/html; charset=utf-8"
                data = b"<html><head><title>502 Bad Gateway</title></head><body>proxy error</body></html>\n"
        self.status_code = code
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(data)))
        if getattr(self, "force_close", False):
            self.send_header("Connection", "close")
            self.close_connection = True
        if self.command == "HEAD":
            self.end_headers()
        elif abort:
            self.end_headers()
            self._raw_write(data[:max(1, len(data) // 2)])
            self._abort()
        else:
            # headers and body in one write: no Nagle / delayed-ACK stall
            self._headers_buffer.append(b"\r\n")
            self._headers_buffer.append(data)
            self.flush_headers()

    def _send_huge(self, n):
        self.status_code = 200
        head = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","padding":"'
        tail = b'"}'
        n = max(n, len(head) + len(tail))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self._raw_write(head)
        left = n - len(head) - len(tail)
        chunk = b"x" * 65536
        while left > 0:
            self._raw_write(chunk[:min(left, 65536)])
            left -= min(left, 65536)
        self._raw_write(tail)

    def _client_gone(self):
        """True when the peer has closed the connection (peeks at the raw socket)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return socket.socket.recv(self.connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True

    def _abort(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_error_status(self, e):
        self.send_body(e.code, e.body(), headers=e.headers)

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                if len(data) + size > MAX_BODY:
                    self.force_close = True
                    raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
                data += self.rfile.read(size)
                self.rfile.readline(3)
            return bytes(data)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError:
            self.force_close = True
            raise ApiError.bad_request("invalid Content-Length")
        if n > MAX_BODY:
            if n <= 64 * 1024 * 1024:
                left = n
                while left > 0:
                    got = self.rfile.read(min(left, 1 << 20))
                    if not got:
                        break
                    left -= len(got)
            else:
                self.force_close = True
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        return self.rfile.read(n)

    def json_body(self, raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError.bad_request("the body of the request was in an unknown format: %s" % e)

    # ---- main dispatch ------------------------------------------------------
    def dispatch(self):
        t0 = time.time()
        self.status_code = 0
        self.malform = None
        self.force_close = False
        self.is_watch = False
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        fake = self.fake
        try:
            try:
                raw = self.read_body()
            except ApiError as e:
                self.send_error_status(e)
                return
            if path.startswith("/fake/"):
                return self.control(path, raw)
            with fake.req_lock:
                fake.in_flight += 1
            counted = True
            try:
                if fake.faults.latency_ms:
                    time.sleep(fake.faults.latency_ms / 1000.0)
                if not self.authenticated():
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                self.is_watch = self.command == "GET" and self._wants_watch(path, params)
                if self.is_watch:  # a watch lasts long: the log must not wait for it
                    with fake.req_lock:
                        fake.in_flight -= 1
                        fake.req_lock.notify_all()
                    counted = False
                rule = fake.faults.take(self.command, path, self.is_watch)
                if rule and rule["kind"] == "fail":
                    code = rule["code"]
                    reason = REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
                    msg = {429: "Too many requests, please try again later.",
                           503: "The server is currently unable to handle the request",
                           500: "Internal error occurred: injected fault",
                           504: "The server was unable to return a response in the time allotted, but may "
                                "still be processing the request"}.get(code, "injected fault")
                    headers, details = {}, None
                    ra = rule.get("retryAfter")
                    if code == 429 and ra is None:
                        ra = 1
                    if ra is not None and code in (429, 503):
                        headers["Retry-After"] = str(int(ra))
                        details = {"retryAfterSeconds": int(ra)}
                    if code == 500:
                        details = {"causes": [{"message": "injected fault"}]}
                    raise ApiError(code, reason, msg, details, headers)
                self.malform = rule
                self.route(path, params, raw)
            except ApiError as e:
                self.send_error_status(e)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
                self.close_connection = True
            except Exception as e:  # a bug in the fake must still answer like a server
                import traceback
                traceback.print_exc()
                try:
                    self.send_body(500, status_body(500, "InternalError", "Internal error occurred: %r" % (e,)))
                except OSError:
                    self.close_connection = True
            finally:  # always logged (and uncounted), even when the client went away mid-answer
                fake.log_request(self.command, path, url.query, self.status_code, t0, self.is_watch, counted)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def authenticated(self):
        tokens = self.fake.tokens
        if not tokens:
            return True
        if isinstance(self.request, ssl.SSLSocket) and self.fake.client_ca:
            try:
                if self.request.getpeercert():
                    return True
            except (ValueError, ssl.SSLError):
                pass
        auth = self.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip() in tokens
        return False

    @staticmethod
    def _wants_watch(path, params):
        if "/watch/" in path:
            return True
        try:
            return parse_bool(params.get("watch"))
        except ApiError:
            return False

    def route(self, path, params, raw):
        fake, store = self.fake, self.fake.store
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if self.command not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ApiError.not_allowed()
        if not parts:
            return self.send_body(200, {"paths": ["/api", "/api/v1", "/apis", "/version", "/openapi/v2"]})
        if parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
            return self.send_body(200, "ok", "text/plain; charset=utf-8")
        if parts == ["version"]:
            major, minor = re.match(r"v(\d+)\.(\d+)", fake.server_version).groups()
            return self.send_body(200, {"major": major, "minor": minor, "gitVersion": fake.server_version,
                                        "gitCommit": "0" * 40, "gitTreeState": "clean",
                                        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
                                        "compiler": "gc", "platform": "linux/amd64"})
        if parts[0] == "openapi":
            if parts[1:] == ["v2"]:
                accept = self.headers.get("Accept", "")
                if "protobuf" in accept:
                    return self.send_body(200, openapi_v2_protobuf(fake.server_version),
                                          "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
                return self.send_body(200, {"swagger": "2.0", "info": {"title": "Kubernetes",
                                                                       "version": fake.server_version},
                                            "paths": {}, "definitions": {}})
            raise ApiError.path_not_found()
        with store.lock:
            reg = store.registry
            if parts == ["api"]:
                return self.send_body(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": [
                                                {"clientCIDR": "0.0.0.0/0",
                                                 "serverAddress": "%s:%d" % fake.address}]})
            if parts == ["apis"]:
                return self.send_body(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                            "groups": [self._group_doc(g) for g in reg.groups()]})
            if parts[0] == "apis" and len(parts) == 2:
                if not reg.versions(parts[1]):
                    raise ApiError.path_not_found()
                doc = self._group_doc(parts[1])
                doc.update(kind="APIGroup", apiVersion="v1")
                return self.send_body(200, doc)
            if parts[0] == "api":
                group, version, rest = "", parts[1], parts[2:]
            elif parts[0] == "apis" and len(parts) >= 3:
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                raise ApiError.path_not_found()
            if not rest:
                rts = reg.gv_resources(group, version)
                if not rts:
                    raise ApiError.path_not_found()
                return self.send_body(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                            "groupVersion": group + "/" + version if group else version,
                                            "resources": [d for rt in rts for d in rt.discovery()]})
        legacy_watch = False
        if rest[0] == "watch":
            legacy_watch, rest = True, rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError.path_not_found()
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        with store.lock:
            rt = store.registry.get(group, version, plural)
        if rt is None or (not rt.namespaced and ns is not None) or \
                (rt.namespaced and ns is None and name is not None):
            raise ApiError.path_not_found()
        if sub is not None and sub not in rt.subresources:
            raise ApiError.path_not_found()
        if name is not None and rt.namespaced is False:
            ns = None
        dry_run = params.get("dryRun") == "All"
        m = self.command
        if legacy_watch or (m == "GET" and sub is None and parse_bool(params.get("watch"))):
            if m != "GET" or sub is not None:
                raise ApiError.not_allowed()
            if name is not None:
                sel = "metadata.name=" + name
                params["fieldSelector"] = params["fieldSelector"] + "," + sel if params.get("fieldSelector") else sel
            return self.serve_watch(rt, ns, params)
        if m == "GET":
            if name is None:
                items, list_meta = store.list(rt, ns, params)
                return self.send_object_list(rt, items, list_meta)
            if sub == "log":
                return self.serve_log(ns, name, params)
            return self.send_object(rt, 200, store.get(rt, ns, name))
        if m == "POST":
            if name is None:
                if rt.namespaced and ns is None:
                    raise ApiError.not_allowed()
                obj = store.create(rt, ns, self.json_body(raw), dry_run)
                return self.send_object(rt, 201, obj)
            if sub == "binding":
                return self.pod_binding(rt, ns, name, self.json_body(raw) or {})
            if sub == "eviction":
                body = self.json_body(raw) or {}
                store.delete(rt, ns, name, body.get("deleteOptions") or {}, dry_run)
                return self.send_body(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                            "status": "Success", "code": 201})
            raise ApiError.not_allowed()
        if m in ("PUT", "PATCH"):
            if name is None or sub in ("log", "binding", "eviction"):
                raise ApiError.not_allowed()
            sr = "status" if sub == "status" else None
            if m == "PUT":
                obj = store.update(rt, ns, name, self.json_body(raw), sr, dry_run)
            else:
                obj = store.patch(rt, ns, name, raw, self.headers.get("Content-Type"), sr, dry_run)
            return self.send_object(rt, 200, obj)
        if m == "DELETE":
            body = self.json_body(raw) or {}
            if not isinstance(body, dict):
                raise ApiError.bad_request("DeleteOptions must be an object")
            opts = dict(body)
            if "propagationPolicy" in params:
                opts["propagationPolicy"] = params["propagationPolicy"]
            if "gracePeriodSeconds" in params:
                try:
                    opts["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
                except ValueError:
                    raise ApiError.bad_request("invalid gracePeriodSeconds")
            if "orphanDependents" in params:
                opts["orphanDependents"] = parse_bool(params["orphanDependents"])
            if name is None:
                out = store.delete_collection(rt, ns, params, opts)
                with store.lock:
                    meta = {"resourceVersion": str(store.rv)}
                return self.send_object_list(rt, out, meta)
            if sub is not None:
                raise ApiError.not_allowed()
            obj = store.delete(rt, ns, name, opts, dry_run)
            return self.send_object(rt, 200, obj)
        raise ApiError.not_allowed()

    def _group_doc(self, g):
        vs = self.fake.store.registry.versions(g)
        gvs = [{"groupVersion": g + "/" + v, "version": v} for v in vs]
        return {"name": g, "versions": gvs, "preferredVersion": gvs[0]}

    def _wants_table(self):
        return "as=Table" in self.headers.get("Accept", "")

    @staticmethod
    def out_obj(rt, obj):
        if rt.custom and obj.get("apiVersion") != rt.api_version:
            obj = dict(obj, apiVersion=rt.api_version)
        return obj

    def send_object(self, rt, code, obj):
        if self._wants_table() and self.command == "GET":
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return self.send_body(code, table_for(rt, [obj], self._include(), meta))
        self.send_body(code, self.out_obj(rt, obj))

    def _include(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return (q.get("includeObject") or ["Metadata"])[-1]

    def send_object_list(self, rt, items, list_meta):
        if self._wants_table() and self.command == "GET":
            return self.send_body(200, table_for(rt, items, self._include(), list_meta))
        if rt.custom:
            out = [self.out_obj(rt, o) for o in items]
        else:
            out = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        self.send_body(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": list_meta,
                             "items": out})

    def pod_binding(self, rt, ns, name, body):
        if rt.storage_key != "/pods":
            raise ApiError.not_allowed()
        node = (body.get("target") or {}).get("name")
        if not node:
            raise ApiError.invalid(rt, name, [required("target.name")])
        store = self.fake.store
        with store.lock:
            pod = store._find(rt, ns, name)
            if pod is None:
                raise ApiError.not_found(rt, name)
            self.fake.kubelet.bind(pod, node)
        self.send_body(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "code": 201})

    # ---- watch ----------------------------------------------------------------
    def _chunk(self, data):
        self._raw_write(b"%x\r\n%s\r\n" % (len(data), data))

    def serve_watch(self, rt, ns, params):
        store, fake = self.fake.store, self.fake
        try:
            timeout = int(params.get("timeoutSeconds") or 0)
        except ValueError:
            raise ApiError.bad_request("invalid timeoutSeconds")
        if timeout <= 0:
            timeout = fake.min_request_timeout * (1 + random.random())
        bookmarks = parse_bool(params.get("allowWatchBookmarks"))
        self.watch_table = self._wants_table()
        w, initial = store.open_watch(rt, ns, params, self.connection)
        mal, self.malform = self.malform, None
        if mal and mal["kind"] == "wrongct":
            if w:
                store.close_watch(w)
            self.malform = mal
            return self.send_body(200, "")
        self.status_code = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        try:
            if mal:
                kind = mal["kind"]
                if kind == "huge":
                    pad = "x" * max(0, mal["bytes"] - 120)
                    self._chunk(dumps({"type": "ADDED", "object": {
                        "kind": rt.kind, "apiVersion": rt.api_version,
                        "metadata": {"name": "huge", "annotations": {"padding": pad}}}}).encode() + b"\n")
                else:
                    line = dumps({"type": "ADDED", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                              "metadata": {"name": "x", "resourceVersion": "1"}}})
                    self._chunk(line.encode()[:len(line) // 2] if kind == "truncate"
                                else b"\x00\xff<<garbage>>{{[\n")
                return self._abort()
            for etype, obj in initial:
                self._chunk(self._event_line(rt, etype, obj))
            if w is None:
                self._raw_write(b"0\r\n\r\n")
                return
            fake.register_watch(w)
            interval = fake.bookmark_interval
            next_bm = time.monotonic() + interval
            while True:
                with w.cond:
                    while not (w.queue or w.dropped or w.expired or w.closed):
                        now = time.monotonic()
                        wake = min(deadline, next_bm) if bookmarks else deadline
                        if now >= wake:
                            break
                        if not w.cond.wait(min(wake - now, 1.0)) and self._client_gone():
                            w.dropped = True
                    events = list(w.queue)
                    w.queue.clear()
                    dropped, expired, closed = w.dropped, w.expired, w.closed
                if dropped:
                    return self._abort()
                for etype, obj in events:
                    self._chunk(self._event_line(rt, etype, obj))
                if expired:
                    with store.lock:
                        err = status_body(410, "Expired", "too old resource version: %d (%d)"
                                          % (store.rv, store.rv))
                    self._chunk(self._event_line(rt, "ERROR", err))
                    break
                if closed:
                    break
                now = time.monotonic()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bm:
                    with store.lock:
                        with w.cond:
                            rv = store.rv if not w.queue else None
                    if rv is not None:
                        self._chunk(self._event_line(rt, "BOOKMARK", store.bookmark_object(rt, rv)))
                    interval = fake.bookmark_interval
                    next_bm = now + interval
            self._raw_write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if w is not None:
                store.close_watch(w)
                fake.unregister_watch(w)

    def _event_line(self, rt, etype, obj):
        if etype not in ("ERROR", "BOOKMARK"):
            obj = self.out_obj(rt, obj)
            if self.watch_table:
                obj = table_for(rt, [obj], self._include(),
                                {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        return (dumps({"type": etype, "object": obj}) + "\n").encode()

    # ---- pod logs ---------------------------------------------------------------
    def serve_log(self, ns, name, params):
        store = self.fake.store
        rt = store.registry.get("", "v1", "pods")
        follow = parse_bool(params.get("follow"))
        previous = parse_bool(params.get("previous"))
        timestamps = parse_bool(params.get("timestamps"))
        try:
            tail = int(params["tailLines"]) if params.get("tailLines") else None
            limit = int(params["limitBytes"]) if params.get("limitBytes") else None
            since = int(params["sinceSeconds"]) if params.get("sinceSeconds") else None
        except ValueError:
            raise ApiError.bad_request("invalid log options")
        with store.lock:
            pod = store._find(rt, ns, name)
            if pod is None:
                raise ApiError.not_found(rt, name)
            uid = pod["metadata"]["uid"]
            names = [c["name"] for c in pod["spec"].get("containers") or []]
            all_names = names + [c["name"] for c in pod["spec"].get("initContainers") or []]
            cname = params.get("container")
            if not cname:
                if len(names) != 1:
                    raise ApiError.bad_request("a container name must be specified for pod %s, choose one of: "
                                               "[%s]" % (name, " ".join(names)))
                cname = names[0]
            if cname not in all_names:
                raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
            if not pod["spec"].get("nodeName"):
                raise ApiError.bad_request("pod %s does not have a host assigned" % name)
            st = pod.get("status", {})
            cs = next((s for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
                       if s["name"] == cname), None)
            state = (cs or {}).get("state", {})
            if cs is None or ("waiting" in state and not cs.get("restartCount")):
                reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
                raise ApiError.bad_request('container "%s" in pod "%s" is waiting to start: %s'
                                           % (cname, name, reason))
            key = (ns, name, cname)
            if previous:
                if key not in store.prev_logs:
                    raise ApiError.bad_request('previous terminated container "%s" in pod "%s" not found'
                                               % (cname, name))
                lines = list(store.prev_logs[key])
                follow = False
            else:
                lines = list(store.logs.get(key, []))
            seen = len(lines)  # counted with the snapshot: a line appended after it must be followed
            restarts = (cs or {}).get("restartCount", 0)  # a followed log ends with its container's run
        if since is not None:
            cutoff = time.time() - since
            lines = [x for x in lines if x[0] >= cutoff]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []

        def fmt(entries):
            return b"".join(((rfc3339nano(t) + " ") if timestamps else "").encode() + text.encode()
                            for t, text in entries)
        data = fmt(lines)
        if limit is not None:
            data = data[:limit]
        if not follow:
            return self.send_body(200, data, "text/plain")
        self.status_code = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = len(data)
        try:
            if data:
                self._chunk(data)
            while limit is None or sent < limit:
                with store.changed:
                    pod = store._find(rt, ns, name)
                    cur = store.logs.get(key, []) if pod is not None and pod["metadata"]["uid"] == uid else []
                    new = cur[seen:] if len(cur) >= seen else []
                    seen = len(cur)
                    now_cs = next((s for s in (pod or {}).get("status", {}).get("containerStatuses") or []
                                   if s["name"] == cname), {}) if pod is not None else {}
                    done = pod is None or pod["metadata"]["uid"] != uid or \
                        pod["status"].get("phase") in ("Succeeded", "Failed") or \
                        now_cs.get("restartCount", 0) != restarts
                    if not new and not done:
                        if not store.changed.wait(0.5) and self._client_gone():
                            break
                        continue
                if new:
                    chunk = fmt(new)
                    if limit is not None:
                        chunk = chunk[:limit - sent]
                    sent += len(chunk)
                    self._chunk(chunk)
                if done and not new:
                    break
            self._raw_write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    # ---- control API ---------------------------------------------------------------
    @staticmethod
    def _known_keys(body, known):
        unknown = sorted(set(body) - known)
        if unknown:
            raise ApiError.bad_request("unknown keys %s (known: %s)" % (unknown, sorted(known)))

    def control(self, path, raw):
        fake = self.fake
        parts = [p for p in path.split("/") if p][2:]
        try:
            body = self.json_body(raw) or {}
            if not isinstance(body, dict):
                raise ApiError.bad_request("body must be a JSON object")
            m = self.command
            if parts == ["faults"]:
                if m == "POST":
                    self._known_keys(body, FAULT_KEYS)
                    if "tokens" in body:
                        fake.set_tokens(body["tokens"])
                    fake.faults.add(body)
                    if body.get("compact"):
                        fake.store.compact()
                    if body.get("dropWatches"):
                        fake.drop_watches()
                    if body.get("expireWatches"):
                        fake.expire_watches()
                return self.send_body(200, dict(fake.faults.state(), tokens=sorted(fake.tokens)))
            if parts == ["tokens"] and m == "POST":
                fake.set_tokens(body.get("tokens") or [])
                return self.send_body(200, {"tokens": sorted(fake.tokens)})
            if parts == ["requests"]:
                with fake.req_lock:
                    fake.req_lock.wait_for(lambda: fake.in_flight == 0, timeout=2.0)
                    if m == "DELETE":
                        fake.requests.clear()
                        return self.send_body(200, {"requests": []})
                    return self.send_body(200, {"requests": list(fake.requests)})
            if parts == ["config"]:
                if m == "POST":
                    self._known_keys(body, CONFIG_KEYS)
                    fake.configure(body)
                return self.send_body(200, fake.config())
            if parts == ["state"]:
                with fake.store.lock:
                    return self.send_body(200, {
                        "resourceVersion": str(fake.store.rv), "watches": len(fake.store.watchers),
                        "objects": {k: len(v) for k, v in fake.store.objects.items() if v}})
            if parts == ["seed"] and m == "POST":
                return self.send_body(200, fake.seed(body))
            if len(parts) in (4, 5) and parts[0] == "namespaces" and parts[2] == "pods" and m == "POST":
                ns, name = parts[1], parts[3]
                if len(parts) == 4:
                    pod = fake.kubelet.action(ns, name, body)
                    return self.send_body(200, pod)
                if parts[4] == "log":
                    fake.append_log(ns, name, body)
                    return self.send_body(200, {"kind": "Status", "status": "Success"})
            raise ApiError.path_not_found()
        except ApiError as e:
            self.send_error_status(e)
        except (ValueError, TypeError, KeyError) as e:
            self.send_error_status(ApiError.bad_request("bad control request: %r" % (e,)))


# --------------------------------------------------------------------------
# The server object
# --------------------------------------------------------------------------


class FakeApiServer:
    def __init__(self, host="127.0.0.1", port=0, tls_cert=None, tls_key=None, client_ca=None, tokens=None,
                 kubelet="auto", watch_cache_size=1000, bookmark_interval=1.0, nodes=4, run_delay_ms=0,
                 server_version="v1.32.0", min_request_timeout=1800, verbose=False):
        if kubelet not in ("auto", "manual", "podman"):
            raise ValueError("kubelet must be auto, manual or podman")
        self.host, self.port = host, port
        self.tls_cert, self.tls_key, self.client_ca = tls_cert, tls_key, client_ca
        self.tokens = set(tokens or [])
        self.kubelet_mode, self.run_delay_ms = kubelet, run_delay_ms
        self.watch_cache_size = max(1, int(watch_cache_size))
        self.bookmark_interval = float(bookmark_interval)
        self.server_version, self.min_request_timeout = server_version, min_request_timeout
        self.verbose = verbose
        self.faults = Faults()
        self.requests = collections.deque(maxlen=100000)
        # A Condition so that reading the request log can wait for requests still being answered:
        # a client may see its response before the handler gets to log it.
        self.req_lock = threading.Condition()
        self.in_flight = 0
        self.conn_lock = threading.Lock()
        self.connections = set()
        self.open_watches = set()
        self.cluster_ips = itertools.count(1)
        self.root_ca_pem = None
        self.store = Store(self)
        self.gateway_httpd = None
        if kubelet == "podman":
            # Pods run as real containers (podman_kubelet.py). They reach the API server at the
            # pod network's gateway, over TLS as in-cluster clients require, with a certificate
            # made here for both addresses unless one was given.
            from podman_kubelet import make_kubelet_class
            self.kubelet = make_kubelet_class(Kubelet)(self, nodes)
            self.kubelet_mode = "auto"
            if not self.tls_cert:
                self.tls_cert, self.tls_key = self._self_signed(self.kubelet.root, ["127.0.0.1", self.kubelet.gateway])
            with open(self.tls_cert) as f:
                self.root_ca_pem = f.read()
        else:
            self.kubelet = Kubelet(self, nodes)
        self.httpd = None
        self.thread = None
        self._seed_cluster()

    # ---- lifecycle ------------------------------------------------------------
    @staticmethod
    def _self_signed(directory, ips):
        cert, key = os.path.join(directory, "apiserver.crt"), os.path.join(directory, "apiserver.key")
        import subprocess
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=fake-apiserver",
                        "-addext", "subjectAltName=" + ",".join(["IP:" + ip for ip in ips] +
                                                               ["DNS:kubernetes.default.svc", "DNS:localhost"])],
                       check=True, capture_output=True)
        return cert, key

    def _listen(self, host, port):
        httpd = _HTTPServer((host, port), Handler, bind_and_activate=True)
        httpd.fake = self
        if self.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
            ctx.set_alpn_protocols(["http/1.1"])
            if self.client_ca:
                ctx.load_verify_locations(self.client_ca)
                ctx.verify_mode = ssl.CERT_OPTIONAL
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                         name="fake-apiserver-%s" % host, daemon=True).start()
        return httpd

    def start(self):
        self.httpd = self._listen(self.host, self.port)
        self.address = self.httpd.server_address[:2]
        if self.kubelet.gateway:
            # The pods' way in: the pod network's gateway only, not every address of the host.
            self.gateway_httpd = self._listen(self.kubelet.gateway, 0)
            self.kubelet.api_port = self.gateway_httpd.server_address[1]
        self.kubelet.start()
        return self

    @property
    def url(self):
        scheme = "https" if self.tls_cert else "http"
        return "%s://%s:%d" % (scheme, self.address[0], self.address[1])

    def stop(self):
        if self.httpd is None:
            return
        self.httpd.shutdown()
        if self.gateway_httpd is not None:
            self.gateway_httpd.shutdown()
            self.gateway_httpd.server_close()
        self.kubelet.stop()
        self.drop_watches()
        with self.conn_lock:
            conns = list(self.connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.httpd.server_close()
        self.httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- cluster state --------------------------------------------------------------
    def _seed_cluster(self):
        st, reg = self.store, self.store.registry
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            st.create(reg.get("", "v1", "namespaces"), None, {"metadata": {"name": ns}})
        for node, ip in self.kubelet.node_ips.items():
            st.create(reg.get("", "v1", "nodes"), None, {
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"}},
                "spec": {},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": node}],
                           "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                           "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "kubelet is posting ready status",
                                           "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}],
                           "nodeInfo": {"kubeletVersion": self.server_version, "architecture": "amd64",
                                        "operatingSystem": "linux", "containerRuntimeVersion": "containerd://1.7.0",
                                        "kernelVersion": "6.1.0", "osImage": "fake", "kubeProxyVersion": "",
                                        "machineID": "", "systemUUID": "", "bootID": ""}}})

    def next_cluster_ip(self):
        return next(self.cluster_ips)

    def set_tokens(self, tokens):
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ApiError.bad_request("tokens must be a list of strings")
        self.tokens = set(tokens)

    def log_request(self, method, path, query, code, t0, watch, counted=False):
        with self.req_lock:
            self.requests.append({"method": method, "path": path, "query": query, "code": code,
                                  "time": t0, "durationMs": round((time.time() - t0) * 1000, 3), "watch": watch})
            if counted:
                self.in_flight -= 1
                self.req_lock.notify_all()

    def register_watch(self, w):
        with self.conn_lock:
            self.open_watches.add(w)

    def unregister_watch(self, w):
        with self.conn_lock:
            self.open_watches.discard(w)

    def drop_watches(self):
        with self.store.lock:
            ws = list(self.store.watchers)
            self.store.watchers.clear()
        for w in ws:
            w.signal(dropped=True)
            try:
                w.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def expire_watches(self):
        with self.store.lock:
            ws = list(self.store.watchers)
            self.store.watchers.clear()
        for w in ws:
            w.signal(expired=True)

    def configure(self, body):
        k = self.kubelet
        if "kubelet" in body:
            if body["kubelet"] not in ("auto", "manual") or k.gateway:
                raise ApiError.bad_request("kubelet must be auto or manual (a podman kubelet stays one)")
            k.mode = self.kubelet_mode = body["kubelet"]
        if "runDelayMs" in body:
            k.run_delay_ms = self.run_delay_ms = max(0, int(body["runDelayMs"]))
        if "terminationDelayMs" in body:
            k.termination_delay_ms = max(0, int(body["terminationDelayMs"]))
        if "bookmarkIntervalMs" in body:
            self.bookmark_interval = max(0.01, int(body["bookmarkIntervalMs"]) / 1000.0)
        if "probeReadyDefault" in body:
            k.probe_ready_default = bool(body["probeReadyDefault"])
        if "watchCacheSize" in body:
            with self.store.lock:
                self.watch_cache_size = self.store.cache_size = max(1, int(body["watchCacheSize"]))
        if "podNetwork" in body:
            if body["podNetwork"] not in ("cluster", "loopback"):
                raise ApiError.bad_request("podNetwork must be cluster or loopback")
            k.pod_network = body["podNetwork"]

    def config(self):
        k = self.kubelet
        return {"kubelet": k.mode, "runDelayMs": k.run_delay_ms, "terminationDelayMs": k.termination_delay_ms,
                "bookmarkIntervalMs": int(self.bookmark_interval * 1000), "probeReadyDefault": k.probe_ready_default,
                "watchCacheSize": self.store.cache_size, "podNetwork": k.pod_network, "nodes": dict(k.node_ips),
                "podGateway": k.gateway, "caCert": self.tls_cert if k.gateway else None}

    def append_log(self, ns, name, body):
        text = body.get("text", "")
        if not isinstance(text, str):
            raise ApiError.bad_request("text must be a string")
        st = self.store
        with st.lock:
            pods = st.registry.get("", "v1", "pods")
            pod = st._find(pods, ns, name)
            if pod is None:
                raise ApiError.not_found(pods, name)
            names = [c["name"] for c in (pod["spec"].get("containers") or []) +
                     (pod["spec"].get("initContainers") or [])]
            cname = body.get("container") or names[0]
            if cname not in names:
                raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
            key = (ns, name, cname)
            if body.get("replace"):
                st.logs[key] = []
            now = time.time()
            lines = st.logs.setdefault(key, [])
            for line in text.splitlines(keepends=True):
                lines.append((now, line))
            st.changed.notify_all()

    def seed(self, body):
        path = body.get("path", "")
        parts = [p for p in path.split("/") if p]
        ns = None
        if parts and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError.bad_request("bad path")
        if len(rest) == 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        with self.store.lock:
            rt = self.store.registry.get(group, version, rest[0] if rest else "")
            if rt is None:
                raise ApiError.path_not_found()
            count, prefix = int(body.get("count", 1)), body.get("namePrefix", "seed-")
            tmpl = body.get("template") or {}
            start = int(body.get("start", 0))
            for i in range(start, start + count):
                obj = copy.deepcopy(tmpl)
                obj.setdefault("metadata", {})["name"] = "%s%d" % (prefix, i)
                self.store.create(rt, ns, obj)
            return {"created": count, "resourceVersion": str(self.store.rv)}


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fake Kubernetes API server with a kubelet stand-in (tests only)")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 = ephemeral)")
    ap.add_argument("--ready-file", help="written atomically with the URL once serving")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca", help="accept client certificates signed by this CA as authenticated")
    ap.add_argument("--token", action="extend", nargs="+", default=[],
                    help="accepted bearer token(s); repeatable; none = no authentication")
    ap.add_argument("--kubelet", choices=("auto", "manual", "podman"), default="auto",
                    help="podman: run pods as real containers (podman_kubelet.py; root, podman, runc)")
    ap.add_argument("--watch-cache-size", type=int, default=1000, help="watch history per resource type")
    ap.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds between BOOKMARK events")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--run-delay-ms", type=int, default=0, help="delay between scheduling and Running")
    ap.add_argument("--server-version", default="v1.32.0")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    srv = FakeApiServer(host.strip("[]") or "127.0.0.1", int(port), args.tls_cert, args.tls_key, args.client_ca,
                        args.token, args.kubelet, args.watch_cache_size, args.bookmark_interval, args.nodes,
                        args.run_delay_ms, args.server_version, verbose=args.verbose)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    srv.start()
    if args.ready_file:
        tmp = args.ready_file + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            f.write(srv.url + "\n")
        os.replace(tmp, args.ready_file)
    sys.stderr.write("fake-apiserver: serving on %s\n" % srv.url)
    while not stop.wait(0.5):
        pass
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
