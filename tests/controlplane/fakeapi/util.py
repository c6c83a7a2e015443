"""Small helpers shared by the fake API server's modules: timestamps, compact JSON, query booleans,
kubectl's human ages, Kubernetes version ordering, and the request and watch queue bounds."""

import json
import re
import time

from .errors import ApiError


MAX_BODY = 3 * 1024 * 1024
WATCH_QUEUE_LIMIT = 200000


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
