"""The fuzz campaign runner (VAL-3): ``nncert fuzz TARGET``.

A campaign runs a target's atheris script (``fuzz/TARGET.py``) under libFuzzer in N worker
processes for a fixed time, and turns what they leave in ``DIR/artifacts`` into findings:
each artifact is replayed in a forked child (``run_isolated``) calling the target's
one-input function, classified, de-duplicated by key, journaled at once in
``DIR/findings.jsonl``, minimised, and written out with its spec and the command that
replays it. A campaign run again in the same DIR keeps what the earlier ones found: their
findings are read back from the journal, a key already recorded is a duplicate, and new
findings are numbered on from the highest number there.

Every file goes through nncert.files: DIR and its subdirectories are refused when they are
symlinks or another user's, files are replaced whole by a rename or appended to with
``O_NOFOLLOW``, never written through a link planted in their place.

Why independent workers and not libFuzzer's ``-fork=N``: fork mode (and
``-minimize_crash``) re-executes ``argv[0]`` as a program, which for atheris is the
``.py`` script, so every job dies at once with exit status 127. N plain libFuzzer
processes sharing one corpus directory (libFuzzer reloads it, ``-reload``) do the same
work; a worker that stops on a crash or a timeout is restarted with the next seed until the
time is up.

A worker of a registered target goes on past what Python raises (a Finding, an exception of
nncert's own), writing the input as a ``finding-<sha1>`` artifact the first time it meets its
key (``keep_going``): a restart loads the whole corpus again, for a compiled driver every seed
through its support probe, and a LiteRT campaign that restarted on every known discrepancy
met ran at a few executions a second. The recorded verdict is the replay's all the same.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nncert import __version__, datafiles, files
from nncert.certify.journal import cut_torn_tail
from nncert.resources import suites_root
from nncert.testing.outcome import Kind, run_isolated, signal_name

#: Where the targets' atheris scripts live: ``fuzz/<name>.py`` of the suites (nncert.resources).
SCRIPTS_DIR = suites_root() / "fuzz"

#: libFuzzer's artifact names: ``<kind>-<sha1 of the input>``; ``finding``: what a worker that
#: goes on past an exception wrote (``keep_going``).
ARTIFACT_KINDS = ("crash", "timeout", "oom", "leak", "finding")
#: The artifacts of inputs that ended their worker: a seed among them is dropped from the corpus.
_FATAL_KINDS = ("crash", "timeout", "oom", "leak")

#: Flags the campaign itself sets; passing them after ``--`` would break it.
RESERVED_FLAGS = ("fork", "jobs", "workers", "artifact_prefix", "exact_artifact_path", "timeout",
                  "max_total_time", "minimize_crash", "merge")

#: The harness's own files: frames in them are not the target's.
_HARNESS_FILES = (os.path.join("nncert", "testing", "outcome.py"),
                  os.path.join("nncert", "fuzz", "campaign.py"))
_STATUS = re.compile(r"#(\d+)\s+\w+.*?corp: (\d+)/.*?exec/s: (\d+)")
#: A status line libFuzzer prints only once it has run its seed corpus: the worker is fuzzing.
_READY = re.compile(r"^#\d+\s+(?:INITED|NEW|REDUCE|RELOAD|DONE)\b", re.M)
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
#: -print_final_stats's count of a run's executions (status lines come at powers of 2 while
#: libFuzzer loads its corpus, so the last one can be half the truth).
_FINAL_EXECS = re.compile(r"^stat::number_of_executed_units:\s*(\d+)", re.M)


class Target(Protocol):
    """What the campaign needs of a fuzz target (``nncert.fuzz.targets.Target``; its optional
    ``operations``, the decoded model's, keys a hang that leaves no frame of its own)."""

    name: str
    needs_driver: bool
    make: Callable[[str | None], Callable[[bytes], None]]
    seeds: Callable[[], Iterable[bytes]]
    describe: Callable[[bytes], str]


class CampaignError(Exception):
    """The campaign cannot run or go on (unknown target, a worker that cannot start): one line."""


def known_targets() -> dict[str, Any]:
    """The registered targets; CampaignError if they cannot be imported."""
    try:
        module = importlib.import_module("nncert.fuzz.targets")
    except ImportError as e:
        raise CampaignError(f"the fuzz targets cannot be imported: {e}") from None
    return dict(module.TARGETS)


def resolve_target(name: str) -> tuple[Any, Path]:
    """A target and its script: a registered name (script ``fuzz/NAME.py``), or the path of a
    script of your own that follows the script contract and defines ``TARGET``."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise CampaignError(f"no fuzz script {name}")
        spec = importlib.util.spec_from_file_location(f"_nncert_fuzz_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as e:
            raise CampaignError(f"{name}: cannot load it: {type(e).__name__}: {e}") from None
        if not hasattr(module, "TARGET"):
            raise CampaignError(f"{name}: a fuzz script given by path must define TARGET")
        return module.TARGET, path.resolve()
    targets = known_targets()
    if name not in targets:
        raise CampaignError(f"unknown fuzz target {name!r}; known: {', '.join(sorted(targets))}")
    script = SCRIPTS_DIR / f"{name}.py"
    if not script.is_file():
        raise CampaignError(f"fuzz target {name!r} has no script {script}")
    return targets[name], script


def content_name(data: bytes) -> str:
    """libFuzzer's name for an input: the SHA-1 of its bytes."""
    return hashlib.sha1(data).hexdigest()


def write_seeds(target: Target, out: Path, limit: int | None = None) -> list[Path]:
    """The target's seeds, one file per seed named by its content hash; with ``limit``, at most
    that many, spread evenly over the catalogue (a short campaign otherwise spends its time
    loading thousands of seeds)."""
    files.own_dir(out)
    seeds = list(target.seeds())
    if limit is not None and len(seeds) > limit:
        seeds = [seeds[i * len(seeds) // limit] for i in range(limit)]
    paths = []
    for data in seeds:
        path = out / content_name(data)
        files.write_atomic(path, data, sync=False)  # made again by the next campaign if lost
        paths.append(path)
    return paths


def recorded_findings(journal: Path, repair: bool = True) -> dict[str, dict[str, Any]]:
    """key -> the finding an earlier campaign journaled in ``journal`` (with its minimised input
    and replay command once those were recorded, and ``count``: the times it was found, its
    duplicates included); a last line a kill cut short is skipped, and with ``repair`` cut off
    the file, so that the next record starts a line."""
    if repair:
        cut_torn_tail(journal)
    found: dict[str, dict[str, Any]] = {}
    try:
        lines = journal.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            record = datafiles.parse_json(line, str(journal))
        except datafiles.DataFileError:
            continue  # not a record of ours: whatever it is, it names no finding
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            continue
        if record.get("event") == "finding" and isinstance(record.get("number"), int):
            if record["key"] not in found:
                count = record.get("count")  # a merged journal's: the times its campaigns found it
                record["count"] = count if isinstance(count, int) and count > 0 else 1
                found[record["key"]] = record
        elif record.get("event") == "duplicate" and record["key"] in found:
            found[record["key"]]["count"] += 1
        elif record.get("event") == "minimized" and record["key"] in found:
            found[record["key"]].update(minimized=record.get("file"), minimized_size=record.get("size"),
                                        command=record.get("command"),
                                        standalone_command=record.get("standalone_command"))
    return found


# ---------------------------------------------------------------------------------------
# Replaying one input


@dataclass
class Verdict:
    """What one input does to the target, replayed in a child process."""

    kind: str  # NONE, FINDING (an oracle violation), EXCEPTION, CRASH, HANG
    key: str = ""  # what findings are de-duplicated by: kind|operation|status
    message: str = ""
    frames: list[str] = field(default_factory=list)  # innermost first
    signal: str | None = None
    detail: str = ""  # the child's output: traceback, faulthandler dump
    test: str = ""  # the conformance test of the input's case (a Finding's)

    @property
    def found(self) -> bool:
        return self.kind != "NONE"


def _frame_label(filename: str, function: str) -> str:
    return f"{Path(filename).name}:{function}"


def raised(e: Exception) -> dict[str, Any]:
    """What an exception a target raised is, as a Verdict's fields: a FINDING under the oracle's
    own key, or an EXCEPTION keyed by where it was raised and its type. One classification
    for the replay and for a worker that goes on past it (``keep_going``), so that both
    de-duplicate alike."""
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(tb)
              if not f.filename.endswith(_HARNESS_FILES)]
    key = getattr(e, "key", None)
    message = next((line for line in str(e).splitlines() if line.strip()), "")
    if callable(key):  # a Finding: the oracle's own key
        return {"kind": "FINDING", "key": str(key()), "message": message, "frames": frames,
                "test": getattr(e, "test", "")}
    where = _frame_label(tb[-1].filename, tb[-1].name) if tb else ""
    return {"kind": "EXCEPTION", "key": f"EXCEPTION|{where}|{type(e).__name__}",
            "message": f"{type(e).__name__}: {message}", "frames": frames}


def _one_input(target: Target, driver: str | None, data: bytes,
               verdicts: Path | None = None) -> dict[str, Any]:
    """In the child: build the target's function, run the input, report what it raised."""
    if verdicts is not None:
        from nncert.drivers import probe_verdicts
        probe_verdicts.use(verdicts)
    fn = target.make(driver if target.needs_driver else None)
    try:
        fn(data)
    except Exception as e:
        return raised(e)
    return {"kind": "NONE"}


# ---------------------------------------------------------------------------------------
# The worker's side: going on past what Python raises

#: The argument a campaign gives each worker's script: ``--keep-going=FILE`` (libFuzzer
#: ignores arguments that start with ``--``, so a script that does not honour it is unharmed).
KEEP_GOING = "--keep-going="

#: The argument that gives a worker its campaign's store of support-probe verdicts:
#: ``--probe-verdicts=DIR`` (nncert.drivers.probe_verdicts).
PROBE_VERDICTS = "--probe-verdicts="

#: Finding kinds that mean the driver's process is gone or stuck (a hosted driver that died or
#: hung): the worker stops on them as on a crash, and starts again with a fresh driver.
_PROCESS_KINDS = ("crash", "hang")


def keep_going(one_input: Callable[[bytes], None],
               argv: list[str]) -> tuple[Callable[[bytes], None], list[str]]:
    """``one_input`` for a campaign's worker when ``argv`` holds ``--keep-going=FILE`` (and
    ``argv`` without it); else both as they are.

    What Python raises (a Finding, any other exception) no longer ends the worker: that cost
    a restart, which loads the whole corpus again (for a compiled driver, every seed through
    its support probe), per known discrepancy met. Instead the input is written where
    libFuzzer writes its artifacts, as ``finding-<sha1>``, the first time the worker meets
    its key (``raised``: the replay's own classification) on a catalogue case (a Finding's
    conformance test: the campaign says whether each case is one the driver's expectations
    list, so a new case of a known key is not hidden); the campaign replays it in a child
    process like any artifact, so what is recorded is still the replay's verdict. Every time
    a key is met, ``KEY<TAB>sha1`` is appended to FILE (the campaign's count of them). Crashes
    and hangs of the process are libFuzzer's as before, and so are a hosted driver's deaths
    (Findings of kind crash or hang): the worker stops and is started again."""
    hits = next((a[len(KEEP_GOING):] for a in argv if a.startswith(KEEP_GOING)), None)
    if hits is None:
        return one_input, argv
    argv = [a for a in argv if not a.startswith(KEEP_GOING)]
    # The campaign interrupts its workers at the deadline: libFuzzer's own handler then prints
    # the final stats (the exact count of executions), but libFuzzer installs it only where
    # Python has not put its own (which would stop the worker with a KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    prefix = next((a.partition("=")[2] for a in argv if a.startswith("-artifact_prefix=")), "")
    fd = files.open_append(hits)
    written: set[tuple[str, str]] = set()

    def surviving(data: bytes) -> None:
        try:
            one_input(data)
        except Exception as e:
            found = raised(e)
            if found["kind"] == "FINDING" and found["key"].split("|", 1)[0] in _PROCESS_KINDS:
                raise
            key, digest = found["key"], content_name(data)
            if (key, found.get("test", "")) not in written:
                files.write_atomic(f"{prefix}finding-{digest}", data, sync=False)
                written.add((key, found.get("test", "")))
            os.write(fd, f"{key}\t{digest}\n".encode())

    return surviving, argv


def use_probe_verdicts(argv: list[str]) -> list[str]:
    """A worker's ``--probe-verdicts=DIR`` taken out of ``argv``, and its store put in use."""
    for a in argv:
        if a.startswith(PROBE_VERDICTS):
            from nncert.drivers import probe_verdicts
            probe_verdicts.use(a[len(PROBE_VERDICTS):])
    return [a for a in argv if not a.startswith(PROBE_VERDICTS)]


def worker_hits(paths: Iterable[Path]) -> dict[str, int]:
    """key -> the times workers met it (``keep_going``'s files), a line a kill cut short left out."""
    counts: dict[str, int] = {}
    for path in paths:
        try:
            text = path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            continue
        for line in text.split("\n")[:-1]:  # the last: empty, or torn
            key = line.rpartition("\t")[0]
            if key:
                counts[key] = counts.get(key, 0) + 1
    return counts


def _dump_frames(text: str) -> list[str]:
    """The frames of a faulthandler dump, innermost first, the harness's own left out."""
    frames = []
    for filename, line, function in _FRAME.findall(text):
        if filename.endswith(_HARNESS_FILES):  # below it: the parent's stack, inherited by the fork
            break
        frames.append(f"{filename}:{line} in {function}")
    return frames


def replay(target: Target, driver: str | None, data: bytes, timeout: float,
           verdicts: Path | None = None) -> Verdict:
    """Run ``data`` through the target in a forked child with a deadline, and classify it;
    with ``verdicts``, a campaign's store of support-probe verdicts (nncert.drivers.probe_verdicts)."""
    outcome = run_isolated(_one_input, target, driver, data, verdicts, timeout=timeout)
    if outcome.kind is Kind.SUCCESS:
        return Verdict(**outcome.value, detail=outcome.stderr_tail)
    frames = _dump_frames(outcome.stderr_tail)
    where = frames[0].rsplit(":", 1)[0] if frames else ""
    top = _frame_label(where, frames[0].rsplit(" in ", 1)[1]) if frames else ""
    if outcome.kind is Kind.HANG:
        where = top or _operations(target, data)  # no frame of its own: its model's operations
        return Verdict("HANG", f"HANG|{where}|", outcome.reason, frames[:8], detail=outcome.stderr_tail)
    if outcome.kind is Kind.CRASH:
        sig = signal_name(outcome.signal) if outcome.signal is not None else f"exit {outcome.exit_code}"
        return Verdict("CRASH", f"CRASH|{top}|{sig}", outcome.reason, frames[:8], sig,
                       detail=outcome.stderr_tail)
    # FAILURE: the harness itself failed in the child (e.g. make() raised).
    return Verdict("EXCEPTION", f"EXCEPTION|harness|{outcome.reason.partition(':')[0]}", outcome.reason,
                   frames[:8], detail=outcome.stderr_tail)


def _operations(target: Target, data: bytes) -> str:
    """The operations of the model ``data`` decodes into for ``target`` ("" when it has none or
    the input does not decode)."""
    operations = getattr(target, "operations", None)  # (a script's own TARGET may not say)
    if operations is None:
        return ""
    try:
        return operations(data)
    except Exception:  # decoding is total for the registered targets; a script's may not be
        return ""


def minimise(data: bytes, key: str, still_fails: Callable[[bytes], bool], budget: float) -> bytes:
    """A byte-level delta reduction: drop chunks (halves, quarters, ... single bytes) while the
    input still gives the same key, until nothing more goes or the time budget is spent."""
    deadline = time.monotonic() + budget
    best = data
    chunk = max(1, len(best) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        start, shrunk = 0, False
        while start < len(best) and time.monotonic() < deadline:
            candidate = best[:start] + best[start + chunk:]
            if candidate != best and still_fails(candidate):
                best, shrunk = candidate, True
            else:
                start += chunk
        if not shrunk:
            chunk //= 2
    return best


# ---------------------------------------------------------------------------------------
# The campaign


@dataclass
class CampaignConfig:
    time: float = 60.0  # seconds of fuzzing
    jobs: int = 1  # libFuzzer worker processes
    timeout: int = 10  # per input (libFuzzer -timeout): longer is a HANG
    seed: int | None = None  # libFuzzer -seed of the first worker; the others count on from it
    minimise_time: float = 30.0  # per new finding
    progress_every: float = 5.0  # seconds between progress lines
    extra_flags: list[str] = field(default_factory=list)
    max_seeds: int | None = None  # at most this many of the target's seeds (None: all)
    # Workers go on past what Python raises (keep_going) and share support-probe verdicts with
    # each other, their restarts and the replays; off, a worker restarts on every finding and
    # each process probes afresh (as before issue 23: benchmarks/bench_fuzz.py --campaign).
    keep_going: bool = True
    share_probe_verdicts: bool = True
    # Seconds the workers may take to start (the instrumented imports, running the seed corpus)
    # before the fuzzing time starts counting: a short campaign on a busy host is not spent
    # before its first mutated input. The fuzzing time runs from the first worker ready.
    startup: float = 120.0

    def __post_init__(self) -> None:
        if not self.time > 0:
            raise ValueError(f"--time must be positive, not {self.time}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, not {self.jobs}")
        if not self.startup >= 0:
            raise ValueError(f"--startup must be 0 or more seconds, not {self.startup}")
        if self.max_seeds is not None and self.max_seeds < 1:
            raise ValueError(f"--max-seeds must be at least 1, not {self.max_seeds}")
        if self.timeout < 1:
            raise ValueError(f"--timeout must be at least 1 second, not {self.timeout}")
        for flag in self.extra_flags:
            name, eq, _ = flag.lstrip("-").partition("=")
            if not flag.startswith("-") or not eq:
                raise ValueError(f"libFuzzer flag {flag!r}: expected -name=value")
            if name in RESERVED_FLAGS:
                raise ValueError(f"libFuzzer flag -{name} is set by the campaign; see --help")


@dataclass
class _Worker:
    index: int
    log: Path
    proc: subprocess.Popen | None = None
    runs: int = 0
    run_offset: int = 0  # where the current run's output starts in the log
    execs_done: int = 0  # executions of finished runs
    execs: int = 0  # of the current run, as libFuzzer last reported
    rate: int = 0
    failures: int = 0  # runs in a row that ended without leaving an artifact
    retired: bool = False


class Campaign:
    """One campaign in ``out``: ``run()`` fuzzes and returns the summary."""

    def __init__(self, target: Target, script: Path, driver: str | None, out: Path,
                 config: CampaignConfig, corpus: Iterable[Path] = (),
                 progress: Callable[[str], None] = lambda line: None, target_ref: str | None = None) -> None:
        """``target_ref`` is how the replay command names the target (its name, or its script)."""
        self.target, self.script, self.config, self.progress = target, script, config, progress
        self.target_ref = target_ref or target.name
        self.driver = driver if target.needs_driver else None
        # Absolute, the replay commands work from anywhere; not resolved, a link is refused.
        self.out = out = files.own_dir(os.path.abspath(out))
        self.corpus_dir = out / "corpus"
        self.artifacts_dir = out / "artifacts"
        self.findings_dir = out / "findings"
        self.logs_dir = out / "logs"
        for d in (self.corpus_dir, self.artifacts_dir, self.findings_dir, self.logs_dir):
            files.own_dir(d)
        self.journal = out / "findings.jsonl"
        os.close(files.open_append(self.journal))
        # Support-probe verdicts shared by the workers, their restarts and the replays: a
        # restart or a replay of a compiled driver does not probe every seed's operation again.
        self.verdicts_dir: Path | None = None
        if config.share_probe_verdicts:
            from nncert.drivers.probe_verdicts import VerdictStore
            self.verdicts_dir = out / "probe-verdicts"
            VerdictStore(self.verdicts_dir).clear()  # this campaign's, for this code
        self.findings = recorded_findings(self.journal)  # key -> record, earlier campaigns' first
        self.earlier = set(self.findings)
        numbers = [r["number"] for r in self.findings.values()] + \
            [int(m[0]) for p in self.findings_dir.iterdir() if (m := re.match(r"\d+", p.name))]
        self.last_number = max(numbers, default=0)  # an earlier finding's directory is never reused
        self._expectations: list[Any] | None = None  # the driver's, loaded at the first finding
        self.duplicates: dict[str, int] = {}  # key -> times found again in this campaign
        self.seen = {p.name for p in self.artifacts_dir.iterdir()}  # a previous run's are left alone
        self.started = time.monotonic()
        self.deadline = self.started + config.time  # set again when run() starts the workers
        self.ready_after: float | None = None  # seconds until the first worker was fuzzing
        self.interrupted = False  # stopped by Ctrl-C before its time was up
        seeds = write_seeds(target, self.corpus_dir, config.max_seeds)
        for directory in corpus:
            for path in sorted(Path(directory).iterdir()):
                if path.is_file():
                    data = path.read_bytes()
                    files.write_atomic(self.corpus_dir / content_name(data), data, sync=False)
        self.n_seeds = len(seeds)
        self.workers = [_Worker(i, self.logs_dir / f"worker-{i}.log") for i in range(config.jobs)]
        for w in self.workers:
            files.write_atomic(w.log, "", sync=False)
            files.write_atomic(self._hits_file(w), "", sync=False)  # this campaign's hits only
        self._last_progress = self.started

    # --- workers

    def _command(self, w: _Worker) -> list[str]:
        remaining = max(1, int(self.deadline - time.monotonic()))
        cmd = script_command(self.script, self.driver)
        if self.config.keep_going:
            cmd.append(f"{KEEP_GOING}{self._hits_file(w)}")
        if self.verdicts_dir is not None:
            cmd.append(f"{PROBE_VERDICTS}{self.verdicts_dir}")
        cmd += [f"-timeout={self.config.timeout}", f"-max_total_time={remaining}",
                f"-artifact_prefix={self.artifacts_dir}{os.sep}", "-print_final_stats=1"]
        if self.config.seed is not None:
            cmd.append(f"-seed={self.config.seed + w.index + 1000 * w.runs}")
        return [*cmd, *self.config.extra_flags, str(self.corpus_dir)]

    def _hits_file(self, w: _Worker) -> Path:
        return self.logs_dir / f"worker-{w.index}.hits"

    def _start(self, w: _Worker) -> None:
        w.run_offset = w.log.stat().st_size
        w.execs = w.rate = 0
        with os.fdopen(files.open_append(w.log), "ab") as log:
            log.write(f"--- run {w.runs + 1}: {shlex.join(self._command(w))}\n".encode())
            log.flush()
            w.proc = subprocess.Popen(self._command(w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      start_new_session=True)  # its own group: killed whole
        w.runs += 1

    def _run_log(self, w: _Worker) -> str:
        """The end of the worker's log for its current run."""
        with w.log.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(w.run_offset, size - 16384))
            return f.read().decode(errors="replace")

    def _read_status(self, w: _Worker) -> None:
        log = self._run_log(w)
        found = _STATUS.findall(log)
        if found:
            execs, _, rate = found[-1]
            w.execs, w.rate = int(execs), int(rate)
        final = _FINAL_EXECS.findall(log)  # a run that ended by itself: the exact count
        if final:
            w.execs = max(w.execs, int(final[-1]))

    def _stop(self, w: _Worker) -> None:
        if w.proc is not None and w.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait()

    def _after_exit(self, w: _Worker, new_artifacts: int) -> None:
        self._read_status(w)
        w.execs_done += w.execs
        w.execs = w.rate = 0
        code = w.proc.returncode if w.proc is not None else 0
        if w.proc is not None:  # what the worker started (a probe child) goes with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.proc.pid, signal.SIGKILL)
        w.proc = None
        # A run that wrote an artifact found something, even when the artifact is one already
        # seen (libFuzzer names artifacts by content: the same crash found again).
        wrote = "Test unit written to" in self._run_log(w)
        w.failures = 0 if new_artifacts or code == 0 or wrote else w.failures + 1
        if w.failures >= 3:  # it cannot even start: a broken script or driver
            w.retired = True
            tail = w.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise CampaignError(f"fuzz worker {w.index} exits with status {code} without finding "
                                f"anything, 3 times in a row; last line of {w.log}: {tail[0]}")
        if self.deadline - time.monotonic() >= 1.0:
            self._start(w)
        else:
            w.retired = True

    # --- findings

    def _scan(self) -> int:
        """Handle every artifact not seen yet; returns how many there were."""
        new = []
        for path in self.artifacts_dir.iterdir():
            if path.name in self.seen or path.name.startswith("."):  # a worker's file being written
                continue
            with contextlib.suppress(FileNotFoundError):
                new.append((path.stat().st_mtime, path))
        for _, path in sorted(new):
            self.seen.add(path.name)
            kind, _, digest = path.name.partition("-")
            if kind not in ARTIFACT_KINDS:
                continue
            if kind in _FATAL_KINDS:  # a seed that crashes would stop every restarted worker at once
                (self.corpus_dir / digest).unlink(missing_ok=True)
            self._finding(path, kind)
        return len(new)

    def _known(self, test: str) -> Any:
        """The driver's expectation (expectations.toml) covering conformance test ``test``, or None:
        a known discrepancy is still reported, marked as such."""
        if not test or self.driver is None:
            return None
        if self._expectations is None:
            from nncert.testing import expectations
            try:
                self._expectations = expectations.load(self.driver)
            except (ValueError, OSError) as e:  # an unreadable file must not stop the campaign
                self.progress(f"  (the expectations of {self.driver} cannot be read: {e})")
                self._expectations = []
            self._match = expectations.match
        return self._match(self._expectations, test)

    def _replay_timeout(self) -> float:
        return 2.0 * self.config.timeout + 2.0

    def _finding(self, path: Path, artifact_kind: str) -> None:
        data = path.read_bytes()
        verdict = replay(self.target, self.driver, data, self._replay_timeout(), self.verdicts_dir)
        if not verdict.found:  # libFuzzer saw something the replay does not: keep it, flagged
            verdict = Verdict("UNREPRODUCED", f"UNREPRODUCED|{artifact_kind}|",
                              f"libFuzzer reported a {artifact_kind}; the replay ran cleanly",
                              detail=verdict.detail)
        elapsed = round(time.monotonic() - self.started, 1)
        if verdict.key in self.findings:
            self.duplicates[verdict.key] = self.duplicates.get(verdict.key, 0) + 1
            duplicate: dict[str, Any] = {"event": "duplicate", "key": verdict.key, "artifact": str(path),
                                         "elapsed_s": elapsed}
            if verdict.test:  # the same key on another catalogue case: is that one expected?
                known = self._known(verdict.test)
                duplicate.update(test=verdict.test, known=known is not None)
                first = self.findings[verdict.key]
                if known is None and first.get("known"):
                    self.progress(f"  finding #{first['number']} {verdict.key} again, on {verdict.test}, "
                                  f"no expected failure of {self.driver}: {verdict.message} ({path})")
            self._journal(duplicate)
            return
        self.last_number = number = self.last_number + 1
        where = files.own_dir(self.findings_dir / finding_dir_name(number, verdict.key))
        record: dict[str, Any] = {
            "event": "finding", "number": number, "key": verdict.key, "kind": verdict.kind,
            "message": verdict.message, "signal": verdict.signal, "frames": verdict.frames,
            "artifact": str(path), "artifact_kind": artifact_kind, "elapsed_s": elapsed,
            "target": self.target.name, "driver": self.driver, "dir": str(where),
            "size": len(data), "input_base64": base64.b64encode(data).decode(),
        }
        known = self._known(verdict.test)
        if known is not None:
            record["known"] = {"test": verdict.test, "reason": known.reason, "source": str(known.source)}
        self.findings[verdict.key] = record
        self._journal(record)  # at once: a campaign killed during minimisation keeps it
        note = f" [known: {verdict.test} is an expected failure of {self.driver}]" if known else ""
        self.progress(f"  new finding #{number} {verdict.key}: {verdict.message}{note}")
        files.write_atomic(where / "original", data)
        minimal = data
        if verdict.kind in ("FINDING", "EXCEPTION", "CRASH"):  # a HANG costs a timeout per attempt
            budget = min(self.config.minimise_time, max(2.0, self.deadline - time.monotonic()))
            minimal = minimise(data, verdict.key, lambda d: self._same(replay(
                self.target, self.driver, d, self._replay_timeout(), self.verdicts_dir), verdict), budget)
        self._write_spec(where, record, verdict, data, minimal)

    @staticmethod
    def _same(candidate: Verdict, verdict: Verdict) -> bool:
        """Whether a minimisation candidate shows the finding: its key, and for a Finding on a
        catalogue case, that case (dropping bytes can move an execute input onto another case
        with the same key, perhaps one the driver's expectations list)."""
        return candidate.key == verdict.key and candidate.test == verdict.test

    def _write_spec(self, where: Path, record: dict[str, Any], verdict: Verdict, original: bytes,
                    minimal: bytes) -> None:
        input_path = where / "minimized"
        files.write_atomic(input_path, minimal)
        command = replay_command(self.target_ref, input_path, self.driver)
        try:
            description = self.target.describe(minimal)
        except Exception as e:
            description = f"(describe failed: {type(e).__name__}: {e})"
        spec = {
            "target": self.target.name, "driver": self.driver, "key": verdict.key, "kind": verdict.kind,
            "message": verdict.message, "signal": verdict.signal, "frames": verdict.frames,
            "test": verdict.test, "describe": description, "input_hex": minimal.hex(),
            "input_base64": base64.b64encode(minimal).decode(), "input_size": len(minimal),
            "original_size": len(original), "original_sha1": content_name(original),
            "command": command, "detail": verdict.detail[-2000:],
        }
        standalone = standalone_command(where, spec)
        if standalone:
            spec["standalone_command"] = standalone
        files.write_atomic(where / "spec.json", json.dumps(spec, indent=1) + "\n")
        files.write_atomic(where / "command.txt", command + "\n" + (standalone + "\n" if standalone else ""))
        record.update(minimized=str(input_path), minimized_size=len(minimal), command=command,
                      standalone_command=standalone)
        self._journal({"event": "minimized", "key": verdict.key, "file": str(input_path),
                       "size": len(minimal), "original_size": len(original), "command": command,
                       "standalone_command": standalone})

    def _journal(self, record: dict[str, Any]) -> None:
        with open(files.open_append(self.journal), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # --- the loop

    def _status(self) -> dict[str, Any]:
        for w in self.workers:
            if w.proc is not None:
                self._read_status(w)
        return {"elapsed_s": round(time.monotonic() - self.started, 1),
                "execs": sum(w.execs_done + w.execs for w in self.workers),
                "exec_per_s": sum(w.rate for w in self.workers if w.proc is not None),
                "corpus": sum(1 for _ in self.corpus_dir.iterdir()),
                "findings": len(self.findings) - len(self.earlier),  # new in this campaign
                "duplicates": sum(self.duplicates.values()),
                "worker_hits": sum(self._worker_hits().values()),
                "worker_runs": sum(w.runs for w in self.workers)}

    def _worker_hits(self) -> dict[str, int]:
        return worker_hits(self._hits_file(w) for w in self.workers)

    def _report_progress(self) -> None:
        s = self._status()
        self.progress(f"[{s['elapsed_s']:6.1f} s] execs {s['execs']} ({s['exec_per_s']}/s) corpus "
                      f"{s['corpus']} findings {s['findings']} (+{s['duplicates']} duplicates, "
                      f"{s['worker_hits']} hits in workers) worker runs {s['worker_runs']}")
        self._last_progress = time.monotonic()

    def run(self) -> dict[str, Any]:
        """Fuzz until the time is up; every finding is journaled as it is classified."""
        # libFuzzer checks -max_total_time only between inputs and not while it loads its corpus
        # (a restarted worker re-runs it all), and counts it from its own start, after the
        # script's imports: at the deadline the workers are interrupted (libFuzzer then prints
        # its final stats, the exact count of executions, and exits), after a grace killed.
        grace = 3.0
        interrupted = False
        # The time budget is the workers': writing the corpus above does not use it up, nor
        # does their start-up (up to config.startup): it counts from the first worker ready.
        self.started = time.monotonic()
        self.ready_after = None
        self.deadline = self.started + self.config.startup + self.config.time
        try:
            for w in self.workers:
                self._start(w)
            while True:
                if self.ready_after is None and any(w.proc is not None and _READY.search(self._run_log(w))
                                                    for w in self.workers):
                    now = time.monotonic()
                    self.ready_after = round(now - self.started, 1)
                    # at most the allowance: a worker ready later does not put the end off (the
                    # workers' own -max_total_time, startup + time, would then end them first)
                    self.deadline = min(now, self.started + self.config.startup) + self.config.time
                exited = [w for w in self.workers if w.proc is not None and w.proc.poll() is not None]
                new = self._scan()
                for w in exited:
                    self._after_exit(w, new)
                if time.monotonic() - self._last_progress >= self.config.progress_every:
                    self._report_progress()
                if all(w.proc is None for w in self.workers):
                    break
                if time.monotonic() > self.deadline and not interrupted:
                    interrupted = True
                    for w in self.workers:
                        if w.proc is not None and w.proc.poll() is None:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(w.proc.pid, signal.SIGINT)
                if time.monotonic() > self.deadline + grace:
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:  # Ctrl-C: the campaign ends now, with what it found so far
            self.interrupted = True
        finally:
            for w in self.workers:
                self._stop(w)
        self._scan()
        return self._summary()

    def _summary(self) -> dict[str, Any]:
        """This campaign's figures and what it found: its new findings and the earlier ones it
        found again (``earlier``); those it did not meet stay in the journal, counted in
        ``earlier_findings``."""
        found = {key: r for key, r in self.findings.items()
                 if key not in self.earlier or key in self.duplicates}
        status = self._status()
        summary = {
            "target": self.target.name, "driver": self.driver, "script": str(self.script),
            "nncert": __version__,
            "time_s": self.config.time, "jobs": self.config.jobs, "timeout_s": self.config.timeout,
            "seed": self.config.seed, "seeds": self.n_seeds, **status,
            # the mean over the campaign (the workers' own rates, which progress shows, are gone
            # once they stopped), seed runs included
            "exec_per_s": round(status["execs"] / status["elapsed_s"], 1) if status["elapsed_s"] else 0,
            "startup_s": self.ready_after,  # until the first worker fuzzed (None: none did)
            "interrupted": self.interrupted,
            "earlier_findings": len(self.earlier),
            # key -> times the workers met it, going on past it (keep_going): the worker's own
            # classification, each key's first input replayed for the record above
            "worker_hits_by_key": self._worker_hits(),
            "findings_by_key": {key: {"count": (key not in self.earlier) + self.duplicates.get(key, 0),
                                      "number": r["number"], "earlier": key in self.earlier,
                                      "kind": r.get("kind"), "message": r.get("message"),
                                      "command": r.get("command"), "dir": r.get("dir"),
                                      "standalone_command": r.get("standalone_command"),
                                      "known": r.get("known")}
                                for key, r in found.items()},
        }
        files.write_atomic(self.out / "summary.json", json.dumps(summary, indent=1) + "\n")
        return summary


def script_command(script: Path, driver: str | None) -> list[str]:
    """How a target's atheris script is run (libFuzzer's flags and directories follow)."""
    cmd = [sys.executable, str(script)]
    if driver is not None:
        cmd += ["--driver", driver]
    return cmd


def finding_dir_name(number: int, key: str) -> str:
    """The directory of finding ``number`` under ``DIR/findings``: ``NNN-KEY``, the key made a name."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("_")[:80]
    return f"{number:03d}-{slug}"


def standalone_command(where: Path, spec: dict[str, Any]) -> str | None:
    """The line that writes a finding's standalone reproducer into ``where/standalone``
    (``nncert repro FINDING --driver X --standalone DIR``, nncert.repro.fuzzed): for a crash,
    hang or wrong result of a target that decodes a model, found on a runtime's driver; None
    for the others (an answer of nncert's driver layer, which no runtime model file shows)."""
    from nncert.drivers import RUNTIMES
    from nncert.repro.fuzzed import FuzzFinding, symptom_of
    from nncert.repro.standalone import StandaloneError

    driver = spec.get("driver")
    if not isinstance(driver, str) or driver.split(":", 1)[0] not in RUNTIMES:
        return None
    try:
        symptom_of(FuzzFinding(where, spec, b""))
    except StandaloneError:
        return None
    return shlex.join(["nncert", "repro", str(where), "--driver", driver, "--standalone",
                       str(where / "standalone")])


def replay_command(target: str, path: Path, driver: str | None) -> str:
    """The one line that replays a finding."""
    cmd = ["nncert", "fuzz", "replay", target, str(path)]
    if driver is not None:
        cmd += ["--driver", driver]
    return shlex.join(cmd)
