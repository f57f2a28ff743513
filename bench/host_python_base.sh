#!/usr/bin/env bash
# A base image with this host's own Python build (issue 32): the offline Debian base (localhost/dlbench-base:bookworm,
# which 'dlbench image build' makes) plus the interpreter dlbench runs under here, copied at its own prefix (its
# RUNPATH is absolute) without its site-packages, first on PATH (a symlink elsewhere would make a venv's landmark
# search find Debian's /usr/lib/python3.11). Built FROM it, the benchmark image differs from the host by the
# container alone — the same Python and, with 'dlbench image build''s default, the same torch build:
#
#   bash bench/host_python_base.sh                      # -> localhost/dlbench-base:host-python (about a minute)
#   dlbench image build --base localhost/dlbench-base:host-python --tag localhost/dlbench:host-torch
#   python bench/container_vs_bare.py --image localhost/dlbench:host-torch --repeats 5 --threads 1
set -euo pipefail
base=${BASE:-localhost/dlbench-base:bookworm}
tag=${TAG:-localhost/dlbench-base:host-python}
python=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
prefix=$("$python" -c 'import sys; print(sys.base_prefix)')
version=$("$python" -c 'import platform; print(platform.python_version())')
podman image exists "$base" || { echo "no $base: run 'dlbench image build' once (it makes the offline base)" >&2; exit 2; }
ctx=$(mktemp -d /var/tmp/dlbench-host-python.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/python"
tar -C "$prefix" --exclude='./lib/python3*/site-packages/*' --exclude='__pycache__' --exclude='./lib/python3*/test' \
    -c . | tar -C "$ctx/python" -x
cat > "$ctx/Containerfile" <<CF
FROM $base
COPY python $prefix
ENV PATH=$prefix/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN chmod 755 "$(dirname "$prefix")" "$prefix" \\
    && python3 -c 'import platform, ssl, sqlite3, ctypes, venv, ensurepip; assert platform.python_version() == "$version"'
CF
podman build -q -t "$tag" -f "$ctx/Containerfile" "$ctx"
echo "$tag: $base with Python $version from $prefix"
