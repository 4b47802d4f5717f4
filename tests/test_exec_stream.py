"""An exec's output is read whole, however early it comes: Docker sends the start's answer
headers and the first frames of output together when the command prints at once and the host is
loaded; docker-py's own reader lost those frames (docker/docker-py#2042), and an `echo` came
back empty with exit code 0 (seen in CI, and 1 in 300 `echo`s on this machine under load)."""

from __future__ import annotations

import socket
import struct
import threading

import docker

from attempts.run.docker.runtime import exec_output

HEADERS = (
    b"HTTP/1.1 101 UPGRADED\r\n"
    b"Content-Type: application/vnd.docker.raw-stream\r\n"
    b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
)


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def serve_once(path: str, answer: bytes) -> threading.Thread:
    """A Docker stand-in on a unix socket: it reads one request and sends `answer` in one
    write, as a loaded daemon's headers and output reach the client together."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                head, _, body = request.partition(b"\r\n\r\n")
                length = int(
                    next(
                        (
                            line.split(b":")[1]
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        b"0",
                    )
                )
                while len(body) < length:
                    body += conn.recv(4096)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_output_that_arrives_with_the_answers_headers_is_kept(tmp_path):
    path = str(tmp_path / "docker.sock")
    output = frame(1, b"four\n") + frame(2, b"warn\n") + frame(1, b"five\n")
    server = serve_once(path, HEADERS + output)
    with docker.APIClient(base_url=f"unix://{path}", version="1.41", timeout=10) as api:
        got = list(exec_output(api, "0123456789ab"))
    server.join(timeout=10)
    assert got == [("stdout", b"four\n"), ("stderr", b"warn\n"), ("stdout", b"five\n")]


def test_a_frame_cut_short_gives_what_came_and_ends(tmp_path):
    path = str(tmp_path / "docker.sock")
    server = serve_once(path, HEADERS + frame(1, b"whole\n") + frame(1, b"cut short")[:-5])
    with docker.APIClient(base_url=f"unix://{path}", version="1.41", timeout=10) as api:
        got = list(exec_output(api, "0123456789ab"))
    server.join(timeout=10)
    assert got == [("stdout", b"whole\n"), ("stdout", b"cut ")]
