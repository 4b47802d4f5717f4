#!/bin/bash
set -euo pipefail
echo ready > /app/out.txt
echo "wrote out.txt" > /logs/artifacts/summary.txt
echo "not an artifact" > /app/notes.txt
