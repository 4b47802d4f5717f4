from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

from boltz.inspect_ai import boltz_check


@solver
def fix_add():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        source = await sandbox().read_file("calc.py")
        await sandbox().write_file("calc.py", source.replace("a - b", "a + b"))
        await sandbox().exec(["python3", "-m", "pytest", "-q", "tests"])
        return state

    return solve


@task
def fix_add_in_boltz():
    return Task(
        dataset=[Sample(input="Fix add() in calc.py so that the tests pass.")],
        solver=fix_add(),
        sandbox=("boltz", "fix-add"),  # the Boltz task each sample starts from
        scorer=boltz_check(),  # the task's check: score, per-test results, link
    )


if __name__ == "__main__":
    [log] = eval(fix_add_in_boltz(), model="mockllm/model")
    for sample in log.samples:
        score = sample.scores["boltz_check"]
        print(score.value, score.answer, score.metadata["attempt_url"])
