"""python -m ampscope [--out DIR] [--every N] [--shadow] [--stop-on-nonfinite] [--map FILE]
                   [--include PATS] [--exclude PATS] [--ops PATS] [--exclude-ops PATS]
                   [--input-stats] script.py [args...]

Runs the script as `python script.py args...` would (its __name__ is "__main__", sys.argv and
the exit code are preserved) with every torch.nn.Module observed, and writes report.json,
report.html and precision_map.json into DIR when the script ends: also when it raises, calls
sys.exit, or gets SIGINT/SIGTERM. Under torchrun each rank writes report.rank<R>.json (+ html).
With --stop-on-nonfinite the script is stopped right after the first NaN/Inf appears, the report
is written and the exit code is 3.
"""
import argparse
import os
import runpy
import signal
import sys

from . import MapError, NonFiniteStop, OutputError, load_map, profile


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"ampscope: error: {message}\n")
        sys.exit(2)


def _parser():
    p = _Parser(prog="python -m ampscope", description=__doc__.split("\n\n", 1)[1],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="ampscope-out", help="output folder (default ampscope-out)")
    p.add_argument("--every", type=int, default=1, help="record every N-th step (default 1)")
    p.add_argument("--shadow", action="store_true",
                   help="re-run the first call of each low-precision op entry per recorded "
                        "step in float32 and report its error (slower)")
    p.add_argument("--stop-on-nonfinite", action="store_true",
                   help="stop at the first NaN/Inf, write the report, exit 3")
    p.add_argument("--map", metavar="FILE", default=os.environ.get("AMPSCOPE_PRECISION_MAP"),
                   help="precision map to apply at start-up (env AMPSCOPE_PRECISION_MAP)")
    p.add_argument("--include", metavar="PATS", default=None,
                   help="record only these layers: comma-separated name globs; a match also "
                        "covers sub-layers ('blocks.1' records blocks.1.ffn.wo)")
    p.add_argument("--exclude", metavar="PATS", default=None,
                   help="do not record these layers (globs, as --include)")
    p.add_argument("--ops", metavar="PATS", default=None,
                   help="record only these ops / autograd nodes (globs: 'aten::*mm*,*Backward0')")
    p.add_argument("--exclude-ops", metavar="PATS", default=None,
                   help="do not record these ops (globs)")
    p.add_argument("--input-stats", action="store_true",
                   help="also record stats of every op's floating inputs (default: outputs only)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _split_script(parser, argv):
    """(our arguments up to the script, the script's arguments): what follows the first word
    that is neither one of our options nor its value, the script, is the script's own, `--`
    included, as `python script.py ...` would pass it. Which options take a value (`--opt V`;
    `--opt=V` is one word) is the parser's."""
    valued = {s for action in parser._actions if action.nargs != 0 for s in action.option_strings}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[:i + 2], argv[i + 2:]
        if not word.startswith("-") or word == "-":
            return argv[:i + 1], argv[i + 1:]
        i += 2 if word in valued else 1
    return argv, []


def _script_traceback(exc, script):
    """The traceback Python would print for `python script.py`: from the script's first frame
    on, without runpy's and ours."""
    import traceback
    tb = exc.__traceback__
    want = os.path.abspath(script)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != want:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def _fail(message):
    sys.stderr.write(f"ampscope: error: {message}\n")
    return 2


class _ScriptSignals:
    """SIGINT/SIGTERM while the script runs end it as Python would (KeyboardInterrupt,
    SystemExit(128+sig)) so the profile's exit writes the report. Once the script is over (or
    the first signal has ended it) they are only recorded: a signal landing just as the script
    ends, or a repeated one, can no longer cut the report or the release of --out short; main
    then exits 128+sig."""

    def __init__(self):
        self.script_running = False
        self.pending = None

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if not self.script_running:
            self.pending = self.pending or signum
            return
        self.script_running = False
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def run(self, script):
        self.script_running = True
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            self.script_running = False


def main(argv=None):
    parser = _parser()
    ours, script_args = _split_script(parser, sys.argv[1:] if argv is None else list(argv))
    a = parser.parse_args(ours)
    a.args = [*a.args, *script_args]
    if a.every < 1:
        return _fail(f"--every must be >= 1, got {a.every}")
    if not a.out:
        return _fail("--out must name a folder")
    if not os.path.isfile(a.script):
        return _fail(f"{a.script}: no such script")
    try:
        pins = load_map(a.map) if a.map else None
    except MapError as e:
        return _fail(str(e))
    try:
        prof = profile(out=a.out, every=a.every, shadow=a.shadow, precision_map=pins,
                       stop_on_nonfinite=a.stop_on_nonfinite, include=a.include,
                       exclude=a.exclude, ops=a.ops, exclude_ops=a.exclude_ops,
                       input_stats=a.input_stats,
                       command=" ".join(["python -m ampscope", a.script, *a.args]))
    except (TypeError, ValueError) as e:  # AMPSCOPE_SENTINEL=bogus, ...
        return _fail(str(e))
    try:
        prof.claim_out()  # an unusable or busy --out fails now, not after the script ran
    except OutputError as e:
        return _fail(str(e))
    sys.argv = [a.script, *a.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    signals = _ScriptSignals()
    signals.install()
    try:
        with prof:
            signals.run(a.script)
    except KeyboardInterrupt:
        signals.pending = signals.pending or signal.SIGINT  # Ctrl-C: 130, no traceback
    except NonFiniteStop as stop:
        sys.stderr.write(f"ampscope: {stop}\n")
        return 3
    except BrokenPipeError:
        # `python -m ampscope train.py | head`: the reader left; the report is written.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stderr.write("ampscope: note: the output pipe was closed (BrokenPipeError)\n")
        return 128 + signal.SIGPIPE
    except SystemExit:
        raise  # the script's own exit code
    except OutputError:  # the script ran, its report could not be written: said in one line
        return 2
    except Exception as e:  # the script failed: its traceback as Python prints it, exit 1
        _script_traceback(e, a.script)
        return 1
    finally:
        prof._release_out()  # also when the script never got to run
        if prof.report_path:
            sys.stderr.write(f"ampscope: wrote {prof.report_path}\n")
    return 128 + signals.pending if signals.pending else 0


if __name__ == "__main__":
    sys.exit(main())
