"""A campaign worker: one process runs cells that share a loaded model, one after another.

``python -m lm_eval_ext.campaign.worker`` reads one job per line on its standard input
(``{"argv": [lm_eval arguments]}``), runs lm-eval's own command line on it in this process (as
a cell process does: :mod:`lm_eval_ext.campaign.cell`) with loaded models kept between jobs
(:mod:`lm_eval_ext.backends.warm`), and after each job writes :data:`END` and
``{"returncode": N}`` on one line of its standard output. A job that fails ends the worker after
its line, so a broken process never runs the next cell. :class:`Worker` is the campaign's side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import IO

#: the line prefix that ends a job's output (never printed by lm-eval)
END = b"\x1e[lm-eval-ext worker] job ended "


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: this child process gets SIGKILL when the campaign process dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_job(argv: list[str]) -> int:
    """lm-eval's command line on ``argv`` in this process; its exit code."""
    from lm_eval_ext.command_preflight import claim_response_cache
    from lm_eval_ext.errors import LmEvalExtError
    from lm_eval_ext.plugin.lm_eval_cli import one_line_error, run_lm_eval_cli

    try:
        claim_response_cache(argv)  # the cell's --use_cache, as `lm-eval-ext run` claims it
        run_lm_eval_cli(argv, "lm_eval")
    except SystemExit as stop:
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:  # the cell's log gets the cause; the campaign records the failure
        shown = exc if isinstance(exc, LmEvalExtError) else one_line_error(exc)
        if not isinstance(shown, LmEvalExtError):  # not one we can name: the traceback
            traceback.print_exc()
            return 1
        print(f"lm_eval: error: {shown}", file=sys.stderr, flush=True)  # what was wrong, the fix
        return shown.exit_code
    return 0


def main(jobs: IO[str]) -> int:
    """Run every job read from ``jobs``; stop after the first that fails."""
    from lm_eval_ext.backends.warm import keep_loaded_models

    keep_loaded_models()
    for line in jobs:
        if not line.strip():
            continue
        code = run_job(json.loads(line)["argv"])
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(1, END + json.dumps({"returncode": code}).encode() + b"\n")
        if code != 0:
            return code
    return 0


class Worker:
    """The campaign's side of one worker process: started on the first job, reused after."""

    def __init__(self, echo: bool = True):
        self.echo = echo
        self._process: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str], log_path: Path) -> int:
        """Run one cell (lm-eval CLI arguments) in the worker; its output goes to ``log_path``.

        A worker that dies during the job (killed, crashed) gives its exit code (or -1) and is
        started afresh for the next job.
        """
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps({"argv": argv}).encode() + b"\n")
            process.stdin.flush()
        except BrokenPipeError:
            return self._ended()
        pending = b""
        with open(log_path, "wb") as log:
            while chunk := process.stdout.read1(65536):
                pending += chunk
                at = pending.find(END)
                if at >= 0:
                    self._write(log, pending[:at])
                    line = pending[at + len(END):].split(b"\n", 1)[0]
                    code = int(json.loads(line)["returncode"])
                    if code != 0:  # the worker ends after a failed job
                        self._ended()
                    return code
                keep = len(END) - 1  # a marker may be split across reads
                self._write(log, pending[:-keep])
                pending = pending[-keep:]
            self._write(log, pending)
        return self._ended()

    def close(self) -> None:
        """End the worker (its standard input closes; it exits after the current job)."""
        if self._process is not None:
            assert self._process.stdin is not None
            try:
                self._process.stdin.close()
            except BrokenPipeError:
                pass
            self._process.wait()
            self._process = None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "lm_eval_ext.campaign.worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if os.name == "posix" else None)
        return self._process

    def _ended(self) -> int:
        """The worker's exit code once it has ended (-1 when it gave none)."""
        process, self._process = self._process, None
        if process is None:
            return -1
        code = process.wait()
        return code if code != 0 else -1

    def _write(self, log: IO[bytes], data: bytes) -> None:
        if data:
            log.write(data)
            if self.echo:
                sys.stderr.buffer.write(data)
                sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.stdin))
