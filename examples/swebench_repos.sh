#!/bin/sh
# The local clone examples/swebench_rows.jsonl names (acme/calc at e55ca5d), made from
# tests/data/swebench/repos_src: DIR/acme__calc.git, a bare repository. These machines fetch
# nothing, so SWE-bench rows find their repositories in a folder like this one.
#   sh examples/swebench_repos.sh /tmp/swebench-repos
set -eu
dir="${1:?usage: sh examples/swebench_repos.sh DIR}"
src="$(cd "$(dirname "$0")/.." && pwd)/tests/data/swebench/repos_src/acme__calc"
work="$(mktemp -d)"
cp -r "$src" "$work/acme__calc"
cd "$work/acme__calc"
git init -q -b main
git add -A
GIT_AUTHOR_NAME=Boltz GIT_AUTHOR_EMAIL=boltz@localhost GIT_AUTHOR_DATE=2000-01-01T00:00:00Z \
GIT_COMMITTER_NAME=Boltz GIT_COMMITTER_EMAIL=boltz@localhost GIT_COMMITTER_DATE=2000-01-01T00:00:00Z \
  git commit -q -m "Task repository"
mkdir -p "$dir"
rm -rf "$dir/acme__calc.git"
git clone -q --bare "$work/acme__calc" "$dir/acme__calc.git"
rm -rf "$work"
echo "$dir/acme__calc.git at $(git -C "$dir/acme__calc.git" rev-parse HEAD)"
