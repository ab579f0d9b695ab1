"""`haggler` runs its threads (the local sampler's worker, the trainer) in one glibc malloc arena."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import ctypes, sys, tempfile, threading
    from haggler.cli import one_malloc_arena
    if sys.argv[1] == "one":
        one_malloc_arena()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = libc.fopen.restype = ctypes.c_void_p
    libc.free.argtypes = libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    def work():  # each thread's first malloc is where glibc hands it an arena
        libc.free(libc.malloc(100_000))
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    with tempfile.NamedTemporaryFile("r", suffix=".xml") as f:
        stream = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(f.read().count("<heap nr="))
""")


def arenas(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_one_malloc_arena_keeps_every_thread_in_one_heap():
    assert arenas("default") > 1  # glibc's default: threads get arenas of their own
    assert arenas("one") == 1


def test_the_cli_sets_one_arena_before_anything_else(monkeypatch):
    import haggler.cli as cli

    calls = []
    monkeypatch.setattr(cli, "one_malloc_arena", lambda: calls.append("arena"))
    monkeypatch.setattr(cli, "build_parser", lambda: calls.append("parser") or (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        cli.main([])
    assert calls == ["arena", "parser"]
