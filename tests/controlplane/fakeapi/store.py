"""The store: every object by storage key, one global resourceVersion counter, uids and owner
references, the per-resource watch history; create, get/list (selectors, limit/continue
snapshots), update and patch with status subresource isolation. Deletion is in deletion.py
and watches in watch.py, mixed into Store."""

import base64
import collections
import copy
import itertools
import json
import random
import threading
import uuid

from .deletion import StoreDeletion
from .errors import ApiError, cause, required
from .patches import json_patch, merge_patch, strategic_merge_patch
from .kueue import GROUP as KUEUE_GROUP
from .resources import Registry
from .schemas import SchemaChecks
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .util import dumps, rfc3339
from .validation import (POD_UPDATE_FORBIDDEN, _pod_spec_mutable_view, crd_status, default_pod, qos_class,
                         validate_crd, validate_metadata, validate_pod)
from .watch import Event, StoreWatches


class Store(StoreDeletion, StoreWatches):
    def __init__(self, server):
        self.server = server
        self.registry = Registry()
        self.schemas = SchemaChecks()
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
        if rt.group == KUEUE_GROUP or key == "/pods":
            self.server.kueue.observe(etype, obj)
        elif key == "/configmaps" and etype != "DELETED":
            self.server.kubelet.configmap_changed(obj)
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
            causes = self.schemas.check(self, rt, body, None)
            if causes:
                raise ApiError.invalid(rt, name, causes)
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
        if rt.validate:
            return rt.validate(obj)
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
            if obj["spec"].get("schedulingGates"):   # as the API server's PrepareForCreate
                obj["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": rfc3339(),
                    "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}]
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
            causes = self.schemas.check(self, rt, result, old)
            if causes:
                raise ApiError.invalid(rt, name, causes)
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
            causes = causes or self.schemas.check(self, rt, result, old)
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
        elif rt.storage_key == "/pods":
            self.server.kubelet.pod_updated(old, obj)
        elif rt.storage_key == "/nodes":
            self.server.kubelet.nodes_changed()
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
