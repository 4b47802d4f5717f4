import csv
import os
from pathlib import Path


def test_sum_is_written():
    assert Path("/app/sum.txt").is_file()


def test_sum_is_right():
    column = os.environ["EXPECTED_COLUMN"]
    with open("/app/numbers.csv", newline="") as handle:
        expected = sum(int(row[column]) for row in csv.DictReader(handle))
    assert Path("/app/sum.txt").read_text().strip() == str(expected)
