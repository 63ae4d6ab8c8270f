"""ampscope: a numerical-precision profiler for mixed-precision PyTorch training.

    with ampscope.profile(out="ampscope-out") as prof:
        train()
    prof.report            # the report as a dict

or, with no code changes:  python -m ampscope train.py args...
"""
import json
import numbers
import os
import signal
import sys
import threading

import torch

from . import _core
from ._pin import MapError, apply_precision_map, load_map  # noqa: F401 (re-exported)
from ._compile import CompileObserver
from ._tracker import Tracker

__all__ = ["profile", "step", "tensor_stats", "apply_precision_map", "MapError", "NonFiniteStop",
           "OutputError"]

_active = None


class OutputError(RuntimeError):
    """The output folder cannot take the report (not writable, full, or in use by another run);
    raised when profiling starts, before anything runs. One-line message."""


class _DeferSignals:
    """SIGINT/SIGTERM while the report is built and written are recorded, not raised, so the
    report is finished; `pending` is the first one (handled once), re-delivered by the caller."""

    def __init__(self):
        self.pending = None
        self._previous = {}

    def _record(self, signum, frame):
        if self.pending is None:
            self.pending = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def _signal_exit(exc):
    """True when `exc` is already the way out of a signal (KeyboardInterrupt, SystemExit(130/143))."""
    return isinstance(exc, KeyboardInterrupt) or (
        isinstance(exc, SystemExit) and exc.code in (128 + signal.SIGTERM, 128 + signal.SIGINT))


class NonFiniteStop(RuntimeError):
    """Raised inside a `profile(stop_on_nonfinite=True)` block right after the op that produced
    the run's first NaN/Inf (at the end of the module running it, or at the next step marker).
    After the block, `event` is the report's first_nonfinite record."""

    def __init__(self):
        super().__init__()
        self.event = None

    def __str__(self):
        e = self.event
        if not e:
            return "stopped at the first non-finite value"
        safe = _core.terminal_safe  # names come from the model: printed escaped
        layer = safe(e["layer"]) if e["layer"] else "(root)"
        return (f"stopped at the first non-finite value: {safe(e['kind'])} in layer {layer}, "
                f"op {safe(e['op'])}, step {e['step']} ({safe(e['phase'])})")


def step():
    """Marks the end of a training step (optimizer steps are detected automatically)."""
    if _active is not None:
        _active._tracker.check_stop()
        _active._tracker.user_step()  # steps come from here now, not from optimizers
    else:
        _core.ops().mark_step()


