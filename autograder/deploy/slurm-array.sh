#!/bin/bash
# Grade a large class on Slurm: a job array of N shards, then a merge that starts when
# every shard succeeded. README.md, "Grading a large class".
#
#   sbatch autograder/deploy/slurm-array.sh /shared/class    # from the repository, after `make venv`
#
# /shared/class/submitted/<student>/<chapter>/<chapter>.ipynb is graded into
# /shared/class/shards/<I>/, merged into /shared/class/grades/. Shards are numbered
# from 0, so the array is 0-(N-1); change N in --array and SHARDS together. A failed
# task is resubmitted alone (sbatch --array=<I> ...) and resumes from its journal;
# then run the merge line again.
#SBATCH --job-name=grade-shards
#SBATCH --array=0-15
#SBATCH --cpus-per-task=4
#SBATCH --mem=8G
#SBATCH --time=04:00:00
#SBATCH --output=grade-shard-%a.log
set -euo pipefail

SHARDS=16
CLASS=${1:?usage: sbatch slurm-array.sh CLASS_FOLDER}
SEED=${GRADING_SEED:?set GRADING_SEED (a secret integer, the same for every shard)}
PY=${PYTHON:-.venv/bin/python}

"$PY" -m autograder grade "$CLASS/submitted" --out "$CLASS/shards/$SLURM_ARRAY_TASK_ID" \
    --shard "auto/$SHARDS" --seed "$SEED" --jobs "${SLURM_CPUS_PER_TASK:-1}" --no-progress

# The last task to finish submits nothing; the merge is a separate job that waits for
# the whole array (afterok: only if every shard succeeded). Task 0 queues it once.
if [ "$SLURM_ARRAY_TASK_ID" = 0 ]; then
    sbatch --dependency="afterok:$SLURM_ARRAY_JOB_ID" --job-name=grade-merge --cpus-per-task=1 \
        --output=grade-merge.log \
        --wrap="$PY -m autograder merge $CLASS/shards/* --out $CLASS/grades && $PY -m autograder report $CLASS/grades"
fi
