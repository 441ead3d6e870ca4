#!/usr/bin/env bash
# Download what the full CRUDA workload needs, with progress, resume and verification:
#   - the artifact's noised Fed-CIFAR100 files (Git LFS objects in the public hku-systems/ROG repository),
#     checked by sha256 and size (the published files' checksums, in the manifest below);
#   - the artifact's bandwidth records (plain git files), checked by git blob id (`git hash-object FILE`);
#   - the ConvMLP-M CIFAR-100 weights of the official SHI-Labs/Convolutional-MLPs release.
#
# Usage: bash utils/download_data.sh [--data-dir DIR] [--only NAME[,NAME...]] [--with-pkl] [--list]
#   --data-dir DIR   where to put the files (default: data/ in the repository; or $ROG_DATA_DIR)
#   --only NAMES     fetch only these (names: train test outdoors indoors weights train-pkl test-pkl)
#   --with-pkl       also fetch the artifact's .pkl copies (the toolkit never reads them: unpickling
#                    runs code from the file; they are listed for comparison with the artifact only)
#   --list           print what would be fetched from where, and exit (no network)
#   --print-manifest print the built-in manifest (name source path dest size checksum) and exit
#
# Layout written: DIR/mixed_fed_cifar100_{train,test}.h5, DIR/convmlp_m_cifar100.pth,
# DIR/bw_records/{outdoors,indoors}.txt (what rog.workloads.cruda.CrudaWorkload(DIR) reads).
# Downloads go to FILE.part and are renamed only after verification; run again to resume.
# A file already present and verified is not fetched again. Exit status: 0 all good, 1 something
# failed (a summary says what and why), 2 bad usage.
#
# Environment (URLs are assumptions that may need updating; override them here rather than editing):
#   ROG_DATA_BASE_URL  base for Git LFS files. Default: GitHub's LFS media URL form
#                      https://media.githubusercontent.com/media/hku-systems/ROG/main (branch "main" assumed)
#   ROG_RAW_BASE_URL   base for plain git files. Default: https://raw.githubusercontent.com/hku-systems/ROG/main
#   ROG_CONVMLP_URL    the ConvMLP-M CIFAR-100 weights. Default: the link in the official README,
#                      https://shi-labs.com/projects/convmlp/checkpoints/convmlp_m_cifar100.pth
#   ROG_CONVMLP_SHA256 pin the weights' sha256 (no published checksum exists; without a pin the script
#                      records the sha256 it saw in DIR/convmlp_m_cifar100.pth.sha256)
#   ROG_DOWNLOADER     curl (default when installed) or wget
#   ROG_DATA_MANIFEST  read the manifest from this file instead of the built-in one (used by tests)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${ROG_DATA_DIR:-$ROOT/data}"
LFS_BASE="${ROG_DATA_BASE_URL:-https://media.githubusercontent.com/media/hku-systems/ROG/main}"
RAW_BASE="${ROG_RAW_BASE_URL:-https://raw.githubusercontent.com/hku-systems/ROG/main}"
CONVMLP_URL="${ROG_CONVMLP_URL:-https://shi-labs.com/projects/convmlp/checkpoints/convmlp_m_cifar100.pth}"
CONVMLP_SHA256="${ROG_CONVMLP_SHA256:--}"
MIN_WEIGHTS_BYTES=1000000  # an unpinned weights file smaller than this is an error page, not 17 M parameters

