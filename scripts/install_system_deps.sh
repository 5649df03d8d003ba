#!/usr/bin/env bash
# Install the Debian packages the test suite needs, only if some are missing.
#
#   chromium        the browser tests drive JupyterLab in a real Chromium (Playwright)
#   iproute2        `ip netns` gives the two-host test its two network namespaces
#   openssh-server  horovodrun starts the remote ranks of a multi-host job over ssh
#   slurm-wlm       Slurm (sbatch, srun, slurmctld, slurmd): the Slurm tests submit jobs
#   munge           to a one-node cluster that scripts/local_slurm.sh starts; munge
#                   authenticates Slurm's messages
#   fuse3           libfuse 3 and fusermount3: the two-host tests serve their runs folder
#                   through an NFS-like layer (tests/_nfs_like.py)
#
# Idempotent and fast: when every program is present it prints one line and
# touches nothing (no `apt-get update`). Needs root; without it, it only says
# what to install.
#
# Usage: scripts/install_system_deps.sh [--check]   (--check: exit 1 if something is missing)
set -euo pipefail

# program -> Debian package that provides it
declare -A PROVIDES=(
    [chromium]=chromium
    [ip]=iproute2
    [sshd]=openssh-server
    [ssh]=openssh-client
    [sbatch]=slurm-wlm
    [slurmctld]=slurm-wlm
    [slurmd]=slurm-wlm
    [munged]=munge
    [fusermount3]=fuse3
)

missing=()
for prog in "${!PROVIDES[@]}"; do
    # sshd, munged and Slurm's daemons live in /usr/sbin, not on every user's PATH.
    if ! command -v "$prog" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$prog" ]; then
        missing+=("${PROVIDES[$prog]}")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "System packages present (chromium, iproute2, openssh, slurm-wlm, munge, fuse3)."
    exit 0
fi
# Sort and de-duplicate so the message is stable.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "${1:-}" = "--check" ]; then
    echo "Missing system packages: ${missing[*]}"
    exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "Missing system packages: ${missing[*]}" >&2
    echo "Install them as root:  sudo apt-get install -y ${missing[*]}" >&2
    echo "(Without them the browser, two-host and Slurm tests are skipped.)" >&2
    exit 1
fi

echo "Installing system packages: ${missing[*]} ..."
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run to finish instead of failing on its lock.
APT=(apt-get -o DPkg::Lock::Timeout=300 -q)
"${APT[@]}" update >/dev/null
"${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
echo "Installed: ${missing[*]}"
