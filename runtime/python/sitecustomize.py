"""FleetJob's env loader: Paddle env variables that travel as files, put into os.environ; and
the gate of jobs that restart in place.

An endpoint list of a big job does not fit in an environment variable (Linux refuses an exec
whose "NAME=value" exceeds 128 KiB), so the operator ships it as a file of the job's endpoints
ConfigMap and names it in FLEET_ENV_FILES. Python imports this module at start-up (it is
`sitecustomize` on PYTHONPATH: the operator mounts it, the tools image ships it), before the
training script and Paddle read their env; setting os.environ in-process has no size limit.

    FLEET_ENV_FILES       VAR=FILE,...: each VAR gets the content of FILE
    FLEET_ENV_FILES_DIR   the directory holding the files (the mounted ConfigMap)
    FLEET_ENV_FILES_RUN   the job run the pod belongs to: the directory's file `fleet-run` must
                          hold it (the kubelet refreshes a mounted ConfigMap a while after the
                          operator writes it, and a new run rewrites it)

The values live in os.environ only, not in the C environment: a program this process executes
could not be started with them (the same kernel limit). A Python child loads them again itself
(it inherits FLEET_ENV_FILES and PYTHONPATH). Without FLEET_ENV_FILES nothing happens.
runtime/include/fleet/runtime/env_files.h is the same contract for C++ entry points (fleetrun).

It fails closed: a malformed FLEET_ENV_FILES (an entry not VAR=FILE, no FLEET_ENV_FILES_DIR or
FLEET_ENV_FILES_RUN), a file that is not UTF-8 text, a wait past TIMEOUT_SECONDS, or any other error
ends the process with status 1 and a message naming what was wrong: a training script that ran
without its peer lists would train with wrong ranks, or alone.

The gate (jobs with spec.runPolicy.restartStrategy InPlace; docs/env-contract.md, "The gate"): the
kubelet restarts a failed trainer container in place, and the trainer must not start until the
operator opens the job's next run. Before the files load, when FLEET_GATE_URL is set and
FLEET_GATE_PASSED is not, this module asks the pod's fleet-sidecar:

    FLEET_GATE_URL        the sidecar's gate (http://127.0.0.1:<port>/gate)
    FLEET_RUN             the run the container was started for
    FLEET_GATE_PASSED     set (to the run) once passed: child processes inherit it and do not ask

It names the container start ("instance") after the container's first process, the ancestor
whose parent pid is 0 in the pod's shared PID namespace: "<pid>:<starttime>" (field 22 of
/proc/<pid>/stat). It asks GET FLEET_GATE_URL?run=FLEET_RUN&instance=<pid>:<starttime> until the
sidecar answers 200 {"run": N} (202: it waits, asked again at once; no answer, 429 or 5xx: the
sidecar may be restarting, asked again after a short backoff; either said every REPORT_EVERY_SECONDS),
then sets FLEET_RUN and FLEET_GATE_PASSED (and FLEET_ENV_FILES_RUN, when set: the files are the new
run's) to N. It fails closed, status 1 and a message, on any other answer (400: a malformed
question), an answer that is not as the sidecar writes it, an unreadable /proc, or a malformed
FLEET_RUN or FLEET_GATE_URL. A command exec'd into the container
is a container start of its own and waits for the next run: set FLEET_GATE_PASSED for it.

As `sitecustomize` this module hides any other sitecustomize further down sys.path (Debian's,
an image's own): it runs that one afterwards. Standard library only, Python 3.6 or later.
"""
import importlib.machinery
import importlib.util
import os
import sys
import time

RUN_FILE = "fleet-run"
TIMEOUT_SECONDS = 600
POLL_SECONDS = 0.5
REPORT_EVERY_SECONDS = 30


GATE_RETRY_SECONDS = (0.1, 2.0)   # the backoff while the sidecar does not answer: first, at most
GATE_REQUEST_SECONDS = 30         # one request (the sidecar answers a waiting one within 10 s)
GATE_MAX_ANSWER_BYTES = 64 * 1024
MAX_ANCESTORS = 4096


class EnvFilesError(Exception):
    """FLEET_ENV_FILES cannot be loaded; the message names the variable or file."""


class GateError(Exception):
    """The gate cannot be passed; the message names the variable, file or answer."""


