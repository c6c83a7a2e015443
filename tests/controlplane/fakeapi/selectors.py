"""Label and field selectors: parsing (with the API's error messages) and matching."""

import re

from .errors import ApiError
from .validation import label_value_error, qualified_name_error


_SEL_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|<|>|[^\s,()=!<>]+)")


def parse_label_selector(s):
    """-> list of (key, op, values).  Raises ApiError 400 on bad syntax."""
    if s is None or not s.strip():
        return []
    toks = _selector_tokens(s.strip())
    reqs, i = [], 0
    while i < len(toks):
        req, i = _requirement(toks, i)
        reqs.append(req)
        if i < len(toks):
            if toks[i] != ",":
                raise _bad_selector("found '%s', expected: ','" % toks[i])
            i += 1
    return reqs


def _selector_tokens(s):
    toks, pos = [], 0
    while pos < len(s):
        m = _SEL_TOKEN.match(s, pos)
        if not m:
            raise ApiError.bad_request("unable to parse requirement: invalid selector %r" % s)
        toks.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return toks


def _bad_selector(msg):
    return ApiError.bad_request("unable to parse requirement: " + msg)


def _check_key(k):
    if k in ("in", "notin", "=", "==", "!=", "(", ")", ",", "!", "<", ">"):
        raise _bad_selector("found '%s', expected: identifier" % k)
    err = qualified_name_error(k)
    if err:
        raise _bad_selector('key: Invalid value: "%s": %s' % (k, err))


def _check_value(v):
    err = label_value_error(v)
    if err:
        raise _bad_selector('values[0][%s]: Invalid value: "%s": %s' % (v, v, err))


def _requirement(toks, i):
    """Reads one requirement ("!key", "key", "key OP values") from toks[i]; -> (req, next i)."""
    if toks[i] == "!":
        if i + 1 >= len(toks):
            raise _bad_selector("found '', expected: identifier")
        _check_key(toks[i + 1])
        return (toks[i + 1], "!", []), i + 2
    key = toks[i]
    _check_key(key)
    i += 1
    if i >= len(toks) or toks[i] == ",":
        return (key, "exists", []), i
    op = toks[i]
    read_values = _VALUE_READERS.get(op)
    if read_values is None:
        raise _bad_selector("found '%s', expected: in, notin, =, ==, !=, gt, lt" % op)
    vals, i = read_values(toks, i + 1)
    return (key, _CANONICAL_OP.get(op, op), vals), i


def _one_value(toks, i):
    """The value of "=", "==" or "!=": may be empty ("key=" selects the empty value)."""
    val = ""
    if i < len(toks) and toks[i] != ",":
        val = toks[i]
        i += 1
    _check_value(val)
    return [val], i


def _value_set(toks, i):
    """The "(a, b)" of "in" and "notin"."""
    if i >= len(toks) or toks[i] != "(":
        raise _bad_selector("found '%s', expected: '('" % (toks[i] if i < len(toks) else ""))
    i += 1
    vals = []
    while i < len(toks) and toks[i] != ")":
        if toks[i] != ",":
            _check_value(toks[i])
            vals.append(toks[i])
        i += 1
    if i >= len(toks):
        raise _bad_selector("found '', expected: ')'")
    if not vals:
        raise _bad_selector("for 'in', 'notin' operators, values set can't be empty")
    return vals, i + 1


def _integer_value(toks, i):
    """The operand of "<" and ">" (Lt, Gt)."""
    if i >= len(toks):
        raise _bad_selector("found '', expected: integer")
    try:
        int(toks[i])
    except ValueError:
        raise _bad_selector("for 'Gt', 'Lt' operators, the value must be an integer")
    return [toks[i]], i + 1


# Each operator's reader of its values, and the operator a requirement stores ("==" means "=").
_VALUE_READERS = {"=": _one_value, "==": _one_value, "!=": _one_value,
                  "in": _value_set, "notin": _value_set, "<": _integer_value, ">": _integer_value}
_CANONICAL_OP = {"==": "="}


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
