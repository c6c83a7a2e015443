"""Deletion for the store (mixed into Store): preconditions, finalizers, graceful pod deletion,
propagationPolicy Foreground/Background/Orphan garbage collection, and namespace and CRD
deletion that removes their contents."""

import copy
import time

from .errors import ApiError, cause
from .util import rfc3339


class StoreDeletion:
    """Deleting objects; part of Store."""

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
