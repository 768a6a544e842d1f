"""What the broker's TLS receive layer costs per 100 MB, apart from everything else a produce costs: the same
asyncio SSL protocol the broker serves a TLS listener with (server.py's `_serve_tls`), fed the ciphertext of
a TLS 1.3 session in the broker's 256 KiB socket reads, its decrypted bytes handed to an app that keeps them.

    .venv/bin/python benchmarks/tls_receive.py [--mb 20] [--reps 9]

Rule 1 (what is timed): the CPU time of this thread (time.thread_time: a shared machine's preemption does not
count) from the first ciphertext read handed over to the last plaintext byte received, the handshake and the
encryption excluded; the best of `--reps` sessions per row, per 100 MB of plaintext.
Rule 2 (record patterns): "16 KiB records", a sender writing large buffers (every record full); "librdkafka's
mix", what confluent-kafka sends for benchmarks/security.py's produce (seen on the wire): per MiB about 80 % of
the bytes in full 16 KiB records and the rest as two records per message, its 10-byte header and its value
(librdkafka hands OpenSSL each buffer segment with an SSL_write of its own, and pushes a value as a segment of
its own once the request buffer's first allocation is used).
Rule 3 (read paths): "copied" is what the broker runs (its Connection is a Protocol: asyncio reads each record
with SSLObject.read into a new bytes object and joins them); "buffered" is the read path an app that is a
BufferedProtocol gets (SSLObject.read into the app's preallocated buffer, no join), the rewrite issue 24 asked
about. Beside them, "decrypt only": SSLObject.read of the same ciphertext into one preallocated buffer, with no
asyncio: the floor of any Python read path over Python's ssl.
A row that received other than the bytes sent is a shortfall (measure.py Rule 4).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from asyncio import sslproto
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import load, run, shortfall  # noqa: E402

Contexts = tuple[ssl.SSLContext, ssl.SSLContext]  # the server's, the client's
READ = 256 * 1024  # the selector transport's read size, as the broker's sockets read
MIB = 1 << 20
BLOCK = bytes(range(256)) * 8  # 2 KiB of plaintext
MESSAGES_PER_MIB = 224  # librdkafka's mix: this many 10-byte + 1014-byte record pairs after 800 KiB of full records
assert len(BLOCK) * 400 + MESSAGES_PER_MIB * 1024 == MIB  # so both patterns send 1 MiB per MiB asked


class KeepingApp(asyncio.Protocol):
    """The broker's kind of app (a Protocol): counts what it is handed."""

    def __init__(self) -> None:
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        self.received += len(data)


class BufferedApp(asyncio.BufferedProtocol):
    """An app that is a BufferedProtocol: decrypted bytes land in its buffer, copied out once per read."""

    def __init__(self) -> None:
        self.received = 0
        self.buffer = memoryview(bytearray(2 * READ))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.received += len(bytes(self.buffer[:nbytes]))


class Wire(asyncio.Transport):
    """The socket side of the SSL protocol: keeps what the protocol writes (the handshake's replies)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += data

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Session:
    """One TLS 1.3 session: a client SSLObject over memory BIOs, the broker's SSL protocol on the other side."""

    def __init__(self, loop: asyncio.AbstractEventLoop, contexts: Contexts, app: asyncio.BaseProtocol) -> None:
        server_context, client_context = contexts
        self.loop, self.app, self.wire = loop, app, Wire()
        self.done = loop.create_future()
        self.protocol = sslproto.SSLProtocol(loop, app, server_context, self.done, server_side=True)
        self.protocol.connection_made(self.wire)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client = client_context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self._handshake()

    def _handshake(self) -> None:
        for _ in range(8):
            try:
                self.client.do_handshake()
            except ssl.SSLWantReadError:
                pass
            self.feed(self.outgoing.read())
            self.incoming.write(bytes(self.wire.sent))
            self.wire.sent.clear()
            self.loop.run_until_complete(asyncio.sleep(0))
            if self.done.done():
                return
        raise RuntimeError("the TLS handshake did not finish")

    def feed(self, data: bytes) -> None:
        """Hand `data` to the protocol as the selector transport does: get_buffer, fill, buffer_updated."""
        view = memoryview(data)
        while view:
            buffer = self.protocol.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            self.protocol.buffer_updated(size)
            view = view[size:]



