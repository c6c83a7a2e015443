"""fleet_checkpoint: checkpoint before the pod stops (Python 3 standard library only).

A FleetJob with spec.checkpoint.beforeStop asks its trainers for a checkpoint when a pod is told to
stop (suspend, preemption, eviction, scale-in, a node drain): the pod's preStop hook asks the
sidecar, which writes a request file and waits, up to spec.checkpoint.timeoutSeconds, for the
trainer's answer. Then the trainer gets SIGTERM.

    import fleet_checkpoint

    start = fleet_checkpoint.resume_step() or 0        # the step saved before the last stop
    for step in range(start + 1, total + 1):
        train_step()
        if fleet_checkpoint.requested():               # a stat(2): cheap enough for every step
            save_checkpoint(step)                      # the job's own checkpoint, wherever it goes
            fleet_checkpoint.saved(step)               # the sidecar stops waiting

The contract (docs/sidecar.md, "Checkpoint before stop"):

    $FLEET_CHECKPOINT_DIR/request   the sidecar's request, JSON {"reason", "deadline", "timeoutSeconds"}
    $FLEET_CHECKPOINT_DIR/done      the trainer's answer: the step saved, one integer, written
                                    through a rename (saved() does)
    FLEET_CHECKPOINT_STEP           in the pods of runs after a checkpoint was recorded: its step

Outside a FleetJob (FLEET_CHECKPOINT_DIR unset) requested() is False and saved() does nothing.
"""

import json
import os

__all__ = ["requested", "request", "saved", "resume_step"]

ENV_DIR = "FLEET_CHECKPOINT_DIR"
ENV_STEP = "FLEET_CHECKPOINT_STEP"
MAX_STEP = 2 ** 53  # the integers a JSON number holds exactly; the sidecar takes no larger step

# The request this process answered (its file's identity): requested() is False for it afterwards,
# though the file stays until the sidecar reads the answer.
_answered = None


def _dir():
    return os.environ.get(ENV_DIR) or None


def _identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def requested():
    """True while the sidecar asks for a checkpoint this process has not answered with saved()."""
    directory = _dir()
    if directory is None:
        return False
    identity = _identity(os.path.join(directory, "request"))
    return identity is not None and identity != _answered


def request():
    """The pending request as a dict (reason, deadline, timeoutSeconds), or None."""
    directory = _dir()
    if directory is None:
        return None
    try:
        with open(os.path.join(directory, "request"), encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def saved(step):
    """Tells the sidecar the checkpoint of `step` is saved: writes the done file atomically."""
    global _answered
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError("fleet_checkpoint.saved: step must be an integer from 0 to 2^53, got %r" % (step,))
    directory = _dir()
    if directory is None:
        return
    identity = _identity(os.path.join(directory, "request"))
    temporary = os.path.join(directory, "done.%d.tmp" % os.getpid())
    with open(temporary, "w", encoding="ascii") as f:
        f.write("%d\n" % step)
    os.replace(temporary, os.path.join(directory, "done"))
    _answered = identity


def resume_step():
    """The step of the checkpoint saved before the job's last stop (FLEET_CHECKPOINT_STEP), or None."""
    text = os.environ.get(ENV_STEP, "").strip()
    if not text.isdigit():
        return None
    step = int(text)
    return step if step <= MAX_STEP else None