def _say(message, who="fleetjob env loader"):
    sys.stderr.write(who + ": " + message + "\n")
    sys.stderr.flush()


def _read(path, what):
    """The file's text; None while it is missing or unreadable (the kubelet may not have written it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None
    except UnicodeDecodeError as error:
        raise EnvFilesError("%s: file %s is not UTF-8 text (%s)" % (what, path, error))


def _read_run(directory, run, files):
    """The values when every file is there and of `run` (checked before and after), else None."""
    run_file = os.path.join(directory, RUN_FILE)
    if _read(run_file, "FLEET_ENV_FILES_RUN") != run:
        return None
    values = {}
    for name, file in files:
        value = _read(os.path.join(directory, file), name)
        if value is None:
            return None
        values[name] = value
    return values if _read(run_file, "FLEET_ENV_FILES_RUN") == run else None


def _wanted_files(environ):
    """[(VAR, FILE)] from FLEET_ENV_FILES; every entry must be VAR=FILE, both non-empty."""
    files = []
    for entry in environ["FLEET_ENV_FILES"].split(","):
        name, equals, file = entry.partition("=")
        if not name or not equals or not file:
            raise EnvFilesError("FLEET_ENV_FILES: entry %r is not VAR=FILE" % entry)
        files.append((name, file))
    for name in ("FLEET_ENV_FILES_DIR", "FLEET_ENV_FILES_RUN"):
        if not environ.get(name, ""):
            raise EnvFilesError("FLEET_ENV_FILES is set but %s is not" % name)
    return files


def load_env_files(environ=os.environ):
    """Sets the variables FLEET_ENV_FILES names; waits for their files up to TIMEOUT_SECONDS.

    Raises EnvFilesError on malformed input or when the wait times out."""
    if not environ.get("FLEET_ENV_FILES", ""):
        return
    files = _wanted_files(environ)
    directory = environ["FLEET_ENV_FILES_DIR"]
    run = environ["FLEET_ENV_FILES_RUN"]
    what = "%s of run %s in %s" % (", ".join(name for name, _ in files), run, directory)
    start = time.monotonic()
    reported = None
    while True:
        values = _read_run(directory, run, files)
        if values is not None:
            break
        waited = time.monotonic() - start
        if waited > TIMEOUT_SECONDS:
            raise EnvFilesError("gave up after %d s waiting for %s" % (waited, what))
        if reported is None or waited - reported >= REPORT_EVERY_SECONDS:
            _say("waiting for %s (the kubelet refreshes mounted ConfigMaps periodically)" % what)
            reported = waited
        time.sleep(POLL_SECONDS)
    for name, value in values.items():
        environ[name] = value
        if environ is os.environ:
            os.unsetenv(name)  # in os.environ, not in what an exec passes on


def _load_or_exit():
    """Loads the files or ends the process: nothing may run half-loaded."""
    try:
        load_env_files()
    except Exception as error:  # site.py would print "Error in sitecustomize" and run the script anyway
        _say(str(error) if isinstance(error, EnvFilesError) else
             "cannot load FLEET_ENV_FILES: %s: %s" % (type(error).__name__, error))
        os._exit(1)  # SystemExit here would be a fatal init error with a traceback


def find_instance(proc="/proc", pid=None):
    """"<pid>:<starttime>" of the container's first process: this process's (`pid`'s) ancestor whose
    parent pid is 0 (its parent is outside the pod's PID namespace)."""
    pid = os.getpid() if pid is None else pid
    for _ in range(MAX_ANCESTORS):
        path = os.path.join(proc, str(pid), "stat")
        try:
            with open(path, "rb") as f:
                stat = f.read(4096).decode("ascii", "replace")
        except OSError as error:
            raise GateError("cannot read %s to name this container start: %s" % (path, error))
        # "pid (comm) S ppid ... starttime(22nd)": comm may hold spaces and ')'; the last ')' ends it.
        fields = stat[stat.rfind(")") + 1:].split()
        try:
            parent, start = int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            raise GateError("%s is not a process's status line: %r" % (path, stat[:200]))
        if parent == 0:
            return "%d:%d" % (pid, start)
        pid = parent
    raise GateError("no ancestor of process %d has parent 0 (looked at %d)" % (os.getpid(), MAX_ANCESTORS))


def _gate_question(environ, proc):
    """The URL to ask, after checking FLEET_GATE_URL and FLEET_RUN."""
    import urllib.parse
    url, run = environ["FLEET_GATE_URL"], environ.get("FLEET_RUN", "")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.netloc or parts.query or parts.fragment:
        raise GateError("FLEET_GATE_URL: %r is not an http:// URL without a query" % url)
    if not run or any(c not in "0123456789" for c in run):
        raise GateError("FLEET_RUN: %r is not a run number (FLEET_GATE_URL is set)" % run)
    return "%s?run=%d&instance=%s" % (url, int(run), find_instance(proc))


def _gate_answer(status, body):
    """(run, None) for a 200 answer, (None, why) for a 202; GateError for any other answer."""
    import json
    answer = None
    try:
        answer = json.loads(body.decode("utf-8"))
    except ValueError:   # UnicodeDecodeError is one
        pass
    run = answer.get("run") if isinstance(answer, dict) else None
    waiting = answer.get("waiting") if isinstance(answer, dict) else None
    if status not in (200, 202) or type(run) is not int or run < 0 or (status == 202 and type(waiting) is not str):
        raise GateError("the gate answered %d %r, not 200 {\"run\": N} or 202 {\"waiting\": ..., \"run\": N}" %
                        (status, body[:200]))
    return (run, None) if status == 200 else (None, waiting)


def _ask_gate(opener, question):
    """(status, body) of one GET; (None, why) when the sidecar gave no answer it may give later."""
    import http.client
    import urllib.error
    try:
        with opener.open(question, timeout=GATE_REQUEST_SECONDS) as answer:
            return answer.getcode(), answer.read(GATE_MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        if error.code == 429 or error.code >= 500:
            return None, "it answered %d" % error.code
        raise GateError("the gate answered %d: %s" % (error.code, error.read(GATE_MAX_ANSWER_BYTES)[:500]
                                                        .decode("utf-8", "replace").strip()))
    except (OSError, http.client.HTTPException) as error:   # refused, reset, timed out
        return None, "no answer: %s" % (getattr(error, "reason", None) or error)


def pass_gate(environ=os.environ, proc="/proc"):
    """Waits at the sidecar's gate, then sets FLEET_RUN and FLEET_GATE_PASSED to the run it
    answered. Nothing without FLEET_GATE_URL, or with FLEET_GATE_PASSED. Raises GateError."""
    if not environ.get("FLEET_GATE_URL", "") or environ.get("FLEET_GATE_PASSED", ""):
        return
    # Imported only here: urllib.request alone would add ~0.1 s to every Python start in the pod.
    import urllib.request
    question = _gate_question(environ, proc)
    # The sidecar is on loopback: never through a proxy the env may name.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    start, reported, delay = time.monotonic(), None, GATE_RETRY_SECONDS[0]
    while True:
        status, body = _ask_gate(opener, question)
        run, why = _gate_answer(status, body) if status is not None else (None, None)
        if run is not None:
            environ["FLEET_RUN"] = environ["FLEET_GATE_PASSED"] = str(run)
            # Lists that travel as files: the run's files, which an in-place restart rewrote.
            if environ.get("FLEET_ENV_FILES_RUN", ""):
                environ["FLEET_ENV_FILES_RUN"] = str(run)
            return
        waited = time.monotonic() - start
        if reported is None or waited - reported >= REPORT_EVERY_SECONDS:
            _say("%s (%s, %d s so far)" % (why or "cannot ask the sidecar (%s); asking again" % body, question, waited),
                 "fleetjob gate")
            reported = waited
        if status is None:
            time.sleep(delay)
            delay = min(delay * 2, GATE_RETRY_SECONDS[1])
        else:
            delay = GATE_RETRY_SECONDS[0]


def _pass_gate_or_exit():
    """Passes the gate or ends the process: a trainer must not join a run it was not let into."""
    try:
        pass_gate()
    except Exception as error:
        _say(str(error) if isinstance(error, GateError) else
             "cannot pass the gate: %s: %s" % (type(error).__name__, error), "fleetjob gate")
        os._exit(1)


def _run_shadowed_sitecustomize():
    """Runs the sitecustomize this one hides (the next on sys.path), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.path.abspath(p or os.curdir) for p in sys.path]
    rest = sys.path[dirs.index(here) + 1:] if here in dirs else sys.path
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    _pass_gate_or_exit()
    _load_or_exit()
    _run_shadowed_sitecustomize()