# name  source  path-in-source  destination  size-bytes  checksum  [optional]
# Sizes and checksums of the published files (facts about them; do not edit casually).
builtin_manifest() {
    cat <<EOF
train     lfs  datasets/mixed_fed_cifar100_train.h5   mixed_fed_cifar100_train.h5   160100966  sha256:40e6530cd21dd61bc57c047f7b09c9bfa541b954e9b08263df39cfad9c3f0722
test      lfs  datasets/mixed_fed_cifar100_test.h5    mixed_fed_cifar100_test.h5    32039469   sha256:8b5ce6ff408a66f805942bc56a21ea3e96db80438439bd1b08cf7082a496ae2b
outdoors  raw  scripts/bw_records/outdoors.txt        bw_records/outdoors.txt       -          gitblob:181e06102f6af5b6047176000fb07ec1ae28f850
indoors   raw  scripts/bw_records/indoors.txt         bw_records/indoors.txt        -          gitblob:f5828b38bea245135789f74a9fa5eec9c7dd8b1e
weights   url  -                                      convmlp_m_cifar100.pth        -          sha256:${CONVMLP_SHA256}
train-pkl lfs  datasets/mixed_fed_cifar100_train.pkl  mixed_fed_cifar100_train.pkl  154048019  sha256:74e50f342c79fc0bd413363a46cabe9d954ac5c7018228d614790b96d2eb73e9  optional
test-pkl  lfs  datasets/mixed_fed_cifar100_test.pkl   mixed_fed_cifar100_test.pkl   30809574   sha256:7623a2ebe1bd9cf8fa9f52d43cfe3841ac11afe64bc424f745892edc086b138b  optional
EOF
}

manifest() {
    if [ -n "${ROG_DATA_MANIFEST:-}" ]; then
        grep -v '^[[:space:]]*\(#\|$\)' "$ROG_DATA_MANIFEST"
    else
        builtin_manifest
    fi
}

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

ONLY=""
WITH_PKL=0
LIST=0
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) [ $# -ge 2 ] || { echo "download_data.sh: --data-dir needs a directory" >&2; exit 2; }
                    DATA_DIR="$2"; shift 2 ;;
        --data-dir=*) DATA_DIR="${1#*=}"; shift ;;
        --only) [ $# -ge 2 ] || { echo "download_data.sh: --only needs names (e.g. --only train,test)" >&2; exit 2; }
                ONLY="$2"; shift 2 ;;
        --only=*) ONLY="${1#*=}"; shift ;;
        --with-pkl) WITH_PKL=1; shift ;;
        --list) LIST=1; shift ;;
        --print-manifest) manifest; exit 0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "download_data.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -n "${ROG_DATA_MANIFEST:-}" ] && [ ! -r "$ROG_DATA_MANIFEST" ]; then
    echo "download_data.sh: ROG_DATA_MANIFEST=$ROG_DATA_MANIFEST is not a readable file" >&2; exit 2
fi
if [ -n "$ONLY" ]; then
    known=" $(manifest | awk '{print $1}' | tr '\n' ' ') "
    for n in ${ONLY//,/ }; do
        case "$known" in *" $n "*) ;; *) echo "download_data.sh: --only: unknown name '$n'; choose from:$known" >&2; exit 2 ;; esac
    done
fi

selected() {  # selected NAME OPTIONAL-FLAG
    if [ -n "$ONLY" ]; then
        case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac
    fi
    [ "$2" != "optional" ] || [ "$WITH_PKL" = 1 ]
}

url_for() {  # url_for SOURCE PATH
    case "$1" in
        lfs) echo "${LFS_BASE%/}/$2" ;;
        raw) echo "${RAW_BASE%/}/$2" ;;
        url) echo "$CONVMLP_URL" ;;
        *) echo "" ;;
    esac
}

# ------------------------------------------------------------------------------ tools
DOWNLOADER="${ROG_DOWNLOADER:-}"
if [ -z "$DOWNLOADER" ]; then
    if command -v curl >/dev/null 2>&1; then DOWNLOADER=curl
    elif command -v wget >/dev/null 2>&1; then DOWNLOADER=wget
    fi
fi

file_size() { wc -c < "$1" | tr -d ' '; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
    else python3 -c 'import hashlib,sys;h=hashlib.sha256();f=open(sys.argv[1],"rb");[h.update(b) for b in iter(lambda:f.read(1<<20),b"")];print(h.hexdigest())' "$1"
    fi
}

