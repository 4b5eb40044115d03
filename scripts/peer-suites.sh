#!/usr/bin/env bash
# The peers' own BSPlib programs, built against bulkwire and run: MulticoreBSP for C's
# examples (C and C++), BSPonMPI's API tests and BSPedupack's programs. Nothing of theirs
# is in this repository: the sources come from a local directory (--src DIR, holding
# their source trees or release archives, as a machine without internet has them) or are
# fetched at run time (--fetch) from their public locations into the work directory.
#
#   scripts/peer-suites.sh --src ~/peers            # trees or archives in ~/peers
#   scripts/peer-suites.sh --fetch                  # downloads them first
#
# Options: --work DIR (default: target/peer-suites), --bin DIR (where bspcc, bspcxx and
# bsprun are; default: target/release, else target/debug, else PATH), --np P (processes
# per run, default 2), --timeout S (per run, default 60), --only NAME (mcbsp, bsponmpi or
# bspedupack), --bsponmpi-hooks FILE.c (a stand-in for the test hooks some of BSPonMPI's
# tests call, linked into each). A peer whose sources are not found is skipped, saying so.
#
# Each program is built with bspcc (bspcxx) and run with bsprun -n P, its input on stdin
# (MulticoreBSP's examples and BSPedupack's programs ask for the number of processes and
# a size). A program passes when it exits 0, or, for BSPonMPI's tests that must abort
# (those its CMake file marks WILL_FAIL), when it exits non-zero within the time limit.
# The last lines are one count per peer:
#
#   PEER: built B of N, passed K of B (failed F, timed out T)
#
# and the log of every build and run is in the work directory.
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
src="" fetch=0 work="$here/target/peer-suites" bin="" np=2 limit=60 only="" hooks=""
while [ $# -gt 0 ]; do
    case "$1" in
    --src) src=$2; shift 2 ;;
    --fetch) fetch=1; shift ;;
    --work) work=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --bsponmpi-hooks) hooks=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer-suites: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$src" ] && [ "$fetch" = 0 ]; then
    echo "peer-suites: give --src DIR (the peers' sources) or --fetch" >&2
    exit 2
fi

