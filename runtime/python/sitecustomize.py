"""FleetJob's env loader: Paddle env variables that travel as files, put into os.environ.

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


def _say(message):
    sys.stderr.write("fleetjob env loader: " + message + "\n")
    sys.stderr.flush()


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _read_run(directory, run, files):
    """The values when every file is there and of `run` (checked before and after), else None."""
    if _read(os.path.join(directory, RUN_FILE)) != run:
        return None
    values = {}
    for name, file in files:
        value = _read(os.path.join(directory, file))
        if value is None:
            return None
        values[name] = value
    return values if _read(os.path.join(directory, RUN_FILE)) == run else None


def load_env_files(environ=os.environ):
    """Sets the variables FLEET_ENV_FILES names; waits for their files. Exits 1 after TIMEOUT_SECONDS."""
    wanted = environ.get("FLEET_ENV_FILES", "")
    if not wanted:
        return
    directory = environ.get("FLEET_ENV_FILES_DIR", "")
    run = environ.get("FLEET_ENV_FILES_RUN", "")
    files = [tuple(entry.split("=", 1)) for entry in wanted.split(",") if "=" in entry]
    what = "%s of run %s in %s" % (", ".join(name for name, _ in files), run, directory)
    start = time.monotonic()
    reported = None
    while True:
        values = _read_run(directory, run, files)
        if values is not None:
            break
        waited = time.monotonic() - start
        if waited > TIMEOUT_SECONDS:
            _say("gave up after %d s waiting for %s" % (waited, what))
            os._exit(1)  # the script cannot run without its peers (SystemExit here would be a fatal init error)
        if reported is None or waited - reported >= REPORT_EVERY_SECONDS:
            _say("waiting for %s (the kubelet refreshes mounted ConfigMaps periodically)" % what)
            reported = waited
        time.sleep(POLL_SECONDS)
    for name, value in values.items():
        environ[name] = value
        if environ is os.environ:
            os.unsetenv(name)  # in os.environ, not in what an exec passes on


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
    load_env_files()
    _run_shadowed_sitecustomize()
