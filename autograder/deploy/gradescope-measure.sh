#!/usr/bin/env bash
# Measure what Gradescope's Autograder Settings must be for each chapter: every chapter's
# Gradescope zip, unpacked as Gradescope does, grades its reference notebook (full marks
# expected) inside a cgroup of MEMORY and CPUS (Gradescope's default container: 768 MB,
# half a CPU), and the wall time, the CPU time and the peak memory are printed, one line
# per chapter, with whether it fits Gradescope's 10-minute default (LIMIT_S) and, where
# not, what it needs.
#
#   autograder/deploy/gradescope-measure.sh [--markdown | --readme FILE] [CHAPTER ...]
#   MEMORY=1536M CPUS=1 autograder/deploy/gradescope-measure.sh 09_training
#
# --markdown prints the table as Markdown; --readme FILE also writes it into FILE between
# the lines <!-- gradescope-measure: begin --> and <!-- gradescope-measure: end --> (the
# README's table is made this way, never typed).
#
# The CPU time is the cgroup's own (v2 cpu.stat, v1 cpuacct.usage): on a shared machine
# the wall time grows with the load, the CPU time does not; at CPUS of a quiet machine the
# wall is about CPU time / CPUS, and "fits" is judged on the larger of the two.
# Needs root and a writable cgroup hierarchy: v2 (memory.max, cpu.max; the memory and
# cpu controllers enabled in the parent's cgroup.subtree_control) or v1 (the memory, cpu
# and cpuacct controllers mounted under /sys/fs/cgroup/memory, cpu and cpuacct).
# PYTHON is the interpreter whose packages grade (default: the repository's .venv).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
MEMORY="${MEMORY:-768M}"
CPUS="${CPUS:-0.5}"
LIMIT_S="${LIMIT_S:-600}"
FORMAT=text README=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --markdown) FORMAT=markdown; shift ;;
        --readme) FORMAT=markdown; README="${2:?--readme needs a file}"; shift 2 ;;
        --*) echo "gradescope-measure: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
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
    cpu_us() { awk '$1 == "usage_usec" { print $2 }' "$CG/cpu.stat"; }
    reset_peak() { echo 0 > "$CG/memory.peak" 2>/dev/null || true; }
    cleanup() { rmdir "$CG" 2>/dev/null || true; }
else                                                          # cgroup v1
    HIERARCHY=v1
    MEM="/sys/fs/cgroup/memory/$NAME"
    CPU="/sys/fs/cgroup/cpu/$NAME"
    ACCT="/sys/fs/cgroup/cpuacct/$NAME"
    [ -d /sys/fs/cgroup/cpuacct ] || ACCT="$CPU"                # cpu,cpuacct mounted together
    mkdir -p "$MEM" "$CPU" "$ACCT"
    echo "$LIMIT" > "$MEM/memory.limit_in_bytes"
    echo "$LIMIT" > "$MEM/memory.memsw.limit_in_bytes" 2>/dev/null || true
    echo 100000 > "$CPU/cpu.cfs_period_us"
    echo "$QUOTA" > "$CPU/cpu.cfs_quota_us"
    enter() { echo "$1" > "$MEM/cgroup.procs"; echo "$1" > "$CPU/cgroup.procs"; echo "$1" > "$ACCT/cgroup.procs"; }
    peak() { cat "$MEM/memory.max_usage_in_bytes"; }
    cpu_us() { echo $(( $(cat "$ACCT/cpuacct.usage") / 1000 )); }
    reset_peak() { echo 0 > "$MEM/memory.max_usage_in_bytes"; }
    cleanup() { rmdir "$MEM" "$CPU" "$ACCT" 2>/dev/null || true; }
fi
WORK="$(mktemp -d)"
trap 'cleanup; rm -rf "$WORK"' EXIT

if [ "$#" -eq 0 ]; then
    mapfile -t CHAPTERS < <(cd "$REPO/book" && ls -d [0-9][0-9]_*/ | tr -d /)
else
    CHAPTERS=("$@")
