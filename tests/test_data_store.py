"""The data layer: pinned-file verification, clear errors, and the real download path."""

import hashlib
import http.server
import threading
from functools import partial
from pathlib import Path

import pytest

from lm_eval_ext.data import sources, store
from lm_eval_ext.data.sources import Benchmark, PinnedFile
from lm_eval_ext.errors import DataCorruptError, DataMissingError


def _mirror_bbq(src: Path, dst: Path, *, skip: str | None = None) -> Path:
    """A data folder of symlinks to the real BBQ files (optionally one left out)."""
    for pinned in sources.BBQ.files:
        if pinned.path == skip:
            continue
        target = dst / "bbq" / pinned.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(src / "bbq" / pinned.path)
    return dst


def test_shared_data_verifies(data_dir):
    assert store.benchmark_dir("bbq") == data_dir / "bbq"


def test_missing_file_names_file_and_setting(data_dir, tmp_path, monkeypatch):
    _mirror_bbq(data_dir, tmp_path, skip="data/Religion.jsonl")
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    with pytest.raises(DataMissingError) as err:
        store.benchmark_dir("bbq")
    message = str(err.value)
    assert str(tmp_path / "bbq" / "data" / "Religion.jsonl") in message
    assert "LM_EVAL_EXT_DATA" in message and "1200 rows" in message


def test_truncated_file_reports_row_count(data_dir, tmp_path, monkeypatch):
    _mirror_bbq(data_dir, tmp_path, skip="data/Religion.jsonl")
    lines = (data_dir / "bbq/data/Religion.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "bbq/data/Religion.jsonl").write_text("".join(lines[:-3]))
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    with pytest.raises(DataCorruptError) as err:
        store.benchmark_dir("bbq")
    message = str(err.value)
    assert "Religion.jsonl" in message and "1197 rows, expected 1200" in message


def test_edited_content_with_right_row_count_is_corrupt(data_dir, tmp_path, monkeypatch):
    _mirror_bbq(data_dir, tmp_path, skip="data/Religion.jsonl")
    text = (data_dir / "bbq/data/Religion.jsonl").read_text().replace("Muslim", "Muslin", 1)
    (tmp_path / "bbq/data/Religion.jsonl").write_text(text)
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    with pytest.raises(DataCorruptError, match="rows are right but their content differs"):
        store.benchmark_dir("bbq")


@pytest.fixture
def served_files(tmp_path):
    """A loopback HTTP server with two small files, and a Benchmark pinned to them."""
    root = tmp_path / "upstream"
    (root / "data").mkdir(parents=True)
    payloads = {"data/a.jsonl": b'{"x": 1}\n{"x": 2}\n', "data/b.jsonl": b'{"y": 3}\n'}
    for name, body in payloads.items():
        (root / name).write_bytes(body)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    files = tuple(
        PinnedFile(path=name, url=f"{base}/{name}", sha256=hashlib.sha256(body).hexdigest(),
                   size=len(body), rows=body.count(b"\n"), row_format="jsonl")
        for name, body in payloads.items()
    )
    yield Benchmark(name="toy", repo="example/toy", commit="0" * 40, license="-", files=files)
    server.shutdown()


def test_download_into_cache_when_no_data_setting(served_files, tmp_path, monkeypatch):
    monkeypatch.delenv("LM_EVAL_EXT_DATA")
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sources.BENCHMARKS, "toy", served_files)
    folder = store.benchmark_dir("toy")
    assert folder == tmp_path / "cache" / "data" / f"toy@{'0' * 40}"
    assert (folder / "data/a.jsonl").read_bytes() == b'{"x": 1}\n{"x": 2}\n'


def test_download_with_wrong_checksum_is_rejected(served_files, tmp_path, monkeypatch):
    monkeypatch.delenv("LM_EVAL_EXT_DATA")
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    bad = served_files.files[0].__class__(**{**served_files.files[0].__dict__, "sha256": "0" * 64})
    toy = Benchmark("toy", "example/toy", "0" * 40, "-", (bad,))
    monkeypatch.setitem(sources.BENCHMARKS, "toy", toy)
    with pytest.raises(DataCorruptError, match="upstream file changed"):
        store.benchmark_dir("toy")
    assert not list((tmp_path / "cache").rglob("a.jsonl"))


def test_offline_without_setting_names_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("LM_EVAL_EXT_DATA")
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    unreachable = PinnedFile("data/a.jsonl", "http://127.0.0.1:9/a.jsonl", "0" * 64, 1, 1, "jsonl")
    monkeypatch.setitem(sources.BENCHMARKS, "toy", Benchmark("toy", "x/y", "0" * 40, "-",
                                                             (unreachable,)))
    with pytest.raises(DataMissingError) as err:
        store.benchmark_dir("toy")
    assert "LM_EVAL_EXT_DATA" in str(err.value) and "data/a.jsonl" in str(err.value)


def test_a_relative_data_setting_is_shown_resolved(data_dir, tmp_path, monkeypatch):
    """trial 15: README's `LM_EVAL_EXT_DATA=../shared/data`, run from a clone elsewhere, was
    named only as written; where it points from the current folder is the clue."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("LM_EVAL_EXT_DATA", "../shared/data")
    with pytest.raises(DataMissingError) as err:
        store.benchmark_dir("bbq")
    assert (f"LM_EVAL_EXT_DATA is set to '../shared/data' ({tmp_path / 'shared' / 'data'} from "
            f"the current folder {tmp_path / 'work'})") in str(err.value)


def test_our_tasks_data_is_verified_before_the_model_loads(data_dir, tmp_path, monkeypatch):
    """trial 15: a run whose LM_EVAL_EXT_DATA held no BBQ loaded the model first (minutes on a
    GPU), then failed on the missing file."""
    from lm_eval_ext.command_preflight import check_command_line

    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    with pytest.raises(DataMissingError, match=f"missing benchmark file {tmp_path}/bbq/data/"):
        check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_12p5pct_loglik"])
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(data_dir))  # the fix: the folder that holds it
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_12p5pct_loglik"])
