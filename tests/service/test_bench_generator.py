"""The service benchmark's event generator (valid events, facts every 8th, distinct ids), its
open-loop ratio and senders, and the wait for a quiet service before a cost phase."""

from __future__ import annotations

import subprocess
import sys
import time

from memstack.jobs.bench.service import cost
from memstack.jobs.bench.service.load import TENANT, bench_event
from memstack.schemas.events import EventKind, validate_event


def test_bench_events_are_valid_and_mixed() -> None:
    events = [validate_event(bench_event(i, f"text {i}")) for i in range(32)]
    assert {e.tenant for e in events} == {TENANT}
    assert [e.kind for e in events].count(EventKind.FACT_ASSERTED) == 4
    assert len({e.event_id for e in events}) == 32
    assert all(e.text() == f"text {i}" for i, e in enumerate(events)
               if e.kind is EventKind.MESSAGE)


def test_bench_texts_are_distinct_and_short() -> None:
    from memstack.jobs.bench.service.load import texts

    sample = texts(500)
    assert len(set(sample)) == 500
    assert all(10 <= len(t.split()) <= 25 for t in sample)


def test_the_open_loop_ratio_pairs_each_loaded_burst_with_its_rounds_alone_burst() -> None:
    import pytest

    from memstack.jobs.bench.service import paired_ratio

    got = paired_ratio([200.0, 250.0, 100.0], [180.0, 200.0, 95.0])
    assert (got.median, got.low, got.high) == pytest.approx((0.9, 0.8, 0.95))
    # pairing, not the faster alone burst: a slow round does not pull the others down
    assert paired_ratio([100.0, 300.0], [90.0, 270.0]).median == pytest.approx(0.9)
    with pytest.raises(ValueError, match="pair each"):
        paired_ratio([1.0], [])


def test_the_open_loop_gets_read_whole_responses_on_kept_sockets() -> None:
    """The open loop's plain GETs (:class:`Gets`) against a real HTTP/1.1 server: the
    status and body of each answer (several in one socket's buffer too), the same socket
    kept, a fresh one when the server closed the kept one, and an error status kept."""
    import http.server
    import threading

    from memstack.jobs.bench.service.open_loop import Gets

    seen: list[tuple[str, str | None, int]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization"),
                         self.client_address[1]))
            body = f"answer to {self.path}".encode() * 50
            status = 404 if "missing" in self.path else 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if "close" in self.path:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gets = Gets(f"http://127.0.0.1:{server.server_address[1]}", {"Authorization": "Bearer k"})
        status, body = gets.get("/v1/a", {"subject": "user:1", "k": 10})
        assert status == 200 and body == b"answer to /v1/a?subject=user%3A1&k=10" * 50
        assert gets.get("/v1/b", {"n": 2})[0] == 200
        assert gets.get("/v1/close", {"n": 3})[0] == 200  # the server closes after it
        assert gets.get("/v1/c", {"n": 4})[1].startswith(b"answer to /v1/c")
        assert gets.get("/v1/missing", {"n": 5})[0] == 404
    finally:
        server.shutdown()
    ports = [port for _, _, port in seen]
    assert ports[0] == ports[1] == ports[2] != ports[3]  # kept, then a fresh socket
    assert {auth for _, auth, _ in seen} == {"Bearer k"}


def test_a_cost_phase_waits_until_the_service_is_quiet() -> None:
    """settle() waits while the process burns CPU (as index maintenance would) and returns once
    a whole second passes under the threshold."""
    busy = subprocess.Popen([sys.executable, "-c", (
        "import time\nend = time.time() + 2.5\nwhile time.time() < end: pass\n"
        "time.sleep(60)")])
    try:
        time.sleep(0.2)
        waited = cost.settle([busy.pid])
        assert 2.0 <= waited < cost.SETTLE_MAX_S
        before = cost.cpu_s([busy.pid])
        time.sleep(0.5)
        assert cost.cpu_s([busy.pid]) - before < 0.05  # quiet once settle returned
    finally:
        busy.kill()
        busy.wait()
