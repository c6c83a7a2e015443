"""Server-side printing: the Table answers kubectl get asks for, with the columns real servers send."""

import re
import time

from .kubelet import Kubelet
from .selectors import _g
from .util import human_age, parse_time


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
