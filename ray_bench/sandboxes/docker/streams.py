"""A ``docker exec``'s output, read without losing its first bytes.

docker-py's ``exec_start`` reads the multiplexed stream from the raw socket under the HTTP
response. The response's status line and headers were read through a buffered reader, which
takes what the socket holds in one gulp: when the command wrote before the client read the
headers (a loaded host: the client thread is late), its first frames sit in that buffer and the
raw reads never see them. Measured here (dockerd 20.10, docker-py 7.1): ``echo first; sleep 1;
echo second`` came back as ``second`` alone whenever the client read the answer 0.5 s late; under
two xdist workers and another suite, a Daytona fixture exec lost its whole header line this way.

:func:`exec_stream` asks for the same upgrade and reads the frames through that buffered reader."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from docker.types.daemon import CancellableStream

#: A frame: its stream (1 stdout, 2 stderr) and its payload, in order of arrival.
Frame = tuple[int, bytes]
_HEADER = struct.Struct(">BxxxL")
_CHUNK = 1 << 16


def exec_stream(api: Any, exec_id: str) -> CancellableStream:
    """Start exec ``exec_id`` (made without a TTY) and follow its output: an iterator of
    :data:`Frame`; ``close()`` from another thread ends it. Raises ``docker.errors.APIError``
    as ``exec_start`` does."""
    response = api._post_json(
        api._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    api._raise_for_status(response)
    buffered = response.raw._fp.fp  # what read the headers, and may hold the first frames
    # A command may be silent for longer than the client's timeout (an agent thinking).
    api._disable_socket_timeout(buffered.raw)
    return CancellableStream(_frames(buffered), response)


def exec_output(api: Any, exec_id: str) -> bytes:
    """Start exec ``exec_id`` and return all it printed, stdout and stderr in arrival order."""
    stream = exec_stream(api, exec_id)
    try:
        return b"".join(chunk for _, chunk in stream)
    finally:
        stream.close()


def _frames(buffered: Any) -> Iterator[Frame]:
    while True:
        header = buffered.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        stream, length = _HEADER.unpack(header)
        while length > 0:
            chunk = buffered.read1(min(length, _CHUNK))
            if not chunk:
                return
            length -= len(chunk)
            yield stream, chunk
