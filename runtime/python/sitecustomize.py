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
runtime/include/fleet/runtime/env_files.h is the same contract for C++ entry points (fleetrun).

It fails closed: a malformed FLEET_ENV_FILES (an entry not VAR=FILE, no FLEET_ENV_FILES_DIR or
FLEET_ENV_FILES_RUN), a file that is not UTF-8 text, a wait past TIMEOUT_SECONDS, or any other error
ends the process with status 1 and a message naming what was wrong: a training script that ran
without its peer lists would train with wrong ranks, or alone.

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


class EnvFilesError(Exception):
    """FLEET_ENV_FILES cannot be loaded; the message names the variable or file."""


def _say(message):
    sys.stderr.write("fleetjob env loader: " + message + "\n")
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
    _load_or_exit()
    _run_shadowed_sitecustomize()
