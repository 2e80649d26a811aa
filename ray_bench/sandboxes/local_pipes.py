"""The output pipes of a ``local`` command, read so that a stray child cannot hold them.

asyncio's subprocess pipes end at EOF, and a background child of the command that keeps them
open (``sleep 100 & echo hi``, no redirect) holds the EOF off for as long as it lives. The exec
used to wait 5 s for it and then return empty streams: what the command had printed was lost.

Here the runner owns the read ends (non-blocking, read on the event loop as they fill). When the
command has exited, everything it wrote is in the pipe: :meth:`OutputPipe.finish` waits for the
EOF a little (a child still finishing a write), then reads what the pipe holds and closes the read
end. A child that writes to it afterwards gets EPIPE, as under any reader that has gone away; one
that redirected its output, as a daemon should, is not touched (it lives until the sandbox is
deleted, which kills every process group the sandbox started)."""

from __future__ import annotations

import asyncio
import contextlib
import os

from ray_bench.sandboxes.base import ExecWatch, Stream

_CHUNK = 1 << 16
#: Read per wake-up of the loop: a command printing without pause must not starve the other
#: cells the loop serves (the reader is level-triggered and called again at once).
_PER_WAKE = 4 * _CHUNK
#: The most the last read after the exit takes: a Linux pipe holds at most 1 MiB by default
#: (``/proc/sys/fs/pipe-max-size``), so this is all a command can have left in it; a stray child
#: writing without pause cannot keep the exec reading.
_LAST_READ = 1 << 20


class OutputPipe:
    """One stream of one exec: the command writes to :attr:`write_fd`, the first ``cap`` bytes
    are kept, the rest counted in :attr:`dropped`, and ``watch`` sees every chunk as it comes."""

    def __init__(self, name: Stream, cap: int, watch: ExecWatch | None) -> None:
        self._name = name
        self._cap = cap
        self._watch = watch
        self._read_fd, self.write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self.kept = bytearray()
        self.dropped = 0
        self._eof = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Close the parent's copy of the write end (the command has its own) and follow the
        read end."""
        self.close_write()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._read_fd, self._read, _PER_WAKE)

    def close_write(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    async def finish(self, grace: float) -> bytes:
        """Everything written so far: the EOF if it comes within ``grace`` seconds, else what
        the pipe holds now (a stray child still has it open). Closes the pipe."""
        if not self._eof.is_set() and grace > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._eof.wait(), grace)
        self._read(_LAST_READ)
        self.close()
        return bytes(self.kept)

    def close(self) -> None:
        self.close_write()
        if self._read_fd < 0:
            return
        if self._loop is not None:
            self._loop.remove_reader(self._read_fd)
        os.close(self._read_fd)
        self._read_fd = -1

    def _read(self, budget: int) -> None:
        while budget > 0 and not self._eof.is_set():
            try:
                chunk = os.read(self._read_fd, _CHUNK)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                self._eof.set()
                if self._loop is not None:
                    self._loop.remove_reader(self._read_fd)
                return
            budget -= len(chunk)
            if self._watch is not None:
                self._watch.feed(self._name, chunk)
            room = self._cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            self.dropped += max(0, len(chunk) - max(room, 0))
