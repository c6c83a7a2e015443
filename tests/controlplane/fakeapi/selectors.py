"""Label and field selectors: parsing (with the API's error messages) and matching."""

import re

from .errors import ApiError
from .validation import label_value_error, qualified_name_error


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
