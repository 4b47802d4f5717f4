import subprocess
from pathlib import Path


def test_answer_is_the_sum():
    assert Path("/app/answer.txt").read_text().strip() == "42"


def test_the_package_is_installed():
    import helperpkg

    assert helperpkg.VALUE == 7
    assert not helperpkg.__file__.startswith("/app/")


def test_the_command_is_installed():
    done = subprocess.run(["helper-cli"], capture_output=True, text=True, check=True)
    assert done.stdout == "helped\n"
