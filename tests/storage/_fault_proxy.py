"""A small TCP fault proxy on 127.0.0.1: forwards bytes to a server, and cuts or delays on demand.

Threads, one pair per connection, bounded by `max_connections`; every socket has a timeout, and
the proxy stops itself after `lifetime` seconds if a test forgets to. Faults (all mutable while
running, read per connection):
  cut_upstream_after:   close the connection once this many client->server bytes were forwarded.
  cut_downstream_after: close it once this many server->client bytes were forwarded.
  delay:                seconds to sleep before forwarding the first server->client bytes.
  cut_connections:      the next N connections get the cuts above; later ones pass (None = all).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass


@dataclass
class Faults:
    cut_upstream_after: int | None = None
    cut_downstream_after: int | None = None
    delay: float = 0.0
    cut_connections: int | None = None


class FaultProxy:
    """Listens on 127.0.0.1:<free port> and forwards to (host, port). Use as a context manager."""

    def __init__(self, host: str, port: int, faults: Faults | None = None, *, max_connections: int = 64,
                 lifetime: float = 120.0) -> None:
        self.target = (host, port)
        self.faults = faults or Faults()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._slots = threading.BoundedSemaphore(max_connections)
        self._deadline = time.monotonic() + lifetime
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self.cuts = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            if not self._slots.acquire(timeout=5):
                client.close()
                continue
            with self._lock:
                self.connections += 1
                faulty = self.faults.cut_connections is None or self.faults.cut_connections > 0
                if faulty and self.faults.cut_connections is not None:
                    self.faults.cut_connections -= 1
            threading.Thread(target=self._connection, args=(client, faulty), daemon=True).start()

    def _connection(self, client: socket.socket, faulty: bool) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            self._slots.release()
            return
        client.settimeout(10)
        upstream.settimeout(10)
        up_limit = self.faults.cut_upstream_after if faulty else None
        down_limit = self.faults.cut_downstream_after if faulty else None
        done = threading.Event()

        def pump(source: socket.socket, sink: socket.socket, limit: int | None, downstream: bool) -> None:
            sent = 0
            delayed = False
            try:
                while not done.is_set() and not self._stop.is_set():
                    data = source.recv(65536)
                    if not data:
                        break
                    if downstream and not delayed and self.faults.delay:
                        time.sleep(self.faults.delay)
                        delayed = True
                    if limit is not None and sent + len(data) >= limit:
                        sink.sendall(data[:max(0, limit - sent)])
                        with self._lock:
                            self.cuts += 1
                        break
                    with self._lock:  # counted before sending: the peer may act on the bytes at once
                        if downstream:
                            self.bytes_down += len(data)
                        else:
                            self.bytes_up += len(data)
                    sink.sendall(data)
                    sent += len(data)
            except OSError:
                pass
            finally:
                done.set()
                for sock in (client, upstream):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        other = threading.Thread(target=pump, args=(upstream, client, down_limit, True), daemon=True)
        other.start()
        pump(client, upstream, up_limit, False)
        other.join(timeout=15)
        client.close()
        upstream.close()
        self._slots.release()