fi
LOAD="$(cut -d' ' -f1 /proc/loadavg)"
TABLE="$WORK/table.tsv"
: > "$TABLE"
[ "$FORMAT" = text ] && echo "cgroup $HIERARCHY: memory $MEMORY, $CPUS CPU; python $("$PYTHON" --version 2>&1); load $LOAD" \
    && printf '%-26s %6s %6s %9s %8s %12s  %s\n' chapter points score "wall (s)" "CPU (s)" "peak memory" fits
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
    cpu_start="$(cpu_us)"
    start=$(date +%s.%N)
    ( enter "$BASHPID"; exec env AUTOGRADER_ROOT="$root" bash "$root/source/run_autograder" ) \
        >"$WORK/$chapter/run.log" 2>&1 || true
    end=$(date +%s.%N)
    cpu_s="$(awk -v a="$cpu_start" -v b="$(cpu_us)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')"
    read -r points score < <("$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d["extra_data"]["max_score"], d["score"])' "$root/results/results.json" 2>/dev/null || echo "? ?")
    wall="$(echo "$end - $start" | bc)"
    # What the run needs: at CPUS on a quiet machine the wall is about cpu_s / CPUS.
    # The measured wall is an upper bound (the load stretches it); CPU time / CPUS is what
    # the run needs of a quiet container at CPUS, a lower bound.
    fits="$(awk -v w="$wall" -v c="$cpu_s" -v n="$CPUS" -v l="$LIMIT_S" -v p="$points" -v s="$score" \
        -v peak="$(peak)" -v mem="$LIMIT" 'BEGIN {
        if (p != s) { printf "no: scored %s of %s (peak %.0f of %.0f MB): give the container more memory", s, p, peak / 1e6, mem / 1e6; exit }
        if (w <= l) { printf "yes: %.0f%% of the %d s", 100 * w / l, l; exit }
        if (c / n <= l) { printf "probably: %.0f s of CPU at %s CPU fit, the load stretched the wall; measure on a quiet machine", c, n; exit }
        printf "no: %.0f s of CPU need %.1f CPU for %d s: choose that many CPUs, or raise the timeout", c, c / l, l }')"
    printf '%s\t%s\t%s\t%.0f\t%s\t%s\t%s\n' "$chapter" "$points" "$score" "$wall" "$cpu_s" \
        "$(numfmt --to=iec "$(peak)")" "$fits" >> "$TABLE"
    [ "$FORMAT" = text ] && printf '%-26s %6s %6s %9.0f %8s %12s  %s\n' "$chapter" "$points" "$score" "$wall" \
        "$cpu_s" "$(numfmt --to=iec "$(peak)")" "$fits"
done
[ "$FORMAT" = text ] && exit 0
"$PYTHON" - "$TABLE" "$README" "$HIERARCHY" "$MEMORY" "$CPUS" "$LOAD" "$LIMIT_S" <<'PY'
import os, sys, time
table, readme, hierarchy, memory, cpus, load, limit = sys.argv[1:]
rows = [line.rstrip("\n").split("\t") for line in open(table, encoding="utf-8") if line.strip()]
lines = [f"Measured {time.strftime('%Y-%m-%d')} by `autograder/deploy/gradescope-measure.sh --readme README.md`: "
         f"cgroup {hierarchy}, memory {memory}, {cpus} CPU; load average {load} at the start, "
         f"{os.getloadavg()[0]:.2f} at the end (the wall grows with the load, the CPU time does not).", "",
         "| chapter | points | score | wall time | CPU time | peak memory | fits Gradescope's "
         f"{int(limit) // 60} minutes at {cpus} CPU |",
         "|---------|-------:|------:|----------:|---------:|------------:|------|"]
lines += [f"| {c} | {p} | {s} | {w} s | {cpu} s | {peak} | {fits} |" for c, p, s, w, cpu, peak, fits in rows]
block = "\n".join(lines)
if not readme:
    print(block)
    sys.exit(0)
begin, end = "<!-- gradescope-measure: begin -->", "<!-- gradescope-measure: end -->"
text = open(readme, encoding="utf-8").read()
if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
    sys.exit(f"gradescope-measure: {readme} needs one {begin} line before one {end} line")
head, rest = text.split(begin)
open(readme, "w", encoding="utf-8").write(f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}")
print(block)
PY
