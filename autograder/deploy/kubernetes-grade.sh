#!/usr/bin/env bash
# Grade a class on Kubernetes: apply the shard Job, wait until it has completed or failed
# (bounded: its activeDeadlineSeconds, plus a margin), then apply the merge Job and wait
# for it. A failed shard Job stops here, merging nothing, and names the failed indexes.
#
#   autograder/deploy/kubernetes-grade.sh            # kubectl's current context and namespace
#   KUBECTL="kubectl -n grading" POLL=10 autograder/deploy/kubernetes-grade.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
read -r -a KUBECTL <<< "${KUBECTL:-kubectl}"
POLL="${POLL:-30}"
WAIT_SHARDS="${WAIT_SHARDS:-14700}"   # the Job's activeDeadlineSeconds (14400) and a margin

# The Job's conditions that are True, e.g. "SuccessCriteriaMet Complete".
state() { "${KUBECTL[@]}" get job "$1" -o 'jsonpath={.status.conditions[?(@.status=="True")].type}'; }

"${KUBECTL[@]}" delete job grade-merge --ignore-not-found
"${KUBECTL[@]}" apply -f "$HERE/kubernetes-indexed-job.yaml"
deadline=$((SECONDS + WAIT_SHARDS))
while :; do
    case " $(state grade-shards) " in
        *" Complete "*) break ;;
        *" Failed "*)
            failed="$("${KUBECTL[@]}" get job grade-shards -o 'jsonpath={.status.failedIndexes}')"
            echo "kubernetes-grade: the Job grade-shards failed (failed indexes: ${failed:-none}; see" \
                 "kubectl logs); nothing merged. Delete the Job and apply it again: the shards resume" \
                 "from their journals." >&2
            exit 1 ;;
    esac
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "kubernetes-grade: grade-shards neither completed nor failed in ${WAIT_SHARDS}s; nothing merged" >&2
        exit 1
    fi
    sleep "$POLL"
done
"${KUBECTL[@]}" apply -f "$HERE/kubernetes-merge-job.yaml"
"${KUBECTL[@]}" wait --for=condition=complete job/grade-merge --timeout=3700s
echo "kubernetes-grade: graded and merged into /class/grades on the volume class-submissions"
