import csv
import sys

path, column = sys.argv[1], sys.argv[2]
with open(path, newline="") as handle:
    print(sum(int(row[column]) for row in csv.DictReader(handle)))