def tensor_stats(t):
    """The stats block of a floating tensor as a dict (counts exact; see the README)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tensor_stats expects a torch.Tensor, got {type(t).__name__}")
    if t.is_floating_point() and t.element_size() == 1:
        t = t.float()  # float8: every value is a float32 value, so the stats are exact
    return json.loads(_core.ops().tensor_stats(t))


def _patterns(value, what):
    """None, "a,b" or an iterable of str -> a list of glob patterns."""
    if value is None:
        return []
    if isinstance(value, str):
        return [p for p in value.split(",") if p]
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{what} must be a str or a list of str, got {type(value).__name__}") from None
    if not all(isinstance(p, str) for p in items):
        raise TypeError(f"{what} must be a str or a list of str")
    return items


def _rank_world():
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


class profile:
    """Profiles everything run inside the block. `model` names layers from that root (any
    module called outside all others becomes a root by itself); `out=None` writes no files;
    `every=N` records steps 0, N, 2N...; `shadow=True` re-runs the first call of each
    low-precision op entry per recorded step in float32 and reports its error;
    `stop_on_nonfinite=True` raises NonFiniteStop right after the first NaN/Inf appears (the
    report is still written); `precision_map` (a path or dict; default: env
    AMPSCOPE_PRECISION_MAP) pins layers as their modules are first seen.
    What is recorded: `include` / `exclude` (layer-name globs; "blocks.1" also covers its
    sub-layers), `ops` / `exclude_ops` (op-name globs such as "aten::*mm*", "*Backward0"), each
    a list or a comma-separated str; `input_stats=True` also records stats of each op's floating
    inputs. The report's run.sampling says what was recorded.
    Unsampled steps (every > 1) are watched for NaN/Inf: `sentinel="watch"` (default; env
    AMPSCOPE_SENTINEL) checks module outputs and parameter gradients and replays a module whose
    output went non-finite to name the op; `sentinel="ops"` checks every op's outputs (dearer)."""

    def __init__(self, model=None, out="ampscope-out", every=1, shadow=False,
                 precision_map=None, command=None, stop_on_nonfinite=False, include=None,
                 exclude=None, ops=None, exclude_ops=None, input_stats=False, sentinel=None):
        if isinstance(every, bool) or not isinstance(every, numbers.Integral):
            raise TypeError(f"every must be an int, got {every!r}")
        if every < 1:
            raise ValueError("every must be >= 1")
        sentinel = sentinel or os.environ.get("AMPSCOPE_SENTINEL") or "watch"
        if sentinel not in ("watch", "ops"):
            raise ValueError(f"sentinel must be 'watch' or 'ops', got {sentinel!r}")
        self._record = {"include_layers": _patterns(include, "include"),
                        "exclude_layers": _patterns(exclude, "exclude"),
                        "include_ops": _patterns(ops, "ops"),
                        "exclude_ops": _patterns(exclude_ops, "exclude_ops"),
                        "input_stats": bool(input_stats), "sentinel": sentinel}
        self.model, self.every, self.shadow = model, int(every), bool(shadow)
        self.out = os.fspath(out) if out is not None else None  # str or path-like
        self.stop_on_nonfinite = bool(stop_on_nonfinite)
        self.stopped = ""
        self.command = command if command is not None else " ".join(sys.argv)
        self.report = None
        self.report_path = None
        if precision_map is None:
            precision_map = os.environ.get("AMPSCOPE_PRECISION_MAP") or None
        self._pins = load_map(precision_map)["pin_fp32"] if precision_map is not None else []
        self.pinned = []
        self.joined = None      # the outer active profile this one joined (python -m ampscope)
        self._claimed = None    # (dir, stem) claimed by claim_out()
        self._pid = None
        self._tracker = Tracker(stop=NonFiniteStop if self.stop_on_nonfinite else None)
        self._tracker.root_callbacks.append(self._apply_pins)
        self._compile = CompileObserver(lambda: self._tracker.compiled_prefix,
                                        self._tracker.name_of, self._tracker.same_type)

    def _apply_pins(self, root, names):
        from ._pin import apply_to_names
        self.pinned += apply_to_names(names, self._pins)

    def _stem(self):
        rank, world = _rank_world()
        return "report" if world <= 1 else f"report.rank{rank}"

    def claim_out(self):
        """Checks that `out` can take the report (created, writable, enough free space) and
        claims it against other runs; raises OutputError. Done by __enter__ if not before."""
        if self.out is None or self._claimed is not None:
            return
        try:
            _core.ops().claim_out(self.out, self._stem())
        except RuntimeError as e:
            raise OutputError(_core.one_line(e)) from None
        self._claimed = (self.out, self._stem())

    def _release_out(self):
        if self._claimed is not None:
            _core.ops().release_out(*self._claimed)
            self._claimed = None

    def _join(self, outer):
        """A script's own profile() under an active one (python -m ampscope): it records into
        the outer session; its report is the session's so far, the outer one writes the files."""
        self.joined = outer
        if self.model is not None:
            self._tracker.register_root(self.model)
        if self.out is not None and self.out != outer.out:
            sys.stderr.write(f"ampscope: note: profile(out={self.out!r}) joined the active "
                             f"session; its report is written to {outer.out!r}\n")
        return self

    def __enter__(self):
        global _active
        if _active is not None:
            return self._join(_active)
        self.claim_out()
        self._pid = os.getpid()
        ops = _core.ops()
        ops.reset_layers()
        if self.model is not None:
            self._tracker.register_root(self.model)
        self._tracker.install()
        self._compile.install()  # graphs inductor compiles from now on get observation points
        ops.start(self.every, self.shadow, "cpu", "", self.command, json.dumps(self._record))
        _active = self
        return self

    def _run_info(self):
        rank, world = _rank_world()
        notes = []
        notes += self._compile.notes(self._tracker.compiled)
        missing = [p for p in self._pins if p not in self.pinned]
        if missing:
            notes.append("precision map names not in the model: " + ", ".join(missing))
        device = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
        return {"rank": rank, "world_size": world, "device": device, "stopped": self.stopped,
                "torch_version": torch.__version__, "notes": notes}

    def write(self, out):
        """Writes report.json, report.html and precision_map.json into `out` as one set (a kill
        leaves this run's files or the previous ones, never a mix)."""
        return _core.ops().write_reports(out, self._stem(), json.dumps(self._run_info()))

    def __exit__(self, exc_type, exc, tb):
        if self.joined is not None:
            self.report = json.loads(_core.ops().report_json(json.dumps(self.joined._run_info())))
            return False
        if self._pid != os.getpid():  # a forked child: the parent writes, the child never does
            return False
        with _DeferSignals() as deferred:
            self._finish(exc_type, exc)
        if deferred.pending is not None and not _signal_exit(exc):
            signal.raise_signal(deferred.pending)  # now that the report is written
        return False

    def _finish(self, exc_type, exc):
        global _active
        ops = _core.ops()
        ops.stop()
        self._tracker.remove()
        self._compile.remove()
        _active = None
        if isinstance(exc, NonFiniteStop):
            self.stopped = "nonfinite"
        elif _signal_exit(exc):
            self.stopped = "signal"
        try:
            self.report = json.loads(ops.report_json(json.dumps(self._run_info())))
            if self.out is not None:
                self.report_path = self.write(self.out)
        except RuntimeError as e:  # never mask the user's own exception
            sys.stderr.write(f"ampscope: error: cannot write the report: {_core.one_line(e)}\n")
            if exc_type is None:
                raise OutputError(_core.one_line(e)) from None
        finally:
            self._release_out()
        if isinstance(exc, NonFiniteStop):
            exc.event = self.report.get("first_nonfinite") if self.report else None
