# The grader's image: what grading needs (requirements-grader.txt, torch's CPU build),
# this repository's autograder/, solutions/ and the source notebooks, run as a non-root
# user; nothing is fetched at grading time, so it runs with the network off
# (docker/podman --network none, Apptainer --network none, the Kubernetes NetworkPolicy
# of autograder/deploy). It holds the reference answers and the hidden tests: keep it in
# a private registry.
#
#   docker build -t transformer-book-grader:2026.11 .
#   docker run --rm --network none -v "$PWD/class:/class" transformer-book-grader:2026.11 \
#       grade /class/submitted --out /class/grades --seed-file /class/seed
#   apptainer build grader.sif docker-daemon://transformer-book-grader:2026.11
#
# The same Python as the book's (3.11); requirements-grader.txt resolves on 3.10 to 3.13.
# BASE: the official Python image by default. Where no container registry can be reached,
# any Debian bookworm image with Python 3.11 as `python` and its venv module serves:
# .ci/image-check builds one from Debian's mirror (mmdebstrap, then `podman import`) and
# passes it as --build-arg BASE=...
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# bubblewrap: the grading sandbox where the engine allows user namespaces; util-linux:
# prlimit and setpriv for the container mode. Debian's current versions (no pins: a
# security update must not break the build).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/transformer-book
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/transformer-book \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg

# torch's CPU build first, from PyTorch's CPU index (the plain index would bring the CUDA
# build: about 3 GB more); then the rest of what grading needs. TORCH_INDEX= (empty) takes
# torch from the plain index; PIP_FIND_LINKS names a folder of wheels mounted into the
# build (`podman build --volume /wheels:/wheels:ro --build-arg PIP_FIND_LINKS=/wheels`):
# a CPU build of torch there (a `+cpu` wheel) is preferred to the plain index's.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS=
COPY requirements-grader.txt ./
RUN python -m venv "$VIRTUAL_ENV" \
    && grep -E '^torch([<>=!~ ]|$)' requirements-grader.txt > /tmp/torch.txt \
    && pip install --no-cache-dir -r /tmp/torch.txt ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} \
    && pip install --no-cache-dir -r requirements-grader.txt \
    && rm /tmp/torch.txt
# `grade` and `merge` write the class's gradebook.db, nbgrader's database (the Gradescope
# zip grades one upload and does without it): the same pin as requirements.txt.
RUN pip install --no-cache-dir nbgrader==0.9.6

COPY autograder/ autograder/
COPY solutions/ solutions/
COPY book/ book/

RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin grader
USER 10001
ENTRYPOINT ["python", "-m", "autograder"]
CMD ["--help"]
