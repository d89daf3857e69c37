#!/usr/bin/env bash
# Grade a large class on Slurm: a job array of 16 shards, then a merge that runs only if
# every shard succeeded. README.md, "Grading a large class". Run it on a login node,
# from the repository (after `make venv`) or with the grader's image:
#
#   bash autograder/deploy/slurm-array.sh /shared/my class               # the repository's .venv
#   RUNTIME=apptainer IMAGE=/shared/grader.sif bash autograder/deploy/slurm-array.sh /shared/class
#   RUNTIME=podman IMAGE=transformer-book-grader:2026.11 bash autograder/deploy/slurm-array.sh /shared/class
#
# CLASS/submitted/<student>/<chapter>/<chapter>.ipynb is graded into CLASS/shards/<I>/
# and merged into CLASS/grades/; each attempt of each task logs to
# CLASS/logs/grade-<job>_<task>.log (%A_%a: a resubmitted task does not overwrite the log
# of the attempt before). The seed of the hidden cases is the file CLASS/seed (mode 0600,
# yours; made here when missing), read by the grader with --seed-file: never on a
# command line, where `ps` and `sacct` would show it.
#
# The merge is submitted from here, not from a task: --dependency=afterok on the whole
# array with --kill-on-invalid-dep=yes, so a failed task cancels the merge at once
# instead of leaving it pending forever. Then resubmit the failed task alone (it resumes
# from its journal) and the merge: the two sbatch lines this prints.
#
# Isolation on compute nodes: bubblewrap is rarely installed and RHEL/Rocky 8 kernels
# have no Landlock, so the grader's own walls may not start there. The image carries
# bubblewrap; Apptainer runs it with --containall and no network (--net --network none
# needs Apptainer's network setup; where that is not allowed, drop it and rely on the
# nodes having no route out). Podman/Docker: --network none.
#
# Inside a task (SLURM_ARRAY_TASK_ID set) the script grades its shard; with --merge it
# merges. Change 16 in one place: SHARDS.
#SBATCH --cpus-per-task=4
#SBATCH --mem=7G
#SBATCH --time=04:00:00
set -euo pipefail

SHARDS=16
JOBS=4             # submissions at once per task: 4 x (1 GiB per run + 0.5 GiB worker) + 1 GiB = --mem
RUN_MEMORY=1G
RUNTIME="${RUNTIME:-venv}"          # venv | apptainer | podman | docker
IMAGE="${IMAGE:-}"
# The repository's venv by default, made absolute on the login node (Slurm runs a spooled
# copy of this script, so the tasks cannot find it from $0).
PY="${PYTHON:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}"

usage() { echo "usage: bash slurm-array.sh CLASS_FOLDER" >&2; exit 2; }

# The grader's command line for `autograder ARGS...` in CMD: the host's venv, or the image
# (where the class folder is /class: callers pass paths under $ROOT).
command_for() {
    case "$RUNTIME" in
        venv) CMD=("$PY" -m autograder "$@") ;;
        apptainer) CMD=(apptainer exec --containall --cleanenv --no-home --net --network none
                        --bind "$CLASS:/class" "$IMAGE" python -m autograder "$@") ;;
        podman|docker) CMD=("$RUNTIME" run --rm --network none --volume "$CLASS:/class" "$IMAGE" "$@") ;;
        *) echo "slurm-array: RUNTIME=$RUNTIME: expected venv, apptainer, podman or docker" >&2; exit 2 ;;
    esac
}

if [ "${1:-}" = --merge ]; then                       # the merge job, once every task succeeded
    CLASS="${2:?}"
    [ "$RUNTIME" = venv ] && ROOT="$CLASS" || ROOT=/class
    shards=()
    for ((i = 0; i < SHARDS; i++)); do shards+=("$ROOT/shards/$i"); done
    command_for merge "${shards[@]}" --out "$ROOT/grades"
    srun --ntasks=1 "${CMD[@]}"
    command_for report "$ROOT/grades"
    exec srun --ntasks=1 "${CMD[@]}"
fi

CLASS="${1:-}"
[ -n "$CLASS" ] || usage
CLASS="$(cd "$CLASS" && pwd)"
if [ "$RUNTIME" != venv ] && [ -z "$IMAGE" ]; then
    echo "slurm-array: RUNTIME=$RUNTIME needs IMAGE (the grader's image: docker build -t ... . in the repository)" >&2
    exit 2
fi
[ "$RUNTIME" = venv ] && ROOT="$CLASS" || ROOT=/class

if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then            # on the login node: submit
    [ -d "$CLASS/submitted" ] || { echo "slurm-array: $CLASS/submitted is not a folder" >&2; exit 2; }
    mkdir -p "$CLASS/logs"
    if [ ! -s "$CLASS/seed" ]; then
        (umask 077 && od -An -N4 -tu4 /dev/urandom | tr -d ' ' > "$CLASS/seed")
    fi
    chmod 0600 "$CLASS/seed"
    script="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
    export RUNTIME IMAGE PYTHON="$PY"
    array=$(sbatch --parsable --job-name=grade-shards --array="0-$((SHARDS - 1))" \
        --output="$CLASS/logs/grade-%A_%a.log" "$script" "$CLASS")
    array="${array%%;*}"
    merge=$(sbatch --parsable --job-name=grade-merge --dependency="afterok:$array" --kill-on-invalid-dep=yes \
        --cpus-per-task=1 --mem=2G --time=01:00:00 --output="$CLASS/logs/grade-merge-%j.log" \
        "$script" --merge "$CLASS")
    echo "submitted: shards job $array (tasks 0-$((SHARDS - 1))), merge job ${merge%%;*} (runs only if every task succeeds)"
    echo "if a task fails, the merge is cancelled; resubmit that task and the merge:"
    echo "  sbatch --array=<I> --output='$CLASS/logs/grade-%A_%a.log' '$script' '$CLASS'"
    echo "  sbatch --kill-on-invalid-dep=yes --dependency=afterok:<that job> --output='$CLASS/logs/grade-merge-%j.log' '$script' --merge '$CLASS'"
    exit 0
fi

# One task of the array: one shard, as a job step.
command_for grade "$ROOT/submitted" --out "$ROOT/shards/$SLURM_ARRAY_TASK_ID" --shard "auto/$SHARDS" \
    --seed-file "$ROOT/seed" --jobs "$JOBS" --memory "$RUN_MEMORY" --no-progress
exec srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" "${CMD[@]}"