gitblob_of() {  # git's blob id: sha1 of "blob <size>\0" + content
    if command -v git >/dev/null 2>&1; then git hash-object --no-filters "$1"
    else { printf 'blob %s\0' "$(file_size "$1")"; cat "$1"; } | sha1sum | cut -d' ' -f1
    fi
}

fetch() {  # fetch URL PART RESUME(0/1): append to PART (resume) or start afresh; progress on stderr
    local url="$1" part="$2" resume="$3"
    [ "$resume" = 1 ] || rm -f "$part"
    case "$DOWNLOADER" in
        curl) curl -fL --retry 3 --retry-delay 2 --connect-timeout 30 --progress-bar -C - -o "$part" "$url" < /dev/null ;;
        wget) wget -c --tries=3 --timeout=30 --progress=bar:force -O "$part" "$url" < /dev/null ;;
        *) return 127 ;;
    esac
}

why_failed() {  # a reading of the downloader's exit status (curl's codes; wget: 4 network, 8 server error)
    case "$DOWNLOADER:$1" in
        curl:6|curl:7|wget:4) echo ": cannot reach the host (no network, or a proxy is needed)" ;;
        curl:22|wget:8) echo ": the server answered with an HTTP error such as 404 (the URL may have moved: override it, see --help)" ;;
        curl:28) echo ": timed out" ;;
        curl:18|curl:56) echo ": the transfer broke off" ;;
        curl:37) echo ": cannot read the file:// source" ;;
        *) echo "" ;;
    esac
}

# verify FILE SIZE CHECKSUM -> sets VERIFY_MSG; returns 0 ok, 1 bad (incomplete = 3, unpinned-ok = 4)
verify() {
    local f="$1" size="$2" sum="$3" algo="${3%%:*}" want="${3#*:}" have got
    have="$(file_size "$f")"
    if head -c 200 "$f" | grep -q '^version https://git-lfs'; then
        VERIFY_MSG="got a Git LFS pointer file ($have bytes), not the data: the LFS media URL form may have changed; set ROG_DATA_BASE_URL"
        return 1
    fi
    if [ "$size" != "-" ]; then
        if [ "$have" -lt "$size" ]; then VERIFY_MSG="incomplete: $have of $size bytes"; return 3; fi
        if [ "$have" -gt "$size" ]; then VERIFY_MSG="size mismatch: $have bytes, expected $size"; return 1; fi
    fi
    case "$algo" in
        sha256) got="$(sha256_of "$f")" ;;
        gitblob) got="$(gitblob_of "$f")" ;;
        *) VERIFY_MSG="unknown checksum kind '$algo' in the manifest"; return 1 ;;
    esac
    if [ "$want" = "-" ]; then
        if [ "$have" -lt "$MIN_WEIGHTS_BYTES" ] || [ "$(head -c 1 "$f")" = "<" ]; then
            VERIFY_MSG="implausible file ($have bytes$( [ "$(head -c 1 "$f")" = "<" ] && echo ', looks like an HTML page')); check the URL"
            return 1
        fi
        VERIFY_MSG="unpinned (no published checksum): $algo $got, $have bytes"
        return 4
    fi
    if [ "$got" != "$want" ]; then
        VERIFY_MSG="checksum mismatch: $algo $got, expected $want"
        return 1
    fi
    VERIFY_MSG="$algo verified, $have bytes"
    return 0
}

# ------------------------------------------------------------------------------ main
if [ "$LIST" = 1 ]; then
    echo "data dir: $DATA_DIR"
    manifest | while read -r name src path dest size sum opt; do
        selected "$name" "${opt:-}" || continue
        printf '%-9s %s -> %s (%s)\n' "$name" "$(url_for "$src" "$path")" "$DATA_DIR/$dest" "$sum"
    done
    exit 0
fi

