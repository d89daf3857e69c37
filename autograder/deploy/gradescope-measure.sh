#!/usr/bin/env bash
# Measure what Gradescope's Autograder Settings must be for each chapter: every chapter's
# Gradescope zip, unpacked as Gradescope does, grades its reference notebook (full marks
# expected) inside a cgroup of MEMORY and CPUS (Gradescope's default container: 768 MB,
# half a CPU), and the wall time and peak memory are printed, one line per chapter.
#
#   sudo autograder/deploy/gradescope-measure.sh [CHAPTER ...]
#   MEMORY=1536M CPUS=1 sudo autograder/deploy/gradescope-measure.sh 09_training
#
# Needs root and a writable cgroup hierarchy: v2 (memory.max, cpu.max; the memory and
# cpu controllers enabled in the parent's cgroup.subtree_control) or v1 (the memory and
# cpu controllers mounted under /sys/fs/cgroup/memory and /sys/fs/cgroup/cpu).
# PYTHON is the interpreter whose packages grade (default: the repository's .venv).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
MEMORY="${MEMORY:-768M}"
CPUS="${CPUS:-0.5}"
[ "$(id -u)" = 0 ] || { echo "gradescope-measure: run as root (it makes a cgroup)" >&2; exit 1; }

bytes() { numfmt --from=iec "${1%B}"; }
LIMIT="$(bytes "$MEMORY")"
QUOTA="$(awk -v c="$CPUS" 'BEGIN { printf "%d", c * 100000 }')"
NAME="gradescope-measure-$$"

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then            # cgroup v2
    HIERARCHY=v2
    CG="/sys/fs/cgroup/$NAME"
    mkdir "$CG"
    echo "$LIMIT" > "$CG/memory.max"
    echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
    echo "$QUOTA 100000" > "$CG/cpu.max"
    enter() { echo "$1" > "$CG/cgroup.procs"; }
    peak() { cat "$CG/memory.peak" 2>/dev/null || echo 0; }
    reset_peak() { echo 0 > "$CG/memory.peak" 2>/dev/null || true; }
    cleanup() { rmdir "$CG" 2>/dev/null || true; }
else                                                          # cgroup v1
    HIERARCHY=v1
    MEM="/sys/fs/cgroup/memory/$NAME"
    CPU="/sys/fs/cgroup/cpu/$NAME"
    mkdir "$MEM" "$CPU"
    echo "$LIMIT" > "$MEM/memory.limit_in_bytes"
    echo "$LIMIT" > "$MEM/memory.memsw.limit_in_bytes" 2>/dev/null || true
    echo 100000 > "$CPU/cpu.cfs_period_us"
    echo "$QUOTA" > "$CPU/cpu.cfs_quota_us"
    enter() { echo "$1" > "$MEM/cgroup.procs"; echo "$1" > "$CPU/cgroup.procs"; }
    peak() { cat "$MEM/memory.max_usage_in_bytes"; }
    reset_peak() { echo 0 > "$MEM/memory.max_usage_in_bytes"; }
    cleanup() { rmdir "$MEM" "$CPU" 2>/dev/null || true; }
fi
WORK="$(mktemp -d)"
trap 'cleanup; rm -rf "$WORK"' EXIT

if [ "$#" -eq 0 ]; then
    mapfile -t CHAPTERS < <(cd "$REPO/book" && ls -d [0-9][0-9]_*/ | tr -d /)
else
    CHAPTERS=("$@")
fi
echo "cgroup $HIERARCHY: memory $MEMORY, $CPUS CPU; python $("$PYTHON" --version 2>&1)"
printf '%-26s %8s %8s %10s %s\n' chapter points score "wall (s)" "peak memory"
for chapter in "${CHAPTERS[@]}"; do
    root="$WORK/$chapter/autograder"
    mkdir -p "$root/source" "$root/submission"
    "$PYTHON" -m autograder gradescope "$chapter" --out "$WORK/$chapter/autograder.zip" >/dev/null
    "$PYTHON" -m zipfile -e "$WORK/$chapter/autograder.zip" "$root/source"
    cp "$REPO/book/$chapter/$chapter.ipynb" "$root/submission/"
    AUTOGRADER_ROOT="$root" GRADESCOPE_OFFLINE=1 AUTOGRADER_PYTHON="$PYTHON" \
        bash "$root/source/setup.sh" >"$WORK/$chapter/setup.log" 2>&1 \
        || { echo "$chapter: setup.sh failed: $WORK/$chapter/setup.log" >&2; continue; }
    reset_peak
    start=$(date +%s.%N)
    ( enter "$BASHPID"; exec env AUTOGRADER_ROOT="$root" bash "$root/source/run_autograder" ) \
        >"$WORK/$chapter/run.log" 2>&1 || true
    end=$(date +%s.%N)
    read -r points score < <("$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d["extra_data"]["max_score"], d["score"])' "$root/results/results.json")
    printf '%-26s %8s %8s %10.0f %s\n' "$chapter" "$points" "$score" "$(echo "$end - $start" | bc)" \
        "$(numfmt --to=iec "$(peak)")"
done
