"""gunicorn (gthread, as `make serve` runs it) against uvicorn (Django's ASGI application) for
the production web process: a page and a streamed exec, each server in turn with its own
worker (bench/api.py's `served`).

    .venv/bin/python bench/serving.py [-n 50] [--stream 35] [--write docs/PERFORMANCE.md]

Measured per server: GET /login/ one at a time (p50, p95) and 8 clients at once (requests per
second); a streamed exec printing a line a second for --stream seconds (longer than gunicorn's
30 s timeout): whether it ran to its end, its first line's arrival and its whole time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _setup import machine
from api import served, stats

BIN = Path(sys.executable).parent
SERVERS = {
    "gunicorn gthread (2 workers × 8 threads)": [
        str(BIN / "gunicorn"),
        "-c",
        "python:boltz_web.gunicorn_conf",
        "--bind",
        "{addr}",
        "boltz_web.wsgi",
    ],
    "uvicorn ASGI (2 workers)": [
        str(BIN / "uvicorn"),
        "boltz_web.asgi:application",
        "--workers",
        "2",
        "--no-access-log",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ],
}


def measure(name: str, argv: list[str], n: int, seconds: int) -> dict:
    import httpx

    with served(f"serving-{len(name)}", web_argv=argv) as env:
        page = httpx.Client(base_url=env.url, timeout=60)
        page.get("/login/")
        times = []
        for _ in range(n):
            began = time.perf_counter()
            assert page.get("/login/").status_code == 200
            times.append(time.perf_counter() - began)
        one = stats(times)
        began = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            codes = list(
                pool.map(lambda _: httpx.get(env.url + "/login/").status_code, range(8 * n))
            )
        rps = len(codes) / (time.perf_counter() - began)
        assert set(codes) == {200}, set(codes)
        api = httpx.Client(
            base_url=env.url,
            headers={"Authorization": f"Bearer {env.token}"},
            timeout=seconds + 120,
        )
        sid = api.post("/api/sandboxes", json={"task": "fix-add"}).json()["id"]
        command = f"for i in $(seq {seconds}); do echo line$i; sleep 1; done"
        began, first, lines, ended = time.perf_counter(), None, 0, False
        try:
            with api.stream(
                "POST", f"/api/sandboxes/{sid}/exec", json={"command": command, "stream": True}
            ) as streamed:
                for line in streamed.iter_lines():
                    if not line:
                        continue
                    item = json.loads(line)
                    if "text" in item:
                        first = first or time.perf_counter() - began
                        lines += item["text"].count("\n")
                    ended = ended or "result" in item
        except httpx.HTTPError as exc:
            print(f"{name}: the stream broke: {exc!r}")
        whole = time.perf_counter() - began
        api.post(f"/api/sandboxes/{sid}/close", json={})
    return {"page": one, "rps": rps, "first": first, "whole": whole, "lines": lines, "ended": ended}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--stream", type=int, default=35)
    parser.add_argument("--write")
    parser.add_argument("--server", help="measure this one server and print its figures")
    args = parser.parse_args()
    if args.server:  # one server per process: each its own scratch database and worker
        figures = measure(args.server, SERVERS[args.server], args.n, args.stream)
        print("FIGURES " + json.dumps(figures))
        return
    results = {}
    for name in SERVERS:
        child = subprocess.run(
            [sys.executable, __file__, "--server", name, "-n", str(args.n)]
            + ["--stream", str(args.stream)],
            capture_output=True,
            text=True,
        )
        found = [x for x in child.stdout.splitlines() if x.startswith("FIGURES ")]
        if not found:
            raise SystemExit(
                f"{name} was not measured:\n{child.stdout[-3000:]}{child.stderr[-3000:]}"
            )
        results[name] = json.loads(found[-1][8:])
        r = results[name]
        print(
            f"{name}: page p50 {r['page']['p50']:.1f} ms, {r['rps']:.0f} req/s at 8; "
            f"stream {r['lines']}/{args.stream} lines, ended {r['ended']}, {r['whole']:.1f} s"
        )
    if args.write:
        from pages import write_section

        body = (
            "| server | page p50 | page p95 | pages/s, 8 clients | streamed exec "
            f"({args.stream} s) | first line |\n| --- | ---: | ---: | ---: | --- | ---: |\n"
        )
        for name, r in results.items():
            whole = "complete" if r["ended"] and r["lines"] == args.stream else "CUT"
            body += (
                f"| {name} | {r['page']['p50']:.1f} ms | {r['page']['p95']:.1f} ms | "
                f"{r['rps']:.0f} | {whole}, {r['lines']} lines in {r['whole']:.1f} s | "
                f"{(r['first'] or 0) * 1000:.0f} ms |\n"
            )
        body += (
            "\n`make serve` runs gunicorn with the gthread worker: it serves the streamed exec "
            "to its end past gunicorn's 30 s timeout (gthread's timeout is its main loop's "
            "heartbeat, not a request's limit), each stream holding one thread, its lines "
            "arriving as the command prints them. Under uvicorn, Django's ASGI handler reads "
            "a view's synchronous stream to its end before sending it: the first line arrives "
            "with the last, which is no stream. Pages are alike on both; Django's views "
            "and its database access are synchronous, so under ASGI every request and every "
            "chunk of a stream crosses from the event loop to a thread and back. "
            f"`python bench/serving.py -n {args.n} --stream {args.stream}` on {machine()}, "
            "SQLite, the worker `manage.py run_worker` on this machine, while other work ran."
        )
        write_section(args.write, "Serving: gunicorn against uvicorn", body)


if __name__ == "__main__":
    main()
