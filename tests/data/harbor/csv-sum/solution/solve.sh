#!/bin/bash
# The oracle: a helper beside this script does the work.
set -euo pipefail
python3 /solution/column_sum.py /app/numbers.csv "$SUM_COLUMN" > "/app/$REPORT_NAME"
echo "wrote /app/$REPORT_NAME" > /logs/agent/oracle.txt