def ciphertext(client: ssl.SSLObject, outgoing: ssl.MemoryBIO, mib: int, mixed: bool) -> list[bytes]:
    """`mib` MiB of plaintext encrypted in the record pattern (Rule 2), cut into the broker's reads."""
    for _ in range(mib):
        if not mixed:
            client.write(BLOCK * 512)
            continue
        client.write(BLOCK * 400)
        for _ in range(MESSAGES_PER_MIB):
            client.write(BLOCK[:10])
            client.write(BLOCK[:1014])
    wire = outgoing.read()
    return [wire[i:i + READ] for i in range(0, len(wire), READ)]


def asyncio_row(loop: asyncio.AbstractEventLoop, contexts: Contexts, app_class: type[KeepingApp | BufferedApp],
                mib: int, mixed: bool) -> tuple[float, int]:
    app = app_class()
    session = Session(loop, contexts, app)
    reads = ciphertext(session.client, session.outgoing, mib, mixed)
    started = time.thread_time()
    for chunk in reads:
        session.feed(chunk)
    return time.thread_time() - started, app.received


def decrypt_only_row(contexts: Contexts, mib: int, mixed: bool) -> tuple[float, int]:
    """Rule 3's floor: the server SSLObject of a session reading straight into one buffer."""
    server_context, client_context = contexts
    reads_in, reads_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(reads_in, reads_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    for _ in range(8):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        reads_in.write(client_out.read())
        client_in.write(reads_out.read())
    reads = ciphertext(client, client_out, mib, mixed)
    buffer = memoryview(bytearray(4 * READ))
    received = 0
    started = time.thread_time()
    for chunk in reads:
        reads_in.write(chunk)
        try:
            while count := server.read(len(buffer), buffer):
                received += int(count)  # (typeshed: bytes; with a buffer, SSLObject.read gives a count)
        except ssl.SSLWantReadError:
            pass
    return time.thread_time() - started, received


def contexts_for_run() -> Contexts:
    from sparklog.broker.local_pki import make_pki

    with tempfile.TemporaryDirectory(prefix="sparklog-tls-receive-") as directory:  # loaded, then removed
        pki = make_pki(Path(directory) / "pki")
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(str(pki.broker.keystore))
        client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_context.load_verify_locations(str(pki.ca))
    return server_context, client_context


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=20, help="MiB of plaintext per session")
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    contexts = contexts_for_run()
    loop = asyncio.new_event_loop()
    rows: dict[str, Callable[[bool], tuple[float, int]]] = {"copied (the broker's)": lambda mixed: asyncio_row(loop, contexts, KeepingApp, args.mb, mixed),
            "buffered": lambda mixed: asyncio_row(loop, contexts, BufferedApp, args.mb, mixed),
            "decrypt only": lambda mixed: decrypt_only_row(contexts, args.mb, mixed)}
    print(f"load before: {load()}; {args.mb} MiB per session, best of {args.reps}; {ssl.OPENSSL_VERSION}")
    print(f"{'read path':24} {'16 KiB records':>16} {'librdkafka mix':>16}   (CPU ms per 100 MB)")
    for name, row in rows.items():
        cells = []
        for mixed in (False, True):
            best = float("inf")
            for _ in range(args.reps):
                seconds, received = row(mixed)
                if received != args.mb * MIB:
                    shortfall(f"{name}: received {received} of {args.mb * MIB} bytes")
                best = min(best, seconds)
            cells.append(best / (args.mb * MIB) * 100e6 * 1000)
        print(f"{name:24} {cells[0]:>16.1f} {cells[1]:>16.1f}")
    loop.close()
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