if [ -z "$DOWNLOADER" ] || ! command -v "$DOWNLOADER" >/dev/null 2>&1; then
    echo "download_data.sh: need curl or wget (ROG_DOWNLOADER='${ROG_DOWNLOADER:-}'); install one (apt-get install curl)" >&2
    exit 1
fi
mkdir -p "$DATA_DIR" || { echo "download_data.sh: cannot create data dir $DATA_DIR" >&2; exit 1; }

declare -a SUMMARY=()
FAILED=0
record() {  # record NAME STATUS DETAIL
    SUMMARY+=("$(printf '%-9s %-7s %s' "$1" "$2" "$3")")
    [ "$2" != "FAILED" ] || FAILED=$((FAILED + 1))
}

while read -r name src path dest size sum opt; do
    selected "$name" "${opt:-}" || continue
    url="$(url_for "$src" "$path")"
    out="$DATA_DIR/$dest"
    part="$out.part"
    mkdir -p "$(dirname "$out")"
    if [ -z "$url" ]; then record "$name" FAILED "unknown source '$src' in the manifest"; continue; fi

    if [ -f "$out" ]; then
        verify "$out" "$size" "$sum"; rc=$?
        if [ $rc = 0 ] || [ $rc = 4 ]; then
            record "$name" present "$VERIFY_MSG"; echo "[$name] already present: $VERIFY_MSG"; continue
        fi
        echo "[$name] $out present but $VERIFY_MSG; moving it to $out.bad and downloading again" >&2
        mv -f "$out" "$out.bad"
    fi

    resume=1
    [ "$src" = raw ] && resume=0  # small files: always fetch afresh
    if [ -f "$part" ] && [ "$size" != "-" ]; then
        have="$(file_size "$part")"
        if [ "$have" -gt "$size" ]; then rm -f "$part"
        elif [ "$have" -gt 0 ]; then echo "[$name] resuming at $have of $size bytes"
        fi
    fi
    if ! { [ -f "$part" ] && [ "$size" != "-" ] && [ "$(file_size "$part")" = "$size" ]; }; then
        had_part=0; [ -s "$part" ] && [ "$resume" = 1 ] && had_part=1
        echo "[$name] $url -> $out"
        fetch "$url" "$part" "$resume"; frc=$?
        if [ $frc != 0 ] && [ "$had_part" = 1 ] && [ "$size" = "-" ]; then
            echo "[$name] resume refused (exit $frc); starting afresh" >&2
            fetch "$url" "$part" 0; frc=$?
        fi
        if [ $frc != 0 ]; then
            kept=""; [ -s "$part" ] && kept="; partial data kept in $part, run again to resume"
            record "$name" FAILED "download failed ($DOWNLOADER exit $frc$(why_failed "$frc")) from $url$kept"
            continue
        fi
    fi
    verify "$part" "$size" "$sum"; rc=$?
    case $rc in
        0|4)
            mv -f "$part" "$out"
            if [ $rc = 4 ]; then
                sha256_of "$out" > "$out.sha256"
                record "$name" ok "$VERIFY_MSG (recorded in $dest.sha256; pin it with ROG_CONVMLP_SHA256)"
            else
                record "$name" ok "$VERIFY_MSG"
            fi
            ;;
        3) record "$name" FAILED "$VERIFY_MSG; partial data kept in $part, run again to resume" ;;
        *)
            mv -f "$part" "$out.bad"
            record "$name" FAILED "$VERIFY_MSG; the download was moved to $dest.bad (run again to retry; if it persists the upstream file changed)"
            ;;
    esac
done < <(manifest)

echo
echo "download_data.sh summary (data dir: $DATA_DIR)"
if [ ${#SUMMARY[@]} -eq 0 ]; then echo "  nothing selected"; fi
for line in "${SUMMARY[@]}"; do echo "  $line"; done
if [ "$FAILED" -gt 0 ]; then
    echo "$FAILED item(s) FAILED; see the reasons above. Nothing unverified was installed under its final name."
    exit 1
fi
echo "all selected items verified."
exit 0
