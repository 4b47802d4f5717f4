#!/usr/bin/env python3
"""Eight environments of the `fix-add` task, each given different code for add(), all checked
the same way: the rewards side by side. The headline example of docs/POOLS.md.

    export BOLTZ_URL=http://127.0.0.1:8000
    export BOLTZ_TOKEN=...          # python manage.py create_token USER
    python examples/pool_compare.py

Each environment is its own sandbox on whichever worker has room; one `step` writes every
candidate's calc.py and submits it (runs the task's check) in all eight at once. The results
come back in the order of the candidates. Each line links to the episode's attempt page.
"""

from __future__ import annotations

from boltz import Action, Client

# Candidate bodies of add(a, b), as eight policies might write them.
CANDIDATES = [
    "a + b",
    "a - b",
    "b + a",
    "sum((a, b))",
    "a * b",
    "abs(a) + abs(b)",
    "(a ^ b) + 2 * (a & b)",
    "a + b if a > 0 else b",
]


def calc_py(body: str) -> str:
    return (
        '"""A tiny calculator."""\n\n\n'
        f"def add(a, b):\n    return {body}\n\n\n"
        "def multiply(a, b):\n    return a * b\n"
    )


def main() -> None:
    with Client() as client, client.pool(task="fix-add", size=len(CANDIDATES)) as pool:
        pool.reset()
        actions = [Action(write={"calc.py": calc_py(body)}, submit=True) for body in CANDIDATES]
        results = pool.step(actions)
        for body, result in zip(CANDIDATES, results, strict=True):
            info = result.info
            if info["masked"]:  # the infrastructure failed: no reward at all, not a zero
                print(f"{body:24} masked ({info['failure_kind']}): {info['error']}")
                continue
            summary = result.observation.check.summary
            print(f"{body:24} reward {result.reward:.1f}  {summary}  {info['url']}")
        group = pool.refresh().groups[0]
        print(f"mean reward {group.mean:.3f}, spread {group.std:.3f} over {group.n} episodes")


if __name__ == "__main__":
    main()
