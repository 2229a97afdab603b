"""A corrupt LM cache file (issue #31 point 4): one clear line naming the file and the fix; `llmguide cache
clear` and `cache check` work on it; training moves it aside (never deletes it) and goes on with a fresh cache."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llmguide.cli import main
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.cli import cache_command
from llmguide.llm.cache.store import CacheCorruptError, LLMCache
from test_llm_cache import NGramLM


def _filled(path: Path, n: int = 600) -> Path:
    with LLMCache(path) as cache:
        for i in range(n):
            cache.put(f"key{i}", {"text": f"answer {i} " + "x" * 200})
        cache.add_seen("ns", ["caption a", "caption b"])
    return path


def _not_a_database(path: Path) -> bytes:
    data = b"this is not SQLite at all\n" * 400
    path.write_bytes(data)
    return data


def _damaged_page(path: Path) -> bytes:
    """A sound header and schema; the pages holding one key (its row's and the primary-key index's)
    overwritten (a disk fault)."""
    _filled(path)
    page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    pages = {i // page for i in range(len(data)) if data.startswith(b"key300", i)}   # the row's, the key index's
    assert len(pages) >= 2 and 0 not in pages
    for p in pages:
        data[p * page:(p + 1) * page] = b"\xff" * page
    path.write_bytes(bytes(data))
    return bytes(data)


def _moved(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.glob(f"{path.name}.corrupt-*") if not p.name.endswith(("-wal", "-shm")))


@pytest.mark.parametrize("damage", [_not_a_database, _damaged_page])
def test_training_moves_a_corrupt_cache_aside_and_continues_with_a_fresh_one(tmp_path, caplog, damage):
    path = tmp_path / "llm_cache.sqlite"
    original = damage(path)
    with caplog.at_level(logging.WARNING, logger="llmguide.llm"):
        cache = LLMCache(path)                 # the default (what llm.factory uses for training)
    moved = _moved(path)
    assert len(moved) == 1 and moved[0].read_bytes() == original      # moved, byte for byte, not deleted
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and str(path) in warning[0] and str(moved[0]) in warning[0]
    lm = NGramLM()
    cached = CachedLM(lm, cache)
    first = cached.generate(["you see a tree. "], max_tokens=4)[0]
    again = cached.generate(["you see a tree. "], max_tokens=4)[0]
    assert first.error is None and again.cached and lm.calls == 1 and len(cache) == 1
    cached.close()
    cache.close()
    with LLMCache(path, on_corrupt="raise") as fresh:               # the new file is sound
        assert len(fresh) == 1 and fresh.seen("ns") == []


def test_opening_for_inspection_raises_one_line_naming_the_file_and_the_fix(tmp_path):
    path = tmp_path / "c.sqlite"
    original = _not_a_database(path)
    with pytest.raises(CacheCorruptError) as err:
        LLMCache(path, on_corrupt="raise")
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "llmguide cache clear" in message
    assert path.read_bytes() == original and _moved(path) == []       # inspecting changes nothing


@pytest.mark.parametrize("damage", [_not_a_database, _damaged_page])
def test_cache_cli_on_a_corrupt_file(tmp_path, capsys, damage):
    path = tmp_path / "c.sqlite"
    original = damage(path)
    # stats / export: exit 1, one line on stderr naming the file and the fix, no traceback
    for argv in (["cache", "stats"], ["cache", "export", str(tmp_path / "out.jsonl")]):
        assert main([*argv, "--path", str(path)]) == 1
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and "cache clear" in lines[0], out.err
        assert "Traceback" not in out.err + out.out
    # check: exit 1 and says so; the file is untouched
    assert cache_command("check", path=str(path)) == 1
    out = capsys.readouterr().out
    assert "corrupt" in out and str(path) in out and "cache clear" in out
    assert path.read_bytes() == original
    # clear: moves it aside (kept for the user), leaves an empty sound cache
    assert cache_command("clear", path=str(path)) == 0
    out = capsys.readouterr().out
    moved = _moved(path)
    assert len(moved) == 1 and moved[0].read_bytes() == original and str(moved[0]) in out
    assert cache_command("check", path=str(path)) == 0
    assert "ok (0 entries" in capsys.readouterr().out


def test_cache_check_on_a_sound_file(tmp_path, capsys):
    path = _filled(tmp_path / "c.sqlite", n=5)
    assert main(["cache", "check", "--path", str(path)]) == 0
    assert f"LM cache {path}: ok (5 entries" in capsys.readouterr().out


def test_processes_opening_one_corrupt_cache_together_move_it_aside_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    _not_a_database(path)
    start = time.time() + 2.0
    script = textwrap.dedent(f"""
        import sys, time
        from llmguide.llm.cache.store import LLMCache
        time.sleep(max(0.0, {start} - time.time()))   # start together
        with LLMCache({str(path)!r}) as cache:
            cache.put("from-" + sys.argv[1], {{"text": sys.argv[1]}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)], stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert len(_moved(path)) == 1                       # one move; nobody moved another's fresh cache
    with LLMCache(path, on_corrupt="raise") as cache:
        assert sorted(k for k in ("from-0", "from-1", "from-2") if k in cache) == ["from-0", "from-1", "from-2"]
