#!/bin/bash
# Run by the task before the step's agent, in the working folder.
echo "setup ran as $(id -un)" > /app/setup.log