# The public locations (--fetch). An archive or a git repository.
MCBSP_URL=${MCBSP_URL:-http://www.multicorebsp.com/downloads/c/2.0.4/MulticoreBSP-for-C.tar.xz}
BSPONMPI_URL=${BSPONMPI_URL:-https://github.com/wijnand-suijlen/bsponmpi.git}
BSPEDUPACK_URL=${BSPEDUPACK_URL:-https://webspace.science.uu.nl/~bisse101/Software/BSPedupack2.0.tar}

if [ -z "$bin" ]; then
    for d in "$here/target/release" "$here/target/debug"; do
        if [ -x "$d/bspcc" ] && [ -x "$d/bsprun" ]; then bin=$d; break; fi
    done
fi
tool() {
    if [ -n "$bin" ]; then echo "$bin/$1"; else command -v "$1"; fi
}
BSPCC=$(tool bspcc) BSPCXX=$(tool bspcxx) BSPRUN=$(tool bsprun)
for t in "$BSPCC" "$BSPCXX" "$BSPRUN"; do
    if [ ! -x "$t" ]; then
        echo "peer-suites: $t not found: build them first (cargo build --release -p bulkwire-capi -p bulkwire-tools)" >&2
        exit 2
    fi
done

mkdir -p "$work/src" "$work/logs" "$work/bin" || exit 2
log="$work/logs"
[ "$fetch" = 1 ] && src="$work/download"
mkdir -p "$src"

# Unpacks every archive of the source directory once, into the work directory.
unpack() {
    local a
    for a in "$src"/*; do
        case "$a" in
        *.tar | *.tar.gz | *.tgz | *.tar.xz | *.tar.bz2)
            local stamp="$work/src/.$(basename "$a").done"
            [ -e "$stamp" ] || { tar -xf "$a" -C "$work/src" && touch "$stamp"; } ;;
        *.zip)
            local stamp="$work/src/.$(basename "$a").done"
            [ -e "$stamp" ] || { unzip -q -o "$a" -d "$work/src" && touch "$stamp"; } ;;
        esac
    done
}

download() {
    local url=$1 name=$2
    [ -e "$src/$name" ] && return 0
    case "$url" in
    *.git) git clone -q --depth 1 "$url" "$src/$name" ;;
    *) curl -fsSL -o "$src/$name" "$url" ;;
    esac || echo "peer-suites: cannot fetch $url" >&2
}

if [ "$fetch" = 1 ]; then
    download "$MCBSP_URL" "$(basename "$MCBSP_URL")"
    download "$BSPONMPI_URL" bsponmpi
    download "$BSPEDUPACK_URL" "$(basename "$BSPEDUPACK_URL")"
fi
unpack

# The first directory under the sources or the work directory whose name matches.
find_tree() {
    local d
    for d in "$src"/$1 "$work/src"/$1; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 1
}

SUMMARY=()
# count PEER BUILT TOTAL PASSED FAILED TIMEDOUT
count() {
    SUMMARY+=("$1: built $2 of $3, passed $4 of $2 (failed $5, timed out $6)")
}

# run NAME EXE INPUT EXPECT(ok|fail) -> 0 pass, 1 fail, 2 timeout
run_one() {
    local name=$1 exe=$2 input=$3 expect=$4 rc
    printf '%b' "$input" | timeout -k 5 "$limit" "$BSPRUN" -n "$np" "$exe" \
        >"$log/$name.out" 2>"$log/$name.err"
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then return 2; fi
    if [ "$expect" = ok ]; then [ $rc = 0 ] && return 0; return 1; fi
    [ $rc != 0 ] && return 0
    return 1
}

tally() { # tally RESULT: adds to the counters of the caller
    case $1 in 0) passed=$((passed + 1)) ;; 1) failed=$((failed + 1)) ;; 2) timedout=$((timedout + 1)) ;; esac
}

# MulticoreBSP for C: every example, C with bspcc --mcbsp, C++ with bspcxx --mcbsp.
mcbsp() {
    local tree
    tree=$(find_tree 'MulticoreBSP-for-C*') || tree=$(find_tree 'mcbsp*') || {
        echo "peer-suites: MulticoreBSP for C not found in $src: skipped" >&2
        return
    }
    local total=0 built=0 passed=0 failed=0 timedout=0 f name exe cc
    for f in "$tree"/examples/*.c "$tree"/examples/*.cpp; do
        [ -e "$f" ] || continue
        total=$((total + 1))
        name=mcbsp-$(basename "${f%.*}")
        exe="$work/bin/$name"
        cc=$BSPCC
        case "$f" in *.cpp) cc=$BSPCXX ;; esac
        if ! "$cc" --mcbsp -O2 -I "$tree/examples" "$f" -o "$exe" >"$log/$name.build" 2>&1; then
            continue
        fi
        built=$((built + 1))
        run_one "$name" "$exe" "$np\n" ok
        tally $?
    done
    count "MulticoreBSP for C examples" $built $total $passed $failed $timedout
}

# BSPonMPI: its API tests (test/*.c), the int dialect; those its CMake file marks
# WILL_FAIL must abort.
bsponmpi() {
    local tree
    tree=$(find_tree 'bsponmpi*') || tree=$(find_tree 'BSPonMPI*') || {
        echo "peer-suites: BSPonMPI not found in $src: skipped" >&2
        return
    }
    local tests="$tree/test"
    [ -d "$tests" ] || tests="$tree/tests"
    local must_fail=""
    if [ -f "$tests/CMakeLists.txt" ]; then
        # Names in set_tests_properties(... PROPERTIES WILL_FAIL TRUE) lines.
        must_fail=$(grep -i 'WILL_FAIL' "$tests/CMakeLists.txt" | grep -o '[A-Za-z0-9_]\+' |
            grep -v -i -x 'set_tests_properties\|properties\|will_fail\|true\|on')
    fi
    local total=0 built=0 passed=0 failed=0 timedout=0 f name exe expect
    for f in "$tests"/*.c; do
        [ -e "$f" ] || continue
        name=$(basename "${f%.c}")
        # The test hooks' own sources are no tests.
        case "$name" in test* | *_util | *harness*) continue ;; esac
        total=$((total + 1))
        exe="$work/bin/bsponmpi-$name"
        if ! "$BSPCC" -O2 -I "$tests" "$f" ${hooks:+"$hooks"} -o "$exe" \
            >"$log/bsponmpi-$name.build" 2>&1; then
            continue
        fi
        built=$((built + 1))
        expect=ok
        if printf '%s\n' "$must_fail" | grep -q -x "$name"; then expect=fail; fi
        run_one "bsponmpi-$name" "$exe" "" $expect
        tally $?
    done
    count "BSPonMPI tests" $built $total $passed $failed $timedout
}

# BSPedupack: built by its own Makefile with CC=bspcc; each program asked for P and a
# small size.
bspedupack() {
    local tree
    tree=$(find_tree 'BSPedupack*') || tree=$(find_tree 'bspedupack*') || {
        echo "peer-suites: BSPedupack not found in $src: skipped" >&2
        return
    }
    local total=0 built=0 passed=0 failed=0 timedout=0 p
    make -C "$tree" CC="$BSPCC" >"$log/bspedupack.build" 2>&1
    for p in inprod bench sort lu fft matvec match; do
        total=$((total + 1))
        local exe
        exe=$(ls "$tree"/*"$p"* 2>/dev/null | while read -r x; do
            [ -x "$x" ] && [ -f "$x" ] && echo "$x"
        done | head -n 1)
        [ -n "$exe" ] || continue
        built=$((built + 1))
        run_one "bspedupack-$p" "$exe" "$np\n64\n" ok
        tally $?
    done
    count "BSPedupack programs" $built $total $passed $failed $timedout
}

case "$only" in
"") mcbsp; bsponmpi; bspedupack ;;
mcbsp) mcbsp ;;
bsponmpi) bsponmpi ;;
bspedupack) bspedupack ;;
*) echo "peer-suites: --only takes mcbsp, bsponmpi or bspedupack" >&2; exit 2 ;;
esac
echo "logs: $log"
for l in "${SUMMARY[@]}"; do echo "$l"; done
